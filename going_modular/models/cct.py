"""Compact Transformers for images: ViT-Lite, CVT and CCT of Hassani et al., "Escaping the Big
Data Paradigm with Compact Transformers" (2021). The text CCT is in ``text_cct.py``.

One class, :class:`CompactTransformer`, is the model: a tokenizer module, then the transformer
(:class:`CompactBlock`), then the pooling (``pool``). The families differ in the tokenizer and
the pooling, and each is a thin subclass that builds its tokenizer:

=============  =========================================  =============================
model          tokenizer                                  pooling
=============  =========================================  =============================
ViT-Lite       one conv, kernel = stride = patch size     class token (``pool="cls"``)
CVT            one conv, kernel = stride = patch size     :class:`SeqPool` (``"seq"``)
CCT            1-2 x [conv, ReLU, max-pool]               :class:`SeqPool`
=============  =========================================  =============================

The CCT and CVT classes and the factories at the paper's sizes (``cct_7_3x1``, ``cvt_7_4``,
``vit_lite_7_4``, ...) are in ``cct_variants``. Layer sizes, initialisation
and the encoder layer's wiring (:class:`CompactBlock`) follow the authors' reference code
(SHI-Labs/Compact-Transformers), so parameter counts match it; their checkpoints load with
``convert.load_renamed(model, state_dict, convert.REFERENCE_KEYS)``. Unlike the reference,
``pos_embed="sine"`` is a fixed buffer (never a parameter) and reaches the model from every
factory, ``"none"`` works, and ``pool="mean"`` averages the tokens.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from going_modular.models.checks import check_rates, check_sizes
from going_modular.models.layers import (
    Block,
    collect_attention,
    conv_output_size,
    sinusoidal_embedding,
)

__all__ = [
    "POOLS",
    "POS_EMBEDS",
    "CompactBlock",
    "CompactTransformer",
    "SeqPool",
    "Tokenizer",
    "ViTLite",
    "sinusoidal_embedding",
]

POS_EMBEDS = ("learnable", "sine", "none")
POOLS = ("seq", "cls", "mean")


class Tokenizer(nn.Module):
    """Images (B, C, H, W) -> tokens (B, N, dim): ``n_conv_layers`` x [Conv2d, ReLU, MaxPool2d].

    Channels go ``in_channels -> stem_channels -> ... -> dim`` (the reference's
    ``in_planes``, named as the hybrid ViT's stem width); the feature map is then flattened
    row by row into N = H' * W' tokens. ViT-Lite and CVT use :meth:`patchify`: a single
    conv with kernel = stride = patch size and a bias, without ReLU or pooling.
    """

    def __init__(
        self,
        in_channels: int,
        dim: int,
        kernel_size: int,
        stride: int,
        padding: int,
        n_conv_layers: int = 1,
        stem_channels: int = 64,
        relu: bool = True,
        max_pool: bool = True,
        pooling_kernel_size: int = 3,
        pooling_stride: int = 2,
        pooling_padding: int = 1,
        conv_bias: bool = False,
    ):
        super().__init__()
        check_sizes(
            in_channels=in_channels,
            dim=dim,
            kernel_size=kernel_size,
            stride=stride,
            n_conv_layers=n_conv_layers,
            stem_channels=stem_channels,
            pooling_kernel_size=pooling_kernel_size,
            pooling_stride=pooling_stride,
        )
        check_sizes(0, padding=padding, pooling_padding=pooling_padding)
        self.in_channels = in_channels
        channels = [in_channels] + [stem_channels] * (n_conv_layers - 1) + [dim]
        self.conv_layers = nn.Sequential(
            *(
                nn.Sequential(
                    nn.Conv2d(
                        c_in, c_out, kernel_size, stride, padding, bias=conv_bias
                    ),
                    nn.ReLU() if relu else nn.Identity(),
                    nn.MaxPool2d(pooling_kernel_size, pooling_stride, pooling_padding)
                    if max_pool
                    else nn.Identity(),
                )
                for c_in, c_out in zip(channels[:-1], channels[1:], strict=True)
            )
        )
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight)

    @classmethod
    def patchify(cls, in_channels: int, dim: int, patch_size: int) -> Tokenizer:
        """ViT-Lite's and CVT's tokenizer: non-overlapping ``patch_size`` patches, linearly mapped."""
        return cls(
            in_channels,
            dim,
            kernel_size=patch_size,
            stride=patch_size,
            padding=0,
            relu=False,
            max_pool=False,
            conv_bias=True,
        )

    def grid_size(self, height: int, width: int) -> tuple[int, int]:
        """(H', W') of the token grid for (height, width) images; ValueError if too small."""
        size = [height, width]
        for module in self.conv_layers.modules():
            if isinstance(module, nn.Conv2d):
                k, s, p = module.kernel_size[0], module.stride[0], module.padding[0]
            elif isinstance(module, nn.MaxPool2d):
                k, s, p = module.kernel_size, module.stride, module.padding
            else:
                continue
            size = [conv_output_size(n, k, s, p) for n in size]
            if min(size) < 1:
                raise ValueError(
                    f"Images of {height}x{width} are too small for this tokenizer: use larger "
                    "images or fewer conv layers."
                )
        return size[0], size[1]

    def sequence_length(
        self, channels: int = 3, height: int = 224, width: int = 224
    ) -> int:
        """Number of tokens N for (channels, height, width) images."""
        if channels != self.in_channels:
            raise ValueError(
                f"This tokenizer takes {self.in_channels} channels, not {channels}."
            )
        h, w = self.grid_size(height, width)
        return h * w

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (B, dim, H', W') -> (B, dim, N) -> (B, N, dim)
        return self.conv_layers(x).flatten(2).transpose(1, 2)


class SeqPool(nn.Module):
    """Sequence pooling: ``softmax(x W^T + b)`` over the N tokens weights their sum -> (B, dim).

    ``weight`` (1, dim) and ``bias`` (1,) are an ``nn.Linear(dim, 1)``'s (the reference's
    ``attention_pool``), held directly. Tokens where ``mask`` is False get weight zero.
    """

    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(1, dim))
        self.bias = nn.Parameter(torch.zeros(1))
        nn.init.trunc_normal_(self.weight, std=0.02)

    def pool_weights(
        self, x: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, N, dim) tokens -> (B, N) weights, each row summing to one."""
        scores = F.linear(x, self.weight, self.bias).squeeze(-1)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return scores.softmax(dim=-1)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, N, dim) tokens -> pooled (B, dim) and the (B, N) weights used."""
        weights = self.pool_weights(x, mask)
        # (B, 1, N) @ (B, N, dim) -> (B, 1, dim) -> (B, dim)
        return (weights.unsqueeze(1) @ x).squeeze(1), weights


class CompactBlock(Block):
    """The compact transformers' encoder layer: :class:`~going_modular.models.layers.Block`'s
    parts, but the residual stream itself is normalised after attention and the MLP's output
    added to that normalised stream, as SHI-Labs/Compact-Transformers' ``TransformerEncoderLayer``
    (its ``pre_norm`` is our ``norm1``, its ``norm1`` our ``norm2``)."""

    # x = norm2(x + drop_path(attn(norm1(x))))
    # x = x + drop_path(mlp(x))

    def forward(
        self, x: torch.Tensor, attn_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        x = self.norm2(x + self.drop_path(self.attn(self.norm1(x), attn_mask)))
        return x + self.drop_path(self.mlp(x))


def _image_size(img_size: int | tuple[int, int]) -> tuple[int, int]:
    """``img_size`` as (height, width), checked."""
    size = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
    if len(size) != 2:
        raise ValueError(
            f"img_size must be one size or (height, width), got {img_size!r}."
        )
    for side in size:
        check_sizes(img_size=side)
    return size


class CompactTransformer(nn.Module):
    """A tokenizer, then the compact transformer: (B, N, dim) tokens -> logits.

    ``tokenizer`` maps the input to (B, N, dim) tokens; for images (a :class:`Tokenizer`)
    ``img_size`` gives the token grid (``grid_size``, e.g. to show SeqPool weights as an image:
    ``model.pool_weights(x).reshape(-1, *model.grid_size)``), otherwise
    ``num_tokens`` is N (the text CCT). Then a class token (``pool="cls"``, ViT-Lite) or not
    (``"seq"``: :class:`SeqPool`, CVT and CCT; ``"mean"``: the tokens' average), position
    embeddings (``pos_embed``: ``"learnable"``, a trunc-normal std 0.2 Parameter; ``"sine"``, a
    fixed buffer, in ``state_dict`` but not in ``parameters()``; ``"none"``), dropout
    (``pos_drop_rate``; the reference drops the tokens with its ``drop_rate``), ``depth``
    :class:`CompactBlock` (qkv without bias), a final LayerNorm, the pooling and a Linear
    ``head``. Stochastic depth rises linearly from 0 in the first block to ``drop_path_rate`` in
    the last. Linear weights are trunc-normal std 0.02 with zero biases, LayerNorms ones and
    zeros. ``forward`` returns the logits, :meth:`pool_weights` SeqPool's weights.
    """

    def __init__(
        self,
        tokenizer: nn.Module,
        img_size: int | tuple[int, int] | None = None,
        *,
        num_tokens: int | None = None,
        pool: str = "seq",
        num_classes: int = 10,
        dim: int = 256,
        depth: int = 7,
        heads: int = 4,
        mlp_ratio: float = 2.0,
        drop_rate: float = 0.0,
        attn_drop_rate: float = 0.1,
        drop_path_rate: float = 0.1,
        pos_drop_rate: float = 0.0,
        pos_embed: str = "learnable",
    ):
        super().__init__()
        if (img_size is None) == (num_tokens is None):
            raise ValueError(
                "Give exactly one of img_size (for an image Tokenizer) and num_tokens."
            )
        self.img_size = self.grid_size = self.in_channels = None
        if img_size is not None:
            self.img_size = _image_size(img_size)
            self.grid_size = tokenizer.grid_size(*self.img_size)
            self.in_channels = tokenizer.in_channels
            num_tokens = self.grid_size[0] * self.grid_size[1]
        check_sizes(
            num_tokens=num_tokens,
            num_classes=num_classes,
            dim=dim,
            depth=depth,
            heads=heads,
        )
        check_rates(
            drop_rate=drop_rate,
            drop_path_rate=drop_path_rate,
            pos_drop_rate=pos_drop_rate,
        )
        _check_choice("pos_embed", pos_embed, POS_EMBEDS)
        _check_choice("pool", pool, POOLS)
        self.tokenizer = tokenizer
        self.num_tokens, self.pool = num_tokens, pool
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim)) if pool == "cls" else None
        self.seq_pool = SeqPool(dim) if pool == "seq" else None
        self._init_pos_embed(pos_embed, num_tokens + (pool == "cls"), dim)
        self.pos_drop = nn.Dropout(pos_drop_rate)
        rates = torch.linspace(0, drop_path_rate, depth, device="cpu").tolist()
        self.blocks = nn.ModuleList(
            CompactBlock(
                dim,
                heads,
                mlp_ratio,
                qkv_bias=False,
                drop_rate=drop_rate,
                attn_drop_rate=attn_drop_rate,
                drop_path_rate=rate,
            )
            for rate in rates
        )
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)
        self._init_weights()

    def _init_pos_embed(self, pos_embed: str, positions: int, dim: int) -> None:
        if pos_embed == "learnable":
            self.pos_embed = nn.Parameter(torch.empty(1, positions, dim))
            nn.init.trunc_normal_(self.pos_embed, std=0.2)
        elif pos_embed == "sine":
            self.register_buffer("pos_embed", sinusoidal_embedding(positions, dim))
        else:
            self.pos_embed = None

    def _init_weights(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def tokenize(
        self, x: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The input -> (B, N, dim) tokens and their (B, N) mask (None: all real)."""
        if self.img_size is not None:
            expected = (self.in_channels, *self.img_size)
            if x.ndim != 4 or tuple(x.shape[1:]) != expected:
                raise ValueError(
                    f"{type(self).__name__} was built for images of shape (B, {expected[0]}, "
                    f"{expected[1]}, {expected[2]}) but got {tuple(x.shape)}: resize the "
                    "images or build the model with matching img_size and in_channels."
                )
        return self.tokenizer(x), mask

    def _embed(
        self, x: torch.Tensor, mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Prepend the class token (and a True mask entry for it), add position embeddings."""
        if self.cls_token is not None:
            # (B, N, dim) -> (B, 1 + N, dim)
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
            if mask is not None:
                mask = torch.cat([mask.new_ones(mask.shape[0], 1), mask], dim=1)
        if self.pos_embed is not None:
            if x.shape[1] > self.pos_embed.shape[1]:
                raise ValueError(
                    f"Got {x.shape[1]} tokens but the position embedding has "
                    f"{self.pos_embed.shape[1]} positions: shorten the input or build the "
                    "model for longer sequences."
                )
            x = x + self.pos_embed[:, : x.shape[1]]
        return self.pos_drop(x), mask

    def encode(
        self, tokens: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Tokens (B, N, dim) and an optional (B, N) mask (True = real token) -> the encoded
        tokens after the final LayerNorm, (B, N (+1 with a class token), dim)."""
        x, mask = self._embed(tokens, mask)
        # (B, N) -> (B, 1, 1, N): the mask applies to the keys
        attn_mask = None if mask is None else mask[:, None, None, :]
        for block in self.blocks:
            x = block(x, attn_mask)
        return self.norm(x)

    def pool_tokens(
        self, x: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Encoded tokens -> what the head sees (B, dim), and SeqPool's (B, N) weights (None
        with a class token or the mean)."""
        if self.pool == "cls":
            return x[:, 0], None
        if self.pool == "mean":
            if mask is None:
                return x.mean(dim=1), None
            kept = mask.unsqueeze(-1).to(x.dtype)  # (B, N, 1)
            return (x * kept).sum(dim=1) / kept.sum(dim=1), None
        return self.seq_pool(x, mask)

    def forward_features(
        self, x: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The input -> encoded tokens after the final LayerNorm (B, N (+1), dim)."""
        return self.encode(*self.tokenize(x, mask))

    def forward_head(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        pre_logits: bool = False,
    ) -> torch.Tensor:
        """Encoded tokens (B, N, dim) and their optional (B, N) mask -> logits (B,
        num_classes), or with ``pre_logits`` the pooled (B, dim)."""
        pooled, _ = self.pool_tokens(x, mask)
        return pooled if pre_logits else self.head(pooled)

    def forward_tokens(
        self, tokens: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Tokens (B, N, dim), as the tokenizer returns them, and an optional (B, N) mask ->
        logits (B, num_classes)."""
        return self.forward_head(self.encode(tokens, mask), mask)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Images (B, C, H, W) -> logits (B, num_classes)."""
        return self.forward_head(self.forward_features(x))

    def pool_weights(
        self, x: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The input (and its optional mask, as ``forward`` takes them) -> SeqPool's (B, N)
        weights over the tokens, each row summing to one (SeqPool models only)."""
        if self.seq_pool is None:
            raise ValueError(
                f"This model pools with {'a class token' if self.pool == 'cls' else 'the mean'}"
                ": it has no SeqPool weights."
            )
        tokens, mask = self.tokenize(x, mask)
        return self.seq_pool.pool_weights(self.encode(tokens, mask), mask)

    def get_attention_maps(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        """One (B, heads, N, N) attention tensor per block, computed in eval mode."""
        return collect_attention(self, *inputs)


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(
            f"Unknown {name} {value!r}: choose one of {', '.join(map(repr, choices))}."
        )


class ViTLite(CompactTransformer):
    """ViT-Lite: a small ViT (patch tokenizer, class token) with the compact encoder layers.
    Other keywords go to :class:`CompactTransformer`."""

    def __init__(
        self,
        *,
        img_size: int | tuple[int, int] = 32,
        in_channels: int = 3,
        dim: int = 256,
        patch_size: int = 4,
        pool: str = "cls",
        **kwargs: Any,
    ):
        check_sizes(patch_size=patch_size)
        for side in _image_size(img_size):
            if side % patch_size:
                multiple = max(patch_size, side // patch_size * patch_size)
                raise ValueError(
                    f"Image size {side} is not divisible by patch size {patch_size}: use a "
                    f"multiple of {patch_size} (e.g. {multiple})."
                )
        tokenizer = Tokenizer.patchify(in_channels, dim, patch_size)
        super().__init__(tokenizer, img_size, dim=dim, pool=pool, **kwargs)
