"""Models and facts about them beyond the course's package: torchvision's pretrained
ViT-B/16 (``pretrained``, registered as ``vit_b_16_pretrained``), weight conversion
(``convert``), parameter and FLOP counts (``complexity``) and chapter 7's shipped
backbone (``fashion_source``)."""

from vitbook.models import pretrained  # noqa: F401  (registers its factory)

__all__: list[str] = []
