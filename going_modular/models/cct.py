"""Compact Transformers for images: ViT-Lite, CVT and CCT of Hassani et al., "Escaping the Big
Data Paradigm with Compact Transformers" (2021). The text CCT is in ``text_cct.py``.

The three families share one transformer body, :class:`TransformerClassifier`, and differ in
the tokenizer and the pooling:

=============  =========================================  =============================
model          tokenizer                                  pooling
=============  =========================================  =============================
ViT-Lite       one conv, kernel = stride = patch size     class token (``pool="cls"``)
CVT            one conv, kernel = stride = patch size     :class:`SeqPool` (``"seq"``)
CCT            1-2 x [conv, ReLU, max-pool]               :class:`SeqPool`
=============  =========================================  =============================

Names follow the paper: ``cct_7_3x1`` has 7 encoder layers and 1 convolution with a 3x3 kernel;
``vit_lite_7_4`` and ``cvt_7_4`` have 7 layers and 4x4 patches. Layer sizes, initialisation and
the encoder layer's wiring (``Block(post_attn_norm=True)``) follow the authors' reference code
(SHI-Labs/Compact-Transformers), so parameter counts match it; their checkpoints load with
``load_renamed(model, state_dict, REFERENCE_KEYS)``. Unlike the reference,
``pos_embed="sine"`` is a fixed buffer (never a parameter) and reaches the model from every
factory, and ``"none"`` works.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from going_modular.models.checks import check_rates, check_sizes
from going_modular.models.layers import Block, collect_attention
from going_modular.models.registry import register_variant

__all__ = [
    "CCT",
    "CVT",
    "POOLS",
    "POS_EMBEDS",
    "CompactTransformer",
    "SeqPool",
    "Tokenizer",
    "TransformerClassifier",
    "ViTLite",
    "sinusoidal_embedding",
    "cct_14_7x2",
    "cct_2_3x2",
    "cct_4_3x2",
    "cct_6_3x1",
    "cct_6_3x2",
    "cct_7_3x1",
    "cct_7_3x2",
    "cct_7_7x2",
    "cvt_2_4",
    "cvt_4_4",
    "cvt_6_4",
    "cvt_7_4",
    "vit_lite_2_4",
    "vit_lite_4_4",
    "vit_lite_6_4",
    "vit_lite_7_4",
]

POS_EMBEDS = ("learnable", "sine", "none")
POOLS = ("seq", "cls")


def _conv_out(size: int, kernel: int, stride: int, padding: int) -> int:
    """Output length of a convolution or max-pool (``ceil_mode=False``, dilation 1)."""
    return (size + 2 * padding - kernel) // stride + 1


class Tokenizer(nn.Module):
    """Images (B, C, H, W) -> tokens (B, N, dim): ``n_conv_layers`` x [Conv2d, ReLU, MaxPool2d].

    Channels go ``in_channels -> in_planes -> ... -> dim``; the feature map is then flattened
    row by row into N = H' * W' tokens. ViT-Lite and CVT use :meth:`patchify`: a single conv
    with kernel = stride = patch size and a bias, without ReLU or pooling.
    """

    def __init__(
        self,
        in_channels: int,
        dim: int,
        kernel_size: int,
        stride: int,
        padding: int,
        n_conv_layers: int = 1,
        in_planes: int = 64,
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
            in_planes=in_planes,
            pooling_kernel_size=pooling_kernel_size,
            pooling_stride=pooling_stride,
        )
        check_sizes(0, padding=padding, pooling_padding=pooling_padding)
        self.in_channels = in_channels
        channels = [in_channels] + [in_planes] * (n_conv_layers - 1) + [dim]
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
            size = [_conv_out(n, k, s, p) for n in size]
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
        return (weights.unsqueeze(1) @ x).squeeze(1), weights


def sinusoidal_embedding(num_positions: int, dim: int) -> torch.Tensor:
    """(1, num_positions, dim): PE[p, 2i] = sin(p / 10000^(2i/dim)), PE[p, 2i+1] = cos(same)."""
    position = torch.arange(num_positions, dtype=torch.float64)[:, None]
    pair = (torch.arange(dim) // 2).to(torch.float64)  # i for columns 2i and 2i + 1
    angle = position / 10000 ** (2 * pair / dim)
    pe = torch.where(torch.arange(dim) % 2 == 0, torch.sin(angle), torch.cos(angle))
    return pe.to(torch.float32).unsqueeze(0)


class TransformerClassifier(nn.Module):
    """The compact transformers' body: ``tokenizer``'s (B, N, dim) tokens -> logits.

    A class token (``pool="cls"``, ViT-Lite) or not (``"seq"``: :class:`SeqPool`, CVT and CCT),
    position embeddings (``pos_embed``: ``"learnable"``, a trunc-normal std 0.2 Parameter;
    ``"sine"``, a fixed buffer, in ``state_dict`` but not in ``parameters()``; ``"none"``),
    dropout, ``depth`` blocks of the authors' kind (qkv without bias, the stream normalised
    after attention), a final LayerNorm, the pooling and a Linear ``head``. Stochastic depth
    rises linearly from 0 in the first block to ``drop_path_rate`` in the last; ``drop_rate``
    also drops the embedded tokens. Linear weights are trunc-normal std 0.02 with zero biases,
    LayerNorms ones and zeros. Subclasses call the tokenizer: :class:`CompactTransformer` on
    images, ``TextCCT`` on word embeddings.
    """

    def __init__(
        self,
        tokenizer: nn.Module,
        num_tokens: int,
        *,
        pool: str = "seq",
        num_classes: int = 10,
        dim: int = 256,
        depth: int = 7,
        heads: int = 4,
        mlp_ratio: float = 2.0,
        drop_rate: float = 0.0,
        attn_drop_rate: float = 0.1,
        drop_path_rate: float = 0.1,
        pos_embed: str = "learnable",
    ):
        super().__init__()
        check_sizes(
            num_tokens=num_tokens,
            num_classes=num_classes,
            dim=dim,
            depth=depth,
            heads=heads,
        )
        check_rates(drop_rate=drop_rate, drop_path_rate=drop_path_rate)
        if pos_embed not in POS_EMBEDS:
            raise ValueError(
                f"Unknown pos_embed {pos_embed!r}: choose one of "
                f"{', '.join(map(repr, POS_EMBEDS))}."
            )
        if pool not in POOLS:
            raise ValueError(f"Unknown pool {pool!r}: choose 'seq' (SeqPool) or 'cls'.")
        self.tokenizer = tokenizer
        self.num_tokens, self.pool = num_tokens, pool
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim)) if pool == "cls" else None
        self.seq_pool = SeqPool(dim) if pool == "seq" else None
        positions = num_tokens + (pool == "cls")
        if pos_embed == "learnable":
            self.pos_embed = nn.Parameter(torch.empty(1, positions, dim))
            nn.init.trunc_normal_(self.pos_embed, std=0.2)
        elif pos_embed == "sine":
            self.register_buffer("pos_embed", sinusoidal_embedding(positions, dim))
        else:
            self.pos_embed = None
        self.pos_drop = nn.Dropout(drop_rate)
        rates = torch.linspace(0, drop_path_rate, depth, device="cpu").tolist()
        self.blocks = nn.ModuleList(
            Block(
                dim,
                heads,
                mlp_ratio,
                qkv_bias=False,
                drop_rate=drop_rate,
                attn_drop_rate=attn_drop_rate,
                drop_path_rate=rate,
                post_attn_norm=True,
            )
            for rate in rates
        )
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def _embed(
        self, x: torch.Tensor, mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Prepend the class token (and a True mask entry for it), add position embeddings."""
        if self.cls_token is not None:
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
        attn_mask = None if mask is None else mask[:, None, None, :]  # key padding
        for block in self.blocks:
            x = block(x, attn_mask)
        return self.norm(x)

    def pool_tokens(
        self, x: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Encoded tokens -> what the head sees (B, dim), and SeqPool's (B, N) weights (None
        with a class token)."""
        if self.seq_pool is None:
            return x[:, 0], None
        return self.seq_pool(x, mask)

    def forward_tokens(
        self,
        tokens: torch.Tensor,
        mask: torch.Tensor | None = None,
        return_pool_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Tokens (B, N, dim) and an optional (B, N) mask -> logits (B, num_classes); with
        ``return_pool_weights`` also SeqPool's (B, N) weights (not for class-token models)."""
        if return_pool_weights and self.seq_pool is None:
            raise ValueError(
                "This model pools with a class token: it has no SeqPool weights."
            )
        pooled, weights = self.pool_tokens(self.encode(tokens, mask), mask)
        logits = self.head(pooled)
        return (logits, weights) if return_pool_weights else logits


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


class CompactTransformer(TransformerClassifier):
    """A :class:`Tokenizer` and the compact transformer, for images of one size.

    The keywords (``pool``, ``num_classes``, ``dim``, ``depth``, ``heads``, ``mlp_ratio``, the
    rates, ``pos_embed``) are :class:`TransformerClassifier`'s. ``grid_size`` is the (H', W') token grid, e.g. to show SeqPool weights as an image:
    ``model(x, return_pool_weights=True)[1].reshape(-1, *model.grid_size)``.
    """

    def __init__(
        self, tokenizer: Tokenizer, img_size: int | tuple[int, int], **kwargs: Any
    ):
        size = _image_size(img_size)
        grid = tokenizer.grid_size(*size)
        super().__init__(tokenizer, grid[0] * grid[1], **kwargs)
        self.img_size, self.grid_size = size, grid
        self.in_channels = tokenizer.in_channels

    def _tokens(self, x: torch.Tensor) -> torch.Tensor:
        expected = (self.in_channels, *self.img_size)
        if x.ndim != 4 or tuple(x.shape[1:]) != expected:
            raise ValueError(
                f"{type(self).__name__} was built for images of shape (B, {expected[0]}, "
                f"{expected[1]}, {expected[2]}) but got {tuple(x.shape)}: resize the images or "
                "build the model with matching img_size and in_channels."
            )
        return self.tokenizer(x)

    def forward(
        self, x: torch.Tensor, return_pool_weights: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Images (B, C, H, W) -> logits (B, num_classes); with ``return_pool_weights`` also
        the (B, N) SeqPool weights (CVT and CCT only)."""
        return self.forward_tokens(
            self._tokens(x), return_pool_weights=return_pool_weights
        )

    def get_attention_maps(self, x: torch.Tensor) -> list[torch.Tensor]:
        """One (B, heads, N, N) attention tensor per block, computed in eval mode."""
        return collect_attention(self, x)


class CCT(CompactTransformer):
    """Compact Convolutional Transformer: ``n_conv_layers`` x [conv, ReLU, max-pool], SeqPool.

    Stride and padding default to the reference's ``max(1, k // 2 - 1)`` and ``max(1, k // 2)``:
    stride 1, padding 1 for 3x3 kernels; stride 2, padding 3 for 7x7. Other keywords go to
    :class:`TransformerClassifier`.
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
        tokenizer = Tokenizer(
            in_channels,
            dim,
            kernel_size,
            stride=max(1, kernel_size // 2 - 1) if stride is None else stride,
            padding=max(1, kernel_size // 2) if padding is None else padding,
            n_conv_layers=n_conv_layers,
        )
        super().__init__(tokenizer, img_size, dim=dim, **kwargs)


class ViTLite(CompactTransformer):
    """ViT-Lite: a small ViT (patch tokenizer, class token) with the compact encoder layers."""

    default_pool = "cls"

    def __init__(
        self,
        *,
        img_size: int | tuple[int, int] = 32,
        in_channels: int = 3,
        dim: int = 256,
        patch_size: int = 4,
        **kwargs: Any,
    ):
        check_sizes(patch_size=patch_size)
        for side in _image_size(img_size):
            if side % patch_size:
                raise ValueError(
                    f"Image size {side} is not divisible by patch size {patch_size}: use a "
                    f"multiple of {patch_size} (e.g. {max(patch_size, side // patch_size * patch_size)})."
                )
        tokenizer = Tokenizer.patchify(in_channels, dim, patch_size)
        kwargs.setdefault("pool", self.default_pool)
        super().__init__(tokenizer, img_size, dim=dim, **kwargs)


class CVT(ViTLite):
    """Compact Vision Transformer: ViT-Lite with SeqPool instead of a class token."""

    default_pool = "seq"


# Registered factories: name -> arguments, as in the paper ---------------------------------------

# depth -> (dim, heads, mlp_ratio)
_SIZES: dict[int, tuple[int, int, float]] = {
    2: (128, 2, 1.0),
    4: (128, 2, 1.0),
    6: (256, 4, 2.0),
    7: (256, 4, 2.0),
    14: (384, 6, 3.0),
}


def _variant(name: str, cls: type[CompactTransformer], depth: int, **config: Any):
    dim, heads, mlp_ratio = _SIZES[depth]
    doc = f"{cls.__name__}, {depth} layers, dim {dim}, {heads} heads, MLP ratio {mlp_ratio:g}."
    sizes = dict(depth=depth, dim=dim, heads=heads, mlp_ratio=mlp_ratio)
    return register_variant(name, cls, doc, **sizes, **config)


# ViT-Lite-L/P and CVT-L/P: L layers, PxP patches. CCT-L/KxC: L layers, C convs of kernel K.
vit_lite_2_4 = _variant("vit_lite_2_4", ViTLite, 2, patch_size=4)
vit_lite_4_4 = _variant("vit_lite_4_4", ViTLite, 4, patch_size=4)
vit_lite_6_4 = _variant("vit_lite_6_4", ViTLite, 6, patch_size=4)
vit_lite_7_4 = _variant("vit_lite_7_4", ViTLite, 7, patch_size=4)
cvt_2_4 = _variant("cvt_2_4", CVT, 2, patch_size=4)
cvt_4_4 = _variant("cvt_4_4", CVT, 4, patch_size=4)
cvt_6_4 = _variant("cvt_6_4", CVT, 6, patch_size=4)
cvt_7_4 = _variant("cvt_7_4", CVT, 7, patch_size=4)
cct_2_3x2 = _variant("cct_2_3x2", CCT, 2, kernel_size=3, n_conv_layers=2)
cct_4_3x2 = _variant("cct_4_3x2", CCT, 4, kernel_size=3, n_conv_layers=2)
cct_6_3x1 = _variant("cct_6_3x1", CCT, 6, kernel_size=3, n_conv_layers=1)
cct_6_3x2 = _variant("cct_6_3x2", CCT, 6, kernel_size=3, n_conv_layers=2)
cct_7_3x1 = _variant("cct_7_3x1", CCT, 7, kernel_size=3, n_conv_layers=1)
cct_7_3x2 = _variant("cct_7_3x2", CCT, 7, kernel_size=3, n_conv_layers=2)
cct_7_7x2 = _variant("cct_7_7x2", CCT, 7, img_size=224, kernel_size=7, n_conv_layers=2)
cct_14_7x2 = _variant(
    "cct_14_7x2", CCT, 14, img_size=224, kernel_size=7, n_conv_layers=2
)
