"""The three models of "Speeding up the Vision Transformer with BatchNorm" (A. Dey, 2024).

All three share one skeleton, a small ViT in the style of lucidrains' ``vit-pytorch``:

* patches cut into vectors of ``in_channels * patch_size**2`` values, normalised, projected
  to ``dim`` and normalised again; a class token; learned (``pos_embed="learnable"``) or fixed
  1-D sinusoidal (``"sine"``, the article's ``pe1d``: ``sinusoidal_embedding(...,
  interleave=False)``, sines then cosines) positions;
* ``depth`` pre-norm blocks (:class:`~going_modular.models.layers.Block`): attention with
  ``heads`` heads of ``head_dim`` (so the attention's inner width ``heads * head_dim``, 512,
  exceeds ``dim``, 64), then an MLP of ``int(dim * mlp_ratio)`` features (128); a final norm;
  class-token or mean pooling (``pool``); a linear head.

They differ only in their normalisation layers:

==========  ===========  =========  ==================================  ==========
model       embedding    attention  MLP                                 final
==========  ===========  =========  ==================================  ==========
ViTLN       LayerNorm    LayerNorm  LayerNorm, Linear, GELU, Linear     LayerNorm
ViTBNFFN    LayerNorm    LayerNorm  Linear, BatchNorm, GELU, Linear     LayerNorm
ViTBN       BatchNorm    BatchNorm  Linear, BatchNorm, GELU, Linear     BatchNorm
==========  ===========  =========  ==================================  ==========

(``ViTLN`` is the article's "ViT".) Every BatchNorm is a :class:`TokenBatchNorm`: statistics
per feature over the batch *and* the tokens. Parameters use PyTorch's default initialisation
and the class token and learned positions are standard normal, as in the article's code.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import Any

import torch
from torch import nn

from going_modular.models.checks import check_patch_grid, check_rates, check_sizes
from going_modular.models.layers import Block, Mlp, Norm, sinusoidal_embedding
from going_modular.models.registry import register_model

__all__ = [
    "Patchify",
    "TokenBatchNorm",
    "Transformer",
    "ViTBN",
    "ViTBNFFN",
    "ViTLN",
    "vitbn",
    "vitbn_ffn",
    "vitbn_vit",
]


class TokenBatchNorm(nn.BatchNorm1d):
    """BatchNorm over (B, N, D) tokens: per feature, statistics over batch and tokens.

    ``nn.BatchNorm1d`` normalises a (B, D, N) tensor per channel D over the B * N values
    of that channel; this module transposes (B, N, D) tokens into that layout and back.
    In training it uses the batch's statistics and updates running estimates; in eval
    it uses the running estimates, so each image's output no longer depends on the batch.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim != 3:
            raise ValueError(
                f"TokenBatchNorm expects tokens shaped (batch, tokens, features), got "
                f"shape {tuple(x.shape)}."
            )
        # (B, N, D) -> (B, D, N), normalised, -> (B, N, D)
        return super().forward(x.transpose(1, 2)).transpose(1, 2)


class Patchify(nn.Module):
    """(B, C, H, W) images -> (B, N, p * p * C) patch vectors, row by row."""

    def __init__(self, patch_size: int):
        super().__init__()
        self.patch_size = patch_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        p = self.patch_size
        # (B, C, H/p, p, W/p, p) -> (B, H/p, W/p, p, p, C) -> (B, N, p * p * C)
        x = x.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1)
        return x.reshape(b, (h // p) * (w // p), p * p * c)


class Transformer(nn.Module):
    """``blocks`` in turn, then the final ``norm``: the article's (lucidrains') layout, which
    chapter 12 subclasses to replay the article's early-return bug."""

    def __init__(self, blocks: Iterable[Block], norm: nn.Module):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.norm = norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


class ViTLN(nn.Module):
    """The article's baseline ViT: LayerNorm everywhere. The class attributes choose the norms
    (see the module's table); :class:`ViTBNFFN` and :class:`ViTBN` only change them.

    ``embed_norm`` acts on the patch vectors and on their projections, ``norm_layer`` before
    the attention (and before the MLP if ``pre_mlp_norm``), ``mlp_norm_layer`` inside the MLP,
    ``final_norm`` after the last block.
    """

    embed_norm: Norm = nn.LayerNorm
    norm_layer: Norm = nn.LayerNorm
    pre_mlp_norm: bool = True
    mlp_norm_layer: Norm | None = None
    final_norm: Norm = nn.LayerNorm

    def __init__(
        self,
        *,
        img_size: int = 28,
        patch_size: int = 7,
        in_channels: int = 1,
        num_classes: int = 10,
        dim: int = 64,
        depth: int = 6,
        heads: int = 8,
        head_dim: int = 64,
        mlp_ratio: float = 2.0,
        pool: str = "cls",
        pos_embed: str = "learnable",
        drop_rate: float = 0.0,
        attn_drop_rate: float = 0.0,
        pos_drop_rate: float = 0.0,
    ):
        super().__init__()
        check_patch_grid(
            img_size, patch_size, in_channels, num_classes, dim, depth, heads
        )
        check_sizes(head_dim=head_dim)
        check_rates(pos_drop_rate=pos_drop_rate)
        if pool not in ("cls", "mean"):
            raise ValueError(f"pool must be 'cls' or 'mean', got {pool!r}.")
        if pos_embed not in ("learnable", "sine"):
            raise ValueError(
                f"pos_embed must be 'learnable' or 'sine', got {pos_embed!r}."
            )
        self.img_size, self.in_channels, self.pool = img_size, in_channels, pool
        num_patches = (img_size // patch_size) ** 2
        patch_dim = in_channels * patch_size**2
        self.patch_embed = nn.Sequential(
            Patchify(patch_size),
            self.embed_norm(patch_dim),
            nn.Linear(patch_dim, dim),
            self.embed_norm(dim),
        )
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self._init_pos_embed(pos_embed, num_patches + 1, dim)
        self.pos_drop = nn.Dropout(pos_drop_rate)
        blocks = [
            Block(
                dim,
                heads,
                mlp_ratio,
                head_dim=head_dim,
                drop_rate=drop_rate,
                attn_drop_rate=attn_drop_rate,
                norm_layer=self.norm_layer,
                norm2_layer=None if self.pre_mlp_norm else nn.Identity,
                mlp_layer=partial(Mlp, norm_layer=self.mlp_norm_layer),
            )
            for _ in range(depth)
        ]
        self.transformer = Transformer(blocks, self.final_norm(dim))
        self.head = nn.Linear(dim, num_classes)

    def _init_pos_embed(self, pos_embed: str, positions: int, dim: int) -> None:
        if pos_embed == "learnable":
            self.pos_embed = nn.Parameter(torch.randn(1, positions, dim))
        else:
            pe = sinusoidal_embedding(
                positions, dim, interleave=False
            )  # (1, N + 1, dim)
            self.register_buffer("pos_embed", pe, persistent=False)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Images (B, in_channels, img_size, img_size) -> tokens (B, N + 1, dim) after the
        final norm."""
        if x.ndim != 4 or x.shape[1:] != (self.in_channels, *[self.img_size] * 2):
            raise ValueError(
                f"Expected images shaped (B, {self.in_channels}, {self.img_size}, "
                f"{self.img_size}), got {tuple(x.shape)}: build the model with the "
                "img_size and in_channels of your data."
            )
        x = self.patch_embed(x)  # (B, N, dim)
        cls_token = self.cls_token.expand(x.shape[0], -1, -1)
        x = self.pos_drop(torch.cat([cls_token, x], dim=1) + self.pos_embed)
        return self.transformer(x)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Tokens (B, N + 1, dim) -> logits (B, num_classes), by the class token or the mean
        of the tokens (``pool``); with ``pre_logits`` the pooled (B, dim)."""
        x = x.mean(dim=1) if self.pool == "mean" else x[:, 0]
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Images (B, in_channels, img_size, img_size) -> logits (B, num_classes)."""
        return self.forward_head(self.forward_features(x))


class ViTBNFFN(ViTLN):
    """BatchNorm between the first Linear and the GELU of every MLP, whose LayerNorm is
    removed; the other LayerNorms stay."""

    pre_mlp_norm = False
    mlp_norm_layer = TokenBatchNorm


class ViTBN(ViTLN):
    """Every LayerNorm, embedding included, replaced by :class:`TokenBatchNorm`, and the MLPs
    as in :class:`ViTBNFFN`."""

    embed_norm = TokenBatchNorm
    norm_layer = TokenBatchNorm
    pre_mlp_norm = False
    mlp_norm_layer = TokenBatchNorm
    final_norm = TokenBatchNorm


# Registered factories: the article's sizes are the classes' defaults ---------------------------


@register_model
def vitbn_vit(**kwargs: Any) -> ViTLN:
    """The article's ViT: patch 7, dim 64, depth 6, 8 heads of 64, MLP 128 (ratio 2), for 28x28
    one-channel images; any argument of :class:`ViTLN` can be overridden."""
    return ViTLN(**kwargs)


@register_model
def vitbn_ffn(**kwargs: Any) -> ViTBNFFN:
    """ViTBNFFN: patch 7, dim 64, depth 6, 8 heads of 64, MLP 128 (ratio 2), for 28x28
    one-channel images; any argument of :class:`ViTLN` can be overridden."""
    return ViTBNFFN(**kwargs)


@register_model
def vitbn(**kwargs: Any) -> ViTBN:
    """ViTBN: patch 7, dim 64, depth 6, 8 heads of 64, MLP 128 (ratio 2), for 28x28
    one-channel images; any argument of :class:`ViTLN` can be overridden."""
    return ViTBN(**kwargs)
