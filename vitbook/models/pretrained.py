"""A pretrained torchvision ViT-B/16 as a frozen feature extractor with a new classifier head.

Transfer learning in its simplest form: keep every weight of a ViT-B/16 trained on ImageNet
fixed, replace the 1000-class head by a fresh ``nn.Linear(768, num_classes)`` and train only
that. The weights' own preprocessing (``weights.transforms()``) comes with it; it needs no
download. Offline (:func:`~vitbook.data.network.set_offline`), or when the download fails and ``fallback`` is True,
the same code path runs on an UNTRAINED backbone, announced by one ``[STAND-IN]`` line.
With ``BOOK_FIXTURES=1`` the weights in torch's hub cache are a test fixture (random values
with the real keys and shapes), announced by one ``[FIXTURE]`` line.
"""

from __future__ import annotations

from typing import Any

from torch import nn
from torchvision.models import VisionTransformer, ViT_B_16_Weights, vit_b_16

from going_modular.data.checks import check_sizes
from going_modular.models.registry import register_model
from vitbook.data.download import DownloadError
from vitbook.data.network import (
    OFFLINE,
    announce_fixture,
    is_offline,
    uses_fixtures,
)

__all__ = [
    "create_vit_feature_extractor",
    "load_pretrained_vit_b_16",
    "resolve_weights",
    "vit_b_16_pretrained",
    "weights_image_size",
    "weights_transforms",
]

WeightsLike = str | ViT_B_16_Weights | None


def resolve_weights(weights: WeightsLike) -> ViT_B_16_Weights | None:
    """A ``ViT_B_16_Weights`` member from an enum, a name (``"DEFAULT"``,
    ``"IMAGENET1K_SWAG_E2E_V1"``, ``"ViT_B_16_Weights.IMAGENET1K_V1"``) or None."""
    if weights is None or isinstance(weights, ViT_B_16_Weights):
        return weights
    name = str(weights).removeprefix("ViT_B_16_Weights.")
    try:
        return ViT_B_16_Weights[name]
    except KeyError:
        choices = ", ".join(ViT_B_16_Weights.__members__)
        raise ValueError(
            f"Unknown ViT-B/16 weights {weights!r}; choose one of: {choices}."
        ) from None


def weights_image_size(weights: WeightsLike) -> int:
    """The image size the weights were trained at (224 for DEFAULT, 384 for SWAG E2E)."""
    enum = resolve_weights(weights) or ViT_B_16_Weights.DEFAULT
    return int(enum.meta["min_size"][0])


def weights_transforms(weights: WeightsLike) -> nn.Module:
    """The weights' own preprocessing (resize, centre crop, normalise); works offline.

    For ``weights=None`` the DEFAULT weights' transforms, so an untrained model sees the same
    input pipeline.
    """
    return (resolve_weights(weights) or ViT_B_16_Weights.DEFAULT).transforms()


def _size_message(enum: ViT_B_16_Weights, img_size: int) -> str:
    expected = weights_image_size(enum)
    return (
        f"The ViT-B/16 weights {enum.name} were trained at {expected}x{expected} and their "
        f"position embeddings fit that size only; got img_size={img_size}. Use "
        f"img_size={expected}, or weights trained at your size (IMAGENET1K_SWAG_E2E_V1 is 384)."
    )


def _stand_in_line(enum: ViT_B_16_Weights, why: str) -> str:
    return (
        f"[STAND-IN] pretrained ViT-B/16 weights ({enum.name}) {why}: using an UNTRAINED "
        "ViT-B/16 backbone (random weights, frozen the same way) instead; its accuracy says "
        "nothing about pretrained ViTs."
    )


def load_pretrained_vit_b_16(
    weights: WeightsLike = "DEFAULT", *, fallback: bool = True
) -> VisionTransformer | None:
    """torchvision's ViT-B/16 with pretrained ``weights`` (and their ImageNet head).

    Downloads the weights once into torch's hub cache (``TORCH_HOME``). Offline, or when the
    download fails and ``fallback`` is True, prints one ``[STAND-IN]`` line and returns
    None; with ``fallback=False`` it raises :class:`~vitbook.data.download.DownloadError`.
    """
    enum = resolve_weights(weights) or ViT_B_16_Weights.DEFAULT
    if is_offline():
        if not fallback:
            raise DownloadError(
                f"Could not download {enum.url}: the library is {OFFLINE}, which forbids "
                "network access. Call set_offline(False) (or unset BOOK_OFFLINE for the "
                "book) to download the pretrained weights, or pass fallback=True to run "
                "on an untrained stand-in backbone."
            )
        print(_stand_in_line(enum, "are not available offline"))
        return None
    try:
        model = vit_b_16(weights=enum, progress=True)
    except (
        OSError,
        RuntimeError,
    ) as error:  # URLError is an OSError; bad hash: Runtime
        if not fallback:
            raise DownloadError(
                f"Could not download {enum.url}: {error}. Check your connection and "
                "retry (a half-written file in torch's hub cache can be deleted), or "
                "pass fallback=True to run on an untrained stand-in backbone."
            ) from error
        print(f"[INFO] Could not get the pretrained weights: {error}")
        print(_stand_in_line(enum, "could not be downloaded"))
        return None
    if uses_fixtures():
        announce_fixture(
            f"ViT-B/16 weights {enum.name}",
            "random values with the real keys and shapes",
        )
    return model


def create_vit_feature_extractor(
    num_classes: int,
    weights: WeightsLike = "DEFAULT",
    *,
    fallback: bool = True,
    img_size: int | None = None,
) -> tuple[VisionTransformer, nn.Module, bool]:
    """torchvision's ViT-B/16 with a frozen backbone and a new trainable ``heads`` Linear.

    Args:
        num_classes: outputs of the new head.
        weights: a ``ViT_B_16_Weights`` member or its name (``"DEFAULT"`` = ``IMAGENET1K_V1``
            at 224 px, ``"IMAGENET1K_SWAG_E2E_V1"`` at 384 px, ...); None for an untrained
            backbone on purpose (no ``[STAND-IN]`` line then).
        fallback: offline or after a failed download, return an untrained backbone (frozen
            too, so the code path is the same) and print one ``[STAND-IN]`` line; if False,
            raise :class:`~vitbook.data.download.DownloadError` instead.
        img_size: only with ``weights=None``: the image size of the untrained backbone
            (default 224); pretrained weights fix it (224, or 384 for SWAG E2E).

    Returns:
        ``(model, transforms, pretrained)``: ``transforms`` are the weights' own, and
        ``pretrained`` says whether pretrained weights were actually loaded. The model records
        how to rebuild it without any download (``build_config`` with ``weights=None``), so
        :func:`going_modular.utils.load_model` can restore a saved checkpoint offline.
    """
    check_sizes(num_classes=num_classes)
    enum = resolve_weights(weights)
    if enum is not None and img_size not in (None, weights_image_size(enum)):
        raise ValueError(_size_message(enum, img_size))
    image_size = img_size or weights_image_size(enum)
    model = None
    if enum is not None:
        model = load_pretrained_vit_b_16(enum, fallback=fallback)
    pretrained = model is not None
    if model is None:
        model = vit_b_16(weights=None, image_size=image_size)
    for param in model.parameters():
        param.requires_grad = False
    model.heads = nn.Linear(model.hidden_dim, num_classes)  # new, trainable
    model.build_config = {
        "name": "vit_b_16_pretrained",
        "kwargs": {
            "num_classes": num_classes,
            "img_size": image_size,
            "weights": None,  # the checkpoint holds every weight: no download to rebuild
        },
    }
    return model, weights_transforms(enum), pretrained


@register_model
def vit_b_16_pretrained(
    num_classes: int = 3,
    img_size: int = 224,
    in_channels: int = 3,
    weights: WeightsLike = "DEFAULT",
    fallback: bool = True,
    **kw: Any,
) -> VisionTransformer:
    """The frozen ViT-B/16 feature extractor of :func:`create_vit_feature_extractor`, by name.

    ``img_size`` must be the size the weights were trained at (224, or 384 for SWAG E2E);
    with ``weights=None`` (an untrained backbone, e.g. to reload a checkpoint) any multiple
    of 16.
    """
    if kw:
        raise TypeError(f"vit_b_16_pretrained got unexpected arguments: {sorted(kw)}.")
    if in_channels != 3:
        raise ValueError(
            f"Pretrained ViT-B/16 weights take RGB images (3 channels), not {in_channels}."
        )
    enum = resolve_weights(weights)
    if enum is not None and img_size != weights_image_size(enum):
        raise ValueError(_size_message(enum, img_size))
    if img_size % 16:
        raise ValueError(
            f"img_size must be a multiple of the patch size 16, got {img_size}."
        )
    model, _, _ = create_vit_feature_extractor(
        num_classes, enum, fallback=fallback, img_size=img_size
    )
    return model
