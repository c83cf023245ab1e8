"""The three models of "Speeding up the Vision Transformer with BatchNorm" (A. Dey, 2024).

All three share one skeleton, a small ViT in the style of lucidrains' ``vit-pytorch``:

* patches cut into vectors of ``channels * patch_size**2`` values, normalised, projected
  to ``dim`` and normalised again; a class token; learned (``pos_emb="learn"``) or fixed
  1-D sinusoidal (``"pe1d"``) positions;
* ``depth`` pre-norm encoder blocks: attention with ``heads`` heads of ``dim_head`` (so the
  attention's inner width ``heads * dim_head`` may exceed ``dim``), then a feed-forward
  block of width ``mlp_dim``; a final norm; CLS or mean pooling; a linear head.

They differ only in their normalisation layers:

==========  ===========  =========  ==================================  ==========
model       embedding    attention  feed-forward                        final
==========  ===========  =========  ==================================  ==========
ViT         LayerNorm    LayerNorm  LayerNorm, Linear, GELU, Linear     LayerNorm
ViTBNFFN    LayerNorm    LayerNorm  Linear, BatchNorm, GELU, Linear     LayerNorm
ViTBN       BatchNorm    BatchNorm  Linear, BatchNorm, GELU, Linear     BatchNorm
==========  ===========  =========  ==================================  ==========

Every BatchNorm is a :class:`TokenBatchNorm`: statistics per feature over the batch *and*
the tokens. Parameters use PyTorch's default initialisation and the class token and
learned positions are standard normal, as in the article's code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .checks import check_rates, check_sizes
from .registry import register_model

Norm = Callable[[int], nn.Module]


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
        return super().forward(x.transpose(1, 2)).transpose(1, 2)


def sinusoidal_positions(tokens: int, dim: int, base: float = 10_000.0) -> torch.Tensor:
    """Fixed 1-D positions (tokens, dim): sines of ``dim / 2`` frequencies, then cosines.

    Frequency k is ``base ** (-k / (dim / 2))``, k = 0, ..., dim / 2 - 1.
    """
    if dim % 2:
        raise ValueError(f"Sinusoidal positions need an even dim, got {dim}.")
    omega = base ** (-torch.arange(dim // 2) / (dim // 2))
    angles = torch.arange(tokens)[:, None] * omega[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=1)


class Patchify(nn.Module):
    """(B, C, H, W) images -> (B, N, p * p * C) patch vectors, row by row."""

    def __init__(self, patch_size: int):
        super().__init__()
        self.patch_size = patch_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        p = self.patch_size
        x = x.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1)
        return x.reshape(b, (h // p) * (w // p), p * p * c)


class Attention(nn.Module):
    """``norm`` then multi-head self-attention: (B, N, dim) -> (B, N, dim).

    One Linear makes queries, keys and values of ``heads * dim_head`` features each; a
    second projects the heads' concatenated outputs back to ``dim``.
    """

    def __init__(self, dim: int, heads: int, dim_head: int, dropout: float, norm: Norm):
        super().__init__()
        self.heads, self.dim_head, self.dropout = heads, dim_head, dropout
        inner = heads * dim_head
        self.norm = norm(dim)
        self.qkv = nn.Linear(dim, 3 * inner)
        self.out = nn.Sequential(nn.Linear(inner, dim), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        qkv = self.qkv(self.norm(x)).reshape(b, n, 3, self.heads, self.dim_head)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, heads, N, dim_head)
        p = self.dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
        return self.out(out.transpose(1, 2).reshape(b, n, -1))


class FeedForward(nn.Module):
    """``pre_norm``, Linear, ``hidden_norm``, GELU, Dropout, Linear, Dropout.

    The ViT has a LayerNorm before the block and nothing inside; the BatchNorm models
    have no norm before it and a BatchNorm between the first Linear and the GELU.
    """

    def __init__(
        self,
        dim: int,
        hidden_dim: int,
        dropout: float,
        pre_norm: Norm | None,
        hidden_norm: Norm | None,
    ):
        super().__init__()
        self.net = nn.Sequential(
            pre_norm(dim) if pre_norm else nn.Identity(),
            nn.Linear(dim, hidden_dim),
            hidden_norm(hidden_dim) if hidden_norm else nn.Identity(),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(hidden_dim, dim),
            nn.Dropout(dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class EncoderBlock(nn.Module):
    """``x = attn(x) + x``, then ``x = ff(x) + x``."""

    def __init__(self, attn: Attention, ff: FeedForward):
        super().__init__()
        self.attn, self.ff = attn, ff

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attn(x) + x
        return self.ff(x) + x


class Transformer(nn.Module):
    """``depth`` encoder blocks, all of them, then the final norm."""

    def __init__(self, blocks: list[EncoderBlock], norm: nn.Module):
        super().__init__()
        self.layers = nn.ModuleList(blocks)
        self.norm = norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.layers:
            x = block(x)
        return self.norm(x)


class _NormedViT(nn.Module):
    """The shared skeleton; subclasses choose the norms (see the module's table)."""

    embed_norm: Norm = nn.LayerNorm
    attn_norm: Norm = nn.LayerNorm
    ff_pre_norm: Norm | None = nn.LayerNorm
    ff_hidden_norm: Norm | None = None
    final_norm: Norm = nn.LayerNorm

    def __init__(
        self,
        *,
        image_size: int = 28,
        patch_size: int = 7,
        num_classes: int = 10,
        dim: int = 64,
        depth: int = 6,
        heads: int = 8,
        dim_head: int = 64,
        mlp_dim: int = 128,
        pool: str = "cls",
        pos_emb: str = "learn",
        channels: int = 1,
        dropout: float = 0.0,
        emb_dropout: float = 0.0,
    ):
        super().__init__()
        check_sizes(
            image_size=image_size,
            patch_size=patch_size,
            num_classes=num_classes,
            dim=dim,
            depth=depth,
            heads=heads,
            dim_head=dim_head,
            mlp_dim=mlp_dim,
            channels=channels,
        )
        check_rates(dropout=dropout, emb_dropout=emb_dropout)
        if image_size % patch_size:
            raise ValueError(
                f"image_size={image_size} is not divisible by patch_size={patch_size}: "
                f"pick a patch size that divides it (MNIST's 28: 4, 7 or 14)."
            )
        if pool not in ("cls", "mean"):
            raise ValueError(f"pool must be 'cls' or 'mean', got {pool!r}.")
        if pos_emb not in ("learn", "pe1d"):
            raise ValueError(f"pos_emb must be 'learn' or 'pe1d', got {pos_emb!r}.")
        self.image_size, self.channels = image_size, channels
        self.pool, self.pos_emb = pool, pos_emb
        num_patches = (image_size // patch_size) ** 2
        patch_dim = channels * patch_size**2
        self.to_patch_embedding = nn.Sequential(
            Patchify(patch_size),
            self.embed_norm(patch_dim),
            nn.Linear(patch_dim, dim),
            self.embed_norm(dim),
        )
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        if pos_emb == "learn":
            self.pos_embedding = nn.Parameter(torch.randn(1, num_patches + 1, dim))
        else:
            positions = sinusoidal_positions(num_patches + 1, dim)[None]
            self.register_buffer("pos_embedding", positions, persistent=False)
        self.dropout = nn.Dropout(emb_dropout)
        blocks = [
            EncoderBlock(
                Attention(dim, heads, dim_head, dropout, self.attn_norm),
                FeedForward(
                    dim, mlp_dim, dropout, self.ff_pre_norm, self.ff_hidden_norm
                ),
            )
            for _ in range(depth)
        ]
        self.transformer = Transformer(blocks, self.final_norm(dim))
        self.linear_head = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Images (B, channels, image_size, image_size) -> logits (B, num_classes)."""
        if x.ndim != 4 or x.shape[1:] != (self.channels, *[self.image_size] * 2):
            raise ValueError(
                f"Expected images shaped (B, {self.channels}, {self.image_size}, "
                f"{self.image_size}), got {tuple(x.shape)}: build the model with the "
                "image_size and channels of your data."
            )
        x = self.to_patch_embedding(x)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = self.dropout(torch.cat([cls, x], dim=1) + self.pos_embedding)
        x = self.transformer(x)
        x = x.mean(dim=1) if self.pool == "mean" else x[:, 0]
        return self.linear_head(x)


class ViT(_NormedViT):
    """The baseline: LayerNorm everywhere (the article's ``ViT``)."""


class ViTBNFFN(_NormedViT):
    """BatchNorm between the first Linear and the GELU of every feed-forward block, whose
    LayerNorm is removed; the other LayerNorms stay."""

    ff_pre_norm = None
    ff_hidden_norm = TokenBatchNorm


class ViTBN(_NormedViT):
    """Every LayerNorm, embedding included, replaced by :class:`TokenBatchNorm`, and the
    feed-forward blocks as in :class:`ViTBNFFN`."""

    embed_norm = TokenBatchNorm
    attn_norm = TokenBatchNorm
    ff_pre_norm = None
    ff_hidden_norm = TokenBatchNorm
    final_norm = TokenBatchNorm


def _factory(cls: type[_NormedViT]):
    def build(
        num_classes: int = 10, img_size: int = 28, in_channels: int = 1, **kw: Any
    ) -> _NormedViT:
        return cls(
            image_size=img_size, num_classes=num_classes, channels=in_channels, **kw
        )

    build.__doc__ = (
        f"The article's {cls.__name__}: patch 7, dim 64, depth 6, 8 heads of 64, "
        "MLP 128 (override any argument by keyword)."
    )
    return build


vitbn_vit = register_model("vitbn_vit")(_factory(ViT))
vitbn_ffn = register_model("vitbn_ffn")(_factory(ViTBNFFN))
vitbn = register_model("vitbn")(_factory(ViTBN))
