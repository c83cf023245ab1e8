"""The layers every transformer of the package is built from: one attention, one MLP, one block.

:class:`Block` is the pre-norm encoder layer of the ViT paper (Eq. 2 and 3), and its ``forward``
reads like them::

    x = x + drop_path(attn(norm1(x)))      # Eq. 2
    x = x + drop_path(mlp(norm2(x)))       # Eq. 3

Other wirings are other classes or other layers passed in, as in timm's ``vision_transformer.py``:

=====================  =====================================================================
model                  block
=====================  =====================================================================
ViT-Lite, CVT, CCT     ``cct.CompactBlock`` (the stream itself normalised after attention),
                       ``qkv_bias=False``, ``drop_path_rate``; the text CCT adds an ``attn_mask``
ViTBN family           :class:`Block` with ``head_dim=64`` (wider than ``dim / heads``), its norms
                       as layers: ``norm_layer=TokenBatchNorm``, ``norm2_layer=nn.Identity``,
                       ``mlp_layer=partial(Mlp, norm_layer=TokenBatchNorm)``
=====================  =====================================================================

Each :class:`Attention` computes its softmax with ``F.scaled_dot_product_attention`` while
its ``fused_attn`` attribute is True (as in timm), explicitly otherwise. Attention maps come
from :func:`record_attention`, a context manager that makes every :class:`Attention` inside a
model compute its softmax explicitly and keep it; :func:`explicit_attention` sets
``fused_attn`` to False on every :class:`Attention` of a model within the ``with`` (a faster
step for some models and processors, measured by ``training.speed.fastest_step``).
:func:`conv_output_size` and :func:`sinusoidal_embedding` are the small helpers the models
share. Weights saved under other names load with ``vitbook.models.convert``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from going_modular.models.checks import check_positive, check_rates, check_sizes

__all__ = [
    "Attention",
    "Block",
    "DropPath",
    "IntOrTensor",
    "Mlp",
    "Norm",
    "collect_attention",
    "conv_output_size",
    "explicit_attention",
    "record_attention",
    "sinusoidal_embedding",
]

Norm = Callable[[int], nn.Module]
"""A norm layer's constructor, called with the number of features: ``nn.LayerNorm``,
``functools.partial(nn.LayerNorm, eps=1e-6)``, ``TokenBatchNorm``."""

IntOrTensor = TypeVar("IntOrTensor", int, torch.Tensor)


class Attention(nn.Module):
    """Multi-head self-attention: (B, N, dim) tokens -> (B, N, dim).

    One Linear, ``qkv``, makes the queries, keys and values of ``heads`` heads of ``head_dim``
    features each (``head_dim`` defaults to ``dim // heads``); ``proj`` maps the heads'
    concatenated outputs back to ``dim``. ``attn_drop_rate`` drops attention weights,
    ``drop_rate`` the output of ``proj``. ``attn_mask`` (boolean, broadcastable to
    (B, heads, N, N), True where a query may attend to a key, e.g. a (B, 1, 1, N) key-padding
    mask) is that of ``F.scaled_dot_product_attention``, which computes the attention while
    ``fused_attn`` is True (the default). With ``fused_attn`` False (see
    :func:`explicit_attention`), or inside :func:`record_attention`, the softmax is computed
    explicitly instead (and kept by the latter).
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        *,
        head_dim: int | None = None,
        qkv_bias: bool = True,
        attn_drop_rate: float = 0.0,
        drop_rate: float = 0.0,
    ):
        super().__init__()
        check_sizes(dim=dim, heads=heads)
        check_rates(attn_drop_rate=attn_drop_rate, drop_rate=drop_rate)
        if head_dim is None:
            if dim % heads:
                raise ValueError(
                    f"dim={dim} is not divisible by heads={heads}: each head gets dim // heads "
                    f"features, so pick heads among the divisors of {dim} (ViT-Base: 768 / 12 "
                    "= 64 per head), or give head_dim."
                )
            head_dim = dim // heads
        check_sizes(head_dim=head_dim)
        self.heads, self.head_dim = heads, head_dim
        self.attn_drop_rate = attn_drop_rate
        self.qkv = nn.Linear(dim, 3 * heads * head_dim, bias=qkv_bias)
        self.proj = nn.Linear(heads * head_dim, dim)
        self.proj_drop = nn.Dropout(drop_rate)
        self.fused_attn = True  # read in forward: SDPA, or the explicit softmax
        self.recorded: list[torch.Tensor] | None = None  # set by record_attention

    def forward(
        self, x: torch.Tensor, attn_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        batch, tokens, _ = x.shape
        # (B, N, 3 * heads * head_dim) -> 3 x (B, heads, N, head_dim)
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        dropout_p = self.attn_drop_rate if self.training else 0.0
        if self.fused_attn and self.recorded is None:
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=attn_mask, dropout_p=dropout_p
            )
        else:  # the same softmax(q k^T / sqrt(head_dim)) v, step by step
            # (B, heads, N, head_dim) @ (B, heads, head_dim, N) -> (B, heads, N, N)
            scores = q @ k.transpose(-2, -1) * self.head_dim**-0.5
            if attn_mask is not None:
                scores = scores.masked_fill(~attn_mask, float("-inf"))
            weights = scores.softmax(dim=-1)
            if self.recorded is not None:
                self.recorded.append(weights)
            out = F.dropout(weights, dropout_p, training=self.training) @ v
        # (B, heads, N, head_dim) -> (B, N, heads * head_dim): the heads concatenated
        out = out.transpose(1, 2).reshape(batch, tokens, -1)
        return self.proj_drop(self.proj(out))


class Mlp(nn.Module):
    """The feed-forward network: fc1, [norm], GELU, dropout, fc2, dropout.

    ``norm_layer`` normalises the ``hidden_dim`` features between fc1 and the GELU (the
    ViTBN article's BatchNorm); by default there is none.
    """

    def __init__(
        self,
        dim: int,
        hidden_dim: int,
        *,
        drop_rate: float = 0.0,
        norm_layer: Norm | None = None,
    ):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.norm = norm_layer(hidden_dim) if norm_layer else nn.Identity()
        self.act = nn.GELU()
        self.drop1 = nn.Dropout(drop_rate)
        self.fc2 = nn.Linear(hidden_dim, dim)
        self.drop2 = nn.Dropout(drop_rate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.drop1(self.act(self.norm(self.fc1(x))))
        return self.drop2(self.fc2(x))


class DropPath(nn.Module):
    """Stochastic depth: in training, zero a sample's residual branch with probability ``p``
    and scale the kept ones by 1 / (1 - p); the identity in eval mode."""

    def __init__(self, p: float = 0.0):
        super().__init__()
        check_rates(p=p)
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.p == 0.0 or not self.training:
            return x
        keep = 1.0 - self.p
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x * mask.div_(keep)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class Block(nn.Module):
    """One pre-norm encoder layer (the ViT paper's Eq. 2 and 3): attention, then an MLP of
    ``int(dim * mlp_ratio)`` features, each added to the residual stream.

    ``norm_layer`` builds ``norm1`` and ``norm2`` (``norm2_layer``, if given, builds ``norm2``:
    ``nn.Identity`` removes it); ``mlp_layer`` builds the MLP, called as
    ``mlp_layer(dim, hidden_dim, drop_rate=drop_rate)`` (``partial(Mlp, norm_layer=...)`` for an
    MLP with a norm inside). ``drop_rate`` is the dropout after the attention's output projection
    and the MLP's two Linears; ``drop_path_rate`` the stochastic depth of both branches; the
    other arguments go to :class:`Attention`.
    """

    # x = x + drop_path(attn(norm1(x)))      Eq. 2
    # x = x + drop_path(mlp(norm2(x)))       Eq. 3

    def __init__(
        self,
        dim: int,
        heads: int,
        mlp_ratio: float = 4.0,
        *,
        head_dim: int | None = None,
        qkv_bias: bool = True,
        drop_rate: float = 0.0,
        attn_drop_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        norm_layer: Norm = nn.LayerNorm,
        norm2_layer: Norm | None = None,
        mlp_layer: Callable[..., nn.Module] = Mlp,
    ):
        super().__init__()
        check_positive(mlp_ratio=mlp_ratio)
        check_rates(drop_path_rate=drop_path_rate)
        if int(dim * mlp_ratio) < 1:
            raise ValueError(
                f"mlp_ratio={mlp_ratio} gives an MLP of width int({dim} * {mlp_ratio}) = 0: "
                "use a larger mlp_ratio."
            )
        self.norm1 = norm_layer(dim)
        self.attn = Attention(
            dim,
            heads,
            head_dim=head_dim,
            qkv_bias=qkv_bias,
            attn_drop_rate=attn_drop_rate,
            drop_rate=drop_rate,
        )
        self.norm2 = (norm2_layer or norm_layer)(dim)
        self.mlp = mlp_layer(dim, int(dim * mlp_ratio), drop_rate=drop_rate)
        self.drop_path = DropPath(drop_path_rate)

    def forward(
        self, x: torch.Tensor, attn_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        x = x + self.drop_path(self.attn(self.norm1(x), attn_mask))
        x = x + self.drop_path(self.mlp(self.norm2(x)))
        return x


# Helpers shared by the models -------------------------------------------------------------------


def conv_output_size(
    size: IntOrTensor, kernel_size: int, stride: int = 1, padding: int = 0
) -> IntOrTensor:
    """Output length of a convolution or max-pool along one axis (dilation 1,
    ``ceil_mode=False``); ``size`` may be a tensor of lengths."""
    return (size + 2 * padding - kernel_size) // stride + 1


def sinusoidal_embedding(
    num_positions: int, dim: int, *, interleave: bool = True
) -> torch.Tensor:
    """Fixed positions (1, num_positions, dim) of "Attention Is All You Need":
    angle(p, i) = p / 10000^(2i / dim), computed in float64 and returned as float32.

    ``interleave=True`` (the compact transformers') puts sin(angle(p, i)) in column 2i and
    cos(angle(p, i)) in column 2i + 1; ``interleave=False`` (the ViTBN article's ``pe1d``, which
    needs an even ``dim``) puts the dim / 2 sines first, then the cosines.
    """
    if not interleave and dim % 2:
        raise ValueError(f"Sinusoidal positions need an even dim, got {dim}.")
    position = torch.arange(num_positions, dtype=torch.float64)[:, None]
    pair = torch.arange((dim + 1) // 2, dtype=torch.float64)  # i
    angle = position / 10000 ** (2 * pair / dim)  # (num_positions, ceil(dim / 2))
    if interleave:
        # (P, ceil(dim / 2), 2) -> (P, 2 * ceil(dim / 2)): sin, cos, sin, cos, ...
        pe = torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)[:, :dim]
    else:
        pe = torch.cat([angle.sin(), angle.cos()], dim=1)  # (P, dim)
    return pe.to(torch.float32).unsqueeze(0)


# Attention maps ---------------------------------------------------------------------------------


@contextmanager
def explicit_attention(model: nn.Module) -> Iterator[None]:
    """Within the ``with``, every :class:`Attention` in ``model`` computes
    softmax(q k^T / sqrt(d)) v as two matmuls and a softmax, not with
    ``F.scaled_dot_product_attention``: their ``fused_attn`` is False, then restored.

    The result is the same up to float rounding. Under autocast the matmuls then run in its
    low precision (SDPA's math kernel works in float32 on a CPU); for the short sequences of
    small heads of the compact models that is the faster step on some CPUs
    (``training.speed.fastest_step`` measures it). A model without :class:`Attention`
    (a CNN, torchvision's ViT) is left as it is.
    """
    previous = {m: m.fused_attn for m in model.modules() if isinstance(m, Attention)}
    for attention in previous:
        attention.fused_attn = False
    try:
        yield
    finally:
        for attention, fused in previous.items():
            attention.fused_attn = fused


@contextmanager
def record_attention(model: nn.Module) -> Iterator[list[torch.Tensor]]:
    """Keep the attention weights of every :class:`Attention` in ``model`` within the ``with``.

    Yields a list that receives one (B, heads, N, N) tensor per attention call, in call order
    (one per layer for a forward pass): the softmax before attention dropout, so each row sums
    to one and masked keys get weight zero. The output is that of the fused kernel up to float
    rounding. The tensors keep their autograd graph; run under ``torch.no_grad()`` to drop it::

        with torch.no_grad(), record_attention(model) as maps:
            model(images)
    """
    attentions = [m for m in model.modules() if isinstance(m, Attention)]
    if not attentions:
        raise ValueError(
            f"{type(model).__name__} has no going_modular.models.layers.Attention to record."
        )
    if any(m.recorded is not None for m in attentions):
        raise RuntimeError(
            "record_attention is already active on this model: nest it on parts only."
        )
    maps: list[torch.Tensor] = []
    for attention in attentions:
        attention.recorded = maps
    try:
        yield maps
    finally:
        for attention in attentions:
            attention.recorded = None


@torch.no_grad()
def collect_attention(
    model: nn.Module, *inputs: Any, **kwargs: Any
) -> list[torch.Tensor]:
    """Run ``model(*inputs, **kwargs)`` once in eval mode, without gradients, and return its
    attention weights (see :func:`record_attention`); the train/eval mode is restored."""
    was_training = model.training
    model.eval()
    try:
        with record_attention(model) as maps:
            model(*inputs, **kwargs)
    finally:
        model.train(was_training)
    return maps
