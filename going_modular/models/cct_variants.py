"""The CCT and CVT families, and every compact transformer buildable by name: ViT-Lite, CVT
and CCT at the sizes of Hassani et al. (2021), registered with
:func:`~going_modular.models.registry.register_model`.

Names follow the paper: ``cct_7_3x1`` has 7 encoder layers and 1 convolution with a 3x3
kernel; ``vit_lite_7_4`` and ``cvt_7_4`` have 7 layers and 4x4 patches. The parts and
ViT-Lite are in ``cct``; ``going_modular.models`` imports this module to register the factories.
"""

from __future__ import annotations

from typing import Any

from going_modular.models.cct import CompactTransformer, Tokenizer, ViTLite
from going_modular.models.registry import register_model

__all__ = [
    "CCT",
    "CVT",
    "SIZES",
    "vit_lite_2_4",
    "vit_lite_4_4",
    "vit_lite_6_4",
    "vit_lite_7_4",
    "cvt_2_4",
    "cvt_4_4",
    "cvt_6_4",
    "cvt_7_4",
    "cct_2_3x2",
    "cct_4_3x2",
    "cct_6_3x1",
    "cct_6_3x2",
    "cct_7_3x1",
    "cct_7_3x2",
    "cct_7_7x2",
    "cct_14_7x2",
    "reference_stride_padding",
]


def reference_stride_padding(
    kernel_size: int, stride: int | None = None, padding: int | None = None
) -> tuple[int, int]:
    """The reference's conv stride and padding for a kernel, unless given:
    ``max(1, k // 2 - 1)`` and ``max(1, k // 2)`` (3x3: stride 1, padding 1; 7x7: 2, 3)."""
    if stride is None:
        stride = max(1, kernel_size // 2 - 1)
    if padding is None:
        padding = max(1, kernel_size // 2)
    return stride, padding


class CCT(CompactTransformer):
    """Compact Convolutional Transformer: ``n_conv_layers`` x [conv, ReLU, max-pool], SeqPool.

    Stride and padding default to the reference's (:func:`reference_stride_padding`). Other
    keywords go to :class:`CompactTransformer`.
    """

    def __init__(
        self,
        *,
        img_size: int | tuple[int, int] = 32,
        in_channels: int = 3,
        dim: int = 256,
        n_conv_layers: int = 1,
        kernel_size: int = 3,
        stride: int | None = None,
        padding: int | None = None,
        **kwargs: Any,
    ):
        stride, padding = reference_stride_padding(kernel_size, stride, padding)
        tokenizer = Tokenizer(
            in_channels, dim, kernel_size, stride, padding, n_conv_layers=n_conv_layers
        )
        super().__init__(tokenizer, img_size, dim=dim, **kwargs)


class CVT(ViTLite):
    """Compact Vision Transformer: ViT-Lite with SeqPool instead of a class token."""

    def __init__(self, *, pool: str = "seq", **kwargs: Any):
        super().__init__(pool=pool, **kwargs)


# Registered factories: the paper's sizes as keywords -------------------------------------------

# ViT-Lite-L/P and CVT-L/P: L layers, PxP patches. CCT-L/KxC: L layers, C convs of kernel K.
# L layers -> the paper's sizes (also the text CCT's).
SIZES: dict[int, dict[str, Any]] = {
    2: dict(depth=2, dim=128, heads=2, mlp_ratio=1.0),
    4: dict(depth=4, dim=128, heads=2, mlp_ratio=1.0),
    6: dict(depth=6, dim=256, heads=4, mlp_ratio=2.0),
    7: dict(depth=7, dim=256, heads=4, mlp_ratio=2.0),
    14: dict(depth=14, dim=384, heads=6, mlp_ratio=3.0),
}
_PATCH_4 = dict(patch_size=4)
_CONV_3X1 = dict(kernel_size=3, n_conv_layers=1)
_CONV_3X2 = dict(kernel_size=3, n_conv_layers=2)
_CONV_7X2 = dict(img_size=224, kernel_size=7, n_conv_layers=2)


@register_model
def vit_lite_2_4(**kwargs: Any) -> ViTLite:
    """ViT-Lite-2/4: 2 layers, dim 128, 2 heads, MLP ratio 1, 4x4 patches."""
    return ViTLite(**{**SIZES[2], **_PATCH_4, **kwargs})


@register_model
def vit_lite_4_4(**kwargs: Any) -> ViTLite:
    """ViT-Lite-4/4: 4 layers, dim 128, 2 heads, MLP ratio 1, 4x4 patches."""
    return ViTLite(**{**SIZES[4], **_PATCH_4, **kwargs})


@register_model
def vit_lite_6_4(**kwargs: Any) -> ViTLite:
    """ViT-Lite-6/4: 6 layers, dim 256, 4 heads, MLP ratio 2, 4x4 patches."""
    return ViTLite(**{**SIZES[6], **_PATCH_4, **kwargs})


@register_model
def vit_lite_7_4(**kwargs: Any) -> ViTLite:
    """ViT-Lite-7/4: 7 layers, dim 256, 4 heads, MLP ratio 2, 4x4 patches."""
    return ViTLite(**{**SIZES[7], **_PATCH_4, **kwargs})


@register_model
def cvt_2_4(**kwargs: Any) -> CVT:
    """CVT-2/4: 2 layers, dim 128, 2 heads, MLP ratio 1, 4x4 patches, SeqPool."""
    return CVT(**{**SIZES[2], **_PATCH_4, **kwargs})


@register_model
def cvt_4_4(**kwargs: Any) -> CVT:
    """CVT-4/4: 4 layers, dim 128, 2 heads, MLP ratio 1, 4x4 patches, SeqPool."""
    return CVT(**{**SIZES[4], **_PATCH_4, **kwargs})


@register_model
def cvt_6_4(**kwargs: Any) -> CVT:
    """CVT-6/4: 6 layers, dim 256, 4 heads, MLP ratio 2, 4x4 patches, SeqPool."""
    return CVT(**{**SIZES[6], **_PATCH_4, **kwargs})


@register_model
def cvt_7_4(**kwargs: Any) -> CVT:
    """CVT-7/4: 7 layers, dim 256, 4 heads, MLP ratio 2, 4x4 patches, SeqPool."""
    return CVT(**{**SIZES[7], **_PATCH_4, **kwargs})


@register_model
def cct_2_3x2(**kwargs: Any) -> CCT:
    """CCT-2/3x2: 2 layers, dim 128, 2 heads, MLP ratio 1, two 3x3 convs."""
    return CCT(**{**SIZES[2], **_CONV_3X2, **kwargs})


@register_model
def cct_4_3x2(**kwargs: Any) -> CCT:
    """CCT-4/3x2: 4 layers, dim 128, 2 heads, MLP ratio 1, two 3x3 convs."""
    return CCT(**{**SIZES[4], **_CONV_3X2, **kwargs})


@register_model
def cct_6_3x1(**kwargs: Any) -> CCT:
    """CCT-6/3x1: 6 layers, dim 256, 4 heads, MLP ratio 2, one 3x3 conv."""
    return CCT(**{**SIZES[6], **_CONV_3X1, **kwargs})


@register_model
def cct_6_3x2(**kwargs: Any) -> CCT:
    """CCT-6/3x2: 6 layers, dim 256, 4 heads, MLP ratio 2, two 3x3 convs."""
    return CCT(**{**SIZES[6], **_CONV_3X2, **kwargs})


@register_model
def cct_7_3x1(**kwargs: Any) -> CCT:
    """CCT-7/3x1: 7 layers, dim 256, 4 heads, MLP ratio 2, one 3x3 conv."""
    return CCT(**{**SIZES[7], **_CONV_3X1, **kwargs})


@register_model
def cct_7_3x2(**kwargs: Any) -> CCT:
    """CCT-7/3x2: 7 layers, dim 256, 4 heads, MLP ratio 2, two 3x3 convs."""
    return CCT(**{**SIZES[7], **_CONV_3X2, **kwargs})


@register_model
def cct_7_7x2(**kwargs: Any) -> CCT:
    """CCT-7/7x2: 7 layers, dim 256, 4 heads, MLP ratio 2, two 7x7 convs, 224x224 images."""
    return CCT(**{**SIZES[7], **_CONV_7X2, **kwargs})


@register_model
def cct_14_7x2(**kwargs: Any) -> CCT:
    """CCT-14/7x2: 14 layers, dim 384, 6 heads, MLP ratio 3, two 7x7 convs, 224x224 images."""
    return CCT(**{**SIZES[14], **_CONV_7X2, **kwargs})
