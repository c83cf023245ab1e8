"""The Vision Transformer of "An Image is Worth 16x16 Words" (Dosovitskiy et al., 2021).

Figure 1 and section 3.1 of the paper, piece by piece:

* Eq. 1  ``z_0 = [x_class; x_p^1 E; ...; x_p^N E] + E_pos``  -> :class:`PatchEmbedding` (E),
  ``ViT.cls_token`` (x_class) and ``ViT.pos_embed`` (E_pos); section 3.1's hybrid, E on the
  patches of a CNN's feature map, is :class:`HybridEmbedding` (``stem_channels``)
* Eq. 2  ``z'_l = MSA(LN(z_{l-1})) + z_{l-1}``                 -> line 1 of ``Block.forward``
* Eq. 3  ``z_l = MLP(LN(z'_l)) + z'_l``                        -> line 2 of ``Block.forward``
* Eq. 4  ``y = LN(z_L^0)``, then a linear head                 -> ``ViT.norm``, ``ViT.head``

(:class:`~going_modular.models.layers.Block` is in ``layers.py``, shared by every model.)
Table 1's ViT-Base/Large/Huge are the registered ``vit_b_16``, ``vit_l_16`` and ``vit_h_14``;
``vit_4_16`` (4 layers, 16x16 patches; not timm's 12-layer ``vit_tiny_patch16_224``) and
``vit_cifar_p2`` are small ViTs for training from scratch. The attribute names and methods are
timm's: a timm ``VisionTransformer``'s state dict loads as it is, and
``forward(x) = forward_head(forward_features(x))``, where ``forward_features`` ends with the
final norm. The key maps of ``convert.py`` load torchvision's ViT and ``nn.TransformerEncoderLayer``.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import torch
from torch import nn

from going_modular.models.checks import (
    check_patch_grid,
    check_positive,
    check_rates,
    check_sizes,
)
from going_modular.models.layers import Block, collect_attention
from going_modular.models.registry import register_model
from going_modular.models.tinyvgg import vgg_block

__all__ = [
    "HybridEmbedding",
    "PatchEmbedding",
    "ViT",
    "vit_b_16",
    "vit_cifar_p2",
    "vit_h_14",
    "vit_l_16",
    "vit_4_16",
]


def _check_images(x: torch.Tensor, in_channels: int, patch_size: int) -> None:
    """Check that ``x`` is a (B, in_channels, H, W) batch whose sides ``patch_size`` divides."""
    if x.ndim != 4:
        raise ValueError(
            f"Expected a batch of images shaped (B, C, H, W), got shape {tuple(x.shape)}: "
            "add a batch dimension with x.unsqueeze(0)."
        )
    _, channels, height, width = x.shape
    if channels != in_channels:
        raise ValueError(
            f"Expected {in_channels} input channels, got {channels}: convert the images "
            f"(e.g. PIL's .convert('RGB')) or build the model with in_channels={channels}."
        )
    p = patch_size
    if height % p or width % p:
        h, w = max(p, height // p * p), max(p, width // p * p)
        example = str(h) if h == w else f"{h}x{w}"
        raise ValueError(
            f"Image size {height}x{width} is not divisible by patch size {p}: "
            f"resize or crop to a multiple of {p} (e.g. {example})."
        )


class PatchEmbedding(nn.Module):
    """Eq. 1's patches and linear projection: (B, C, H, W) images -> (B, N, dim) patch embeddings.

    A ``Conv2d`` whose kernel and stride both equal ``patch_size`` cuts the image into
    non-overlapping patches and applies the same linear map E to each one.
    """

    def __init__(self, in_channels: int = 3, patch_size: int = 16, dim: int = 768):
        super().__init__()
        check_sizes(in_channels=in_channels, patch_size=patch_size, dim=dim)
        self.in_channels = in_channels
        self.patch_size = patch_size
        self.proj = nn.Conv2d(
            in_channels, dim, kernel_size=patch_size, stride=patch_size
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_images(x, self.in_channels, self.patch_size)
        # (B, dim, H/p, W/p) -> (B, dim, N) -> (B, N, dim)
        return self.proj(x).flatten(2).transpose(1, 2)


class HybridEmbedding(nn.Module):
    """Section 3.1's hybrid input: (B, C, H, W) images -> a CNN's feature map -> (B, N, dim).

    The CNN is TinyVGG's feature extractor (chapter 0): two blocks of two 3x3 convolutions
    and a 2x2 max-pool, which shrink the image four times. E is a ``Conv2d`` with kernel and
    stride ``patch_size // 4`` on that map, so each token stands for the same ``patch_size``
    pixels square as :class:`PatchEmbedding`'s (N is unchanged), but is computed from the
    ``patch_size + 12`` pixels square around it (16 for 4-pixel patches).
    """

    def __init__(
        self,
        in_channels: int = 3,
        patch_size: int = 16,
        dim: int = 768,
        stem_channels: int = 64,
    ):
        super().__init__()
        check_sizes(
            in_channels=in_channels,
            patch_size=patch_size,
            dim=dim,
            stem_channels=stem_channels,
        )
        if patch_size % 4:
            raise ValueError(
                f"A hybrid's patch size must be a multiple of 4 (its stem shrinks the "
                f"image four times), got {patch_size}: use {patch_size // 4 * 4 + 4}."
            )
        self.in_channels = in_channels
        self.patch_size = patch_size
        self.stem = nn.Sequential(
            vgg_block(in_channels, stem_channels),
            vgg_block(stem_channels, stem_channels),
        )
        self.proj = nn.Conv2d(
            stem_channels, dim, kernel_size=patch_size // 4, stride=patch_size // 4
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_images(x, self.in_channels, self.patch_size)
        # (B, C, H, W) -> (B, c, H/4, W/4) -> (B, dim, H/p, W/p) -> (B, N, dim)
        return self.proj(self.stem(x)).flatten(2).transpose(1, 2)


class ViT(nn.Module):
    """The Vision Transformer of Figure 1: patch, class and position embeddings, ``depth``
    pre-norm blocks, a LayerNorm on the class token and a linear head.

    ``drop_rate`` is the paper's dropout after every dense layer but the qkv projection,
    ``pos_drop_rate`` its dropout on the embedded tokens (Appendix B.1). ``stem_channels``
    makes it section 3.1's hybrid (:class:`HybridEmbedding`, a convolutional stem of that
    width, as a CCT ``Tokenizer``'s); ``None`` keeps the plain ViT on patches of pixels.

    Initialisation, for training from scratch: the class and position embeddings and every
    Linear weight, head included (not zeros), ~ N(0, 0.02^2), as timm's
    ``trunc_normal_(std=.02)`` whose +-2 bounds never bite; the patch projection
    ~ N(0, 1 / fan_in) (LeCun normal, as torchvision), a hybrid's stem PyTorch's default;
    biases zero; LayerNorms weight one, bias zero.
    """

    def __init__(
        self,
        *,
        img_size: int = 224,
        patch_size: int = 16,
        in_channels: int = 3,
        num_classes: int = 1000,
        dim: int = 768,
        depth: int = 12,
        heads: int = 12,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        drop_rate: float = 0.1,
        attn_drop_rate: float = 0.0,
        pos_drop_rate: float = 0.1,
        layer_norm_eps: float = 1e-6,
        stem_channels: int | None = None,
    ):
        super().__init__()
        check_patch_grid(
            img_size, patch_size, in_channels, num_classes, dim, depth, heads
        )
        check_rates(pos_drop_rate=pos_drop_rate)
        check_positive(layer_norm_eps=layer_norm_eps)
        self.img_size = img_size
        self.patch_size = patch_size
        self.num_patches = (img_size // patch_size) ** 2
        self.patch_embed = (
            PatchEmbedding(in_channels, patch_size, dim)
            if stem_channels is None
            else HybridEmbedding(in_channels, patch_size, dim, stem_channels)
        )
        self.cls_token = nn.Parameter(torch.empty(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.empty(1, self.num_patches + 1, dim))
        self.pos_drop = nn.Dropout(pos_drop_rate)
        norm_layer = partial(nn.LayerNorm, eps=layer_norm_eps)
        self.blocks = nn.Sequential(
            *(
                Block(
                    dim,
                    heads,
                    mlp_ratio,
                    qkv_bias=qkv_bias,
                    drop_rate=drop_rate,
                    attn_drop_rate=attn_drop_rate,
                    norm_layer=norm_layer,
                )
                for _ in range(depth)
            )
        )
        self.norm = norm_layer(dim)
        self.head = nn.Linear(dim, num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        nn.init.normal_(self.cls_token, std=0.02)
        nn.init.normal_(self.pos_embed, std=0.02)
        proj = self.patch_embed.proj
        fan_in = proj.in_channels * proj.kernel_size[0] * proj.kernel_size[1]
        nn.init.normal_(proj.weight, std=math.sqrt(1 / fan_in))
        nn.init.zeros_(proj.bias)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def _embed(self, x: torch.Tensor) -> torch.Tensor:
        """Eq. 1: images (B, C, H, W) -> z_0 (B, N + 1, dim), after the embedding dropout."""
        patches = self.patch_embed(x)
        if patches.shape[1] != self.num_patches:
            raise ValueError(
                f"This ViT was built for {self.img_size}x{self.img_size} images "
                f"({self.num_patches} patches of {self.patch_size}x{self.patch_size}) but got "
                f"{x.shape[-2]}x{x.shape[-1]}: resize the images to {self.img_size}x"
                f"{self.img_size} or build the model with the img_size you need."
            )
        cls_token = self.cls_token.expand(x.shape[0], -1, -1)
        return self.pos_drop(torch.cat([cls_token, patches], dim=1) + self.pos_embed)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Images (B, C, H, W) -> normalised tokens (B, N + 1, dim): Eq. 1-3 and Eq. 4's LN."""
        return self.norm(self.blocks(self._embed(x)))

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Normalised tokens (B, N + 1, dim) -> logits (B, num_classes) from the class token
        (Eq. 4); with ``pre_logits`` the class token's (B, dim) features the head sees."""
        x = x[:, 0]
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Images (B, C, H, W) -> logits (B, num_classes)."""
        return self.forward_head(self.forward_features(x))

    def get_attention_maps(self, x: torch.Tensor) -> list[torch.Tensor]:
        """One (B, heads, N + 1, N + 1) attention tensor per block, computed in eval mode.

        Row i of a map is how token i (0 = the class token) attends to every token; each row
        sums to one. The model's train/eval mode is restored afterwards.
        """
        return collect_attention(self, x)


# Registered factories: the sizes of each as keywords ------------------------------------------

_VIT_B_16 = dict(patch_size=16, depth=12, dim=768, heads=12, mlp_ratio=4.0)
_VIT_L_16 = dict(patch_size=16, depth=24, dim=1024, heads=16, mlp_ratio=4.0)
_VIT_H_14 = dict(patch_size=14, depth=32, dim=1280, heads=16, mlp_ratio=4.0)
_VIT_4_16 = dict(patch_size=16, depth=4, dim=192, heads=3, mlp_ratio=2.0)
_VIT_CIFAR_P2 = dict(
    img_size=32,
    patch_size=2,
    num_classes=10,
    depth=9,
    dim=192,
    heads=12,
    mlp_ratio=2.0,
    drop_rate=0.0,
    pos_drop_rate=0.0,
)


@register_model
def vit_b_16(**kwargs: Any) -> ViT:
    """Table 1's ViT-Base/16 (86.6M parameters): ``ViT(patch_size=16, depth=12, dim=768,
    heads=12, mlp_ratio=4.0)``; any argument can be overridden."""
    return ViT(**{**_VIT_B_16, **kwargs})


@register_model
def vit_l_16(**kwargs: Any) -> ViT:
    """Table 1's ViT-Large/16 (304.3M): ``ViT(patch_size=16, depth=24, dim=1024, heads=16,
    mlp_ratio=4.0)``; any argument can be overridden."""
    return ViT(**{**_VIT_L_16, **kwargs})


@register_model
def vit_h_14(**kwargs: Any) -> ViT:
    """Table 1's ViT-Huge/14 (632.0M): ``ViT(patch_size=14, depth=32, dim=1280, heads=16,
    mlp_ratio=4.0)``; any argument can be overridden."""
    return ViT(**{**_VIT_H_14, **kwargs})


@register_model
def vit_4_16(**kwargs: Any) -> ViT:
    """ViT-4/16: 4 layers, 16x16 patches, a ViT small enough to train from scratch on a few
    hundred images on a CPU: DeiT-Tiny's width (dim 192, 3 heads of 64) but 4 layers (not
    12) and an MLP ratio of 2 for about 1.4M parameters; dropout 0.1 everywhere but in
    attention, since small data overfits:
    ``ViT(patch_size=16, depth=4, dim=192, heads=3, mlp_ratio=2.0)``. Other sizes via
    overrides, e.g. ``img_size=64, patch_size=8``."""
    return ViT(**{**_VIT_4_16, **kwargs})


@register_model
def vit_cifar_p2(**kwargs: Any) -> ViT:
    """The 2.7M-parameter CIFAR-10 ViT of jordandeklerk/vit's FLOP table (chapter 13): patch 2
    on 32x32 images (256 patches + 1 class token), 9 layers, 12 heads of 16, qkv bias, no
    dropout: 2,725,632 parameters without the head. ``patch_size`` changes only the tokenizer,
    e.g. ``patch_size=4`` for 64 patches."""
    return ViT(**{**_VIT_CIFAR_P2, **kwargs})
