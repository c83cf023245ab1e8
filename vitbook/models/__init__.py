"""Models and facts about them beyond the course's package.

``models.pretrained``      torchvision's pretrained ViT-B/16 as a feature extractor,
                           registered as ``vit_b_16_pretrained``
``models.fashion_source``  chapter 7's backbone, shipped as data; its SHA-256 checked
``models.convert``         weights saved under other names: key maps and their loaders
``models.complexity``      parameters, multiply-accumulates, FLOPs
"""

from vitbook.models import pretrained  # noqa: F401  (registers its factory)

__all__: list[str] = []
