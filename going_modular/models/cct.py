"""Compact Transformers: ViT-Lite, CVT and CCT of Hassani et al., "Escaping the Big Data Paradigm
with Compact Transformers" (2021), for images and text.

The three image families share one transformer body and differ in the tokenizer and the pooling:

=============  =========================================  =============================
model          tokenizer                                  pooling
=============  =========================================  =============================
ViT-Lite       one conv, kernel = stride = patch size     class token
CVT            one conv, kernel = stride = patch size     :class:`SeqPool`
CCT            1-2 x [conv, ReLU, max-pool]               :class:`SeqPool`
=============  =========================================  =============================

Names follow the paper: ``cct_7_3x1`` has 7 encoder layers and 1 convolution with a 3x3 kernel;
``vit_lite_7_4`` and ``cvt_7_4`` have 7 layers and 4x4 patches. Layer sizes, initialisation and
the encoder layer's wiring follow the authors' reference code (SHI-Labs/Compact-Transformers), so
parameter counts match it, and so do the ``state_dict`` key names of the image models. Unlike
the reference, ``positional_embedding="sine"`` is a fixed buffer (never a parameter) and reaches
the model from every factory, ``"none"`` works, and the text models' padding masks work: the
reference's text models take masks too, but its tokenizer returns them in a shape its attention
rejects, its SeqPool ignores them, and its text position tables have one row too many (chapter 11
shows each of these).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .checks import check_positive, check_rates, check_sizes
from .registry import register_model

POSITIONAL_EMBEDDINGS = ("learnable", "sine", "none")


def _conv_out(size: int, kernel: int, stride: int, padding: int) -> int:
    """Output length of a convolution or max-pool (``ceil_mode=False``, dilation 1)."""
    return (size + 2 * padding - kernel) // stride + 1


class Tokenizer(nn.Module):
    """Images (B, C, H, W) -> tokens (B, N, D): ``n_conv_layers`` x [Conv2d, ReLU, MaxPool2d].

    Channels go ``in_channels -> in_planes -> ... -> embedding_dim``; the feature map is then
    flattened row by row into N = H' * W' tokens. ViT-Lite and CVT use :meth:`patchify`: a single
    conv with kernel = stride = patch size and a bias, without ReLU or pooling.
    """

    def __init__(
        self,
        in_channels: int,
        embedding_dim: int,
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
            embedding_dim=embedding_dim,
            kernel_size=kernel_size,
            stride=stride,
            n_conv_layers=n_conv_layers,
            in_planes=in_planes,
            pooling_kernel_size=pooling_kernel_size,
            pooling_stride=pooling_stride,
        )
        check_sizes(0, padding=padding, pooling_padding=pooling_padding)
        self.in_channels = in_channels
        channels = [in_channels] + [in_planes] * (n_conv_layers - 1) + [embedding_dim]
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
    def patchify(
        cls, in_channels: int, embedding_dim: int, patch_size: int
    ) -> Tokenizer:
        """ViT-Lite's and CVT's tokenizer: non-overlapping ``patch_size`` patches, linearly mapped."""
        return cls(
            in_channels,
            embedding_dim,
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


class TextTokenizer(nn.Module):
    """Word embeddings (B, L, E) -> tokens (B, N, D): Conv1d over the sequence, ReLU, max-pool.

    With a padding ``mask`` (B, L) (True = real token, padding at the end) the output mask
    (B, N) marks exactly the tokens the unpadded sequence would produce, and every other token
    is zeroed, so padding cannot leak into real tokens: padded embeddings are zeroed before the
    conv (as its own zero padding would be), and conv outputs past the real length are zeroed
    before pooling (equivalent to the pool's -inf padding, because ReLU outputs are >= 0).
    """

    def __init__(
        self,
        word_embedding_dim: int,
        embedding_dim: int,
        kernel_size: int,
        stride: int,
        padding: int,
        pooling_kernel_size: int = 2,
        pooling_stride: int = 2,
        pooling_padding: int = 1,
    ):
        super().__init__()
        check_sizes(
            word_embedding_dim=word_embedding_dim,
            embedding_dim=embedding_dim,
            kernel_size=kernel_size,
            stride=stride,
            pooling_kernel_size=pooling_kernel_size,
            pooling_stride=pooling_stride,
        )
        check_sizes(0, padding=padding, pooling_padding=pooling_padding)
        self.conv_layers = nn.Sequential(
            nn.Conv1d(
                word_embedding_dim,
                embedding_dim,
                kernel_size,
                stride,
                padding,
                bias=False,
            ),
            nn.ReLU(),
            nn.MaxPool1d(pooling_kernel_size, pooling_stride, pooling_padding),
        )
        nn.init.kaiming_normal_(self.conv_layers[0].weight)

    def _conv_length(self, length: torch.Tensor | int) -> torch.Tensor | int:
        conv = self.conv_layers[0]
        return (length + 2 * conv.padding[0] - conv.kernel_size[0]) // conv.stride[
            0
        ] + 1

    def _pool_length(self, length: torch.Tensor | int) -> torch.Tensor | int:
        pool = self.conv_layers[2]
        return (length + 2 * pool.padding - pool.kernel_size) // pool.stride + 1

    def sequence_length(self, seq_len: int) -> int:
        """Number of tokens N for ``seq_len`` words."""
        return self._pool_length(self._conv_length(seq_len))

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(B, L, E) embeddings and optional (B, L) mask -> (B, N, D) tokens and (B, N) mask."""
        conv, relu, pool = self.conv_layers
        if mask is None:
            return pool(relu(conv(x.transpose(1, 2)))).transpose(1, 2), None
        lengths = mask.sum(dim=1, keepdim=True)  # (B, 1) real words per sequence
        x = relu(conv((x * mask.unsqueeze(-1)).transpose(1, 2)))  # (B, D, L1)
        x = (
            x
            * (torch.arange(x.shape[-1], device=x.device) < self._conv_length(lengths))[
                :, None
            ]
        )
        x = pool(x)
        token_lengths = self._pool_length(self._conv_length(lengths))
        token_mask = torch.arange(x.shape[-1], device=x.device) < token_lengths
        return (x * token_mask[:, None]).transpose(1, 2), token_mask


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


class Attention(nn.Module):
    """Multi-head self-attention: fused ``qkv`` Linear without bias, ``proj`` Linear with bias.

    ``attn_mask`` is a boolean mask broadcastable to (B, heads, N, N), True where a query may
    attend to a key, e.g. a (B, 1, 1, N) key-padding mask, as in
    ``F.scaled_dot_product_attention``.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        attention_dropout: float = 0.1,
        projection_dropout: float = 0.0,
    ):
        super().__init__()
        check_sizes(embedding_dim=dim, num_heads=num_heads)
        check_rates(
            attention_dropout=attention_dropout, projection_dropout=projection_dropout
        )
        if dim % num_heads:
            raise ValueError(
                f"embedding_dim={dim} is not divisible by num_heads={num_heads}."
            )
        self.num_heads = num_heads
        self.attention_dropout = attention_dropout
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(projection_dropout)

    def forward(
        self,
        x: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        need_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """(B, N, D) -> (B, N, D); with ``need_weights`` also the (B, heads, N, N) softmax."""
        batch, tokens, dim = x.shape
        # (B, N, 3D) -> (3, B, heads, N, head_dim)
        qkv = self.qkv(x).reshape(
            batch, tokens, 3, self.num_heads, dim // self.num_heads
        )
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        dropout_p = self.attention_dropout if self.training else 0.0
        if need_weights:
            scores = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
            if attn_mask is not None:
                scores = scores.masked_fill(~attn_mask, float("-inf"))
            weights = scores.softmax(dim=-1)
            out = F.dropout(weights, dropout_p, training=self.training) @ v
        else:
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=attn_mask, dropout_p=dropout_p
            )
        out = self.proj_drop(self.proj(out.transpose(1, 2).reshape(batch, tokens, dim)))
        return (out, weights) if need_weights else out


class TransformerEncoderLayer(nn.Module):
    """The reference's encoder layer; note the LayerNorm *on the residual stream* after attention::

        x = x + drop_path(attn(pre_norm(x)))
        x = norm1(x)
        x = x + drop_path(dropout2(linear2(dropout1(gelu(linear1(x))))))

    Unlike a standard pre-norm block (ViT, timm), ``norm1`` normalises the residual stream
    itself, and the MLP's output is added to that normalised stream. The parameters are those of
    a pre-norm block: two LayerNorms, the attention, and the MLP's two Linears.
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int,
        dropout: float = 0.0,
        attention_dropout: float = 0.1,
        drop_path_rate: float = 0.0,
    ):
        super().__init__()
        check_sizes(d_model=d_model, nhead=nhead, dim_feedforward=dim_feedforward)
        check_rates(dropout=dropout, drop_path_rate=drop_path_rate)
        self.pre_norm = nn.LayerNorm(d_model)
        self.self_attn = Attention(
            d_model, nhead, attention_dropout, projection_dropout=dropout
        )
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout1 = nn.Dropout(dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.dropout2 = nn.Dropout(dropout)
        self.drop_path = DropPath(drop_path_rate)

    def forward(
        self,
        x: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        need_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """(B, N, D) -> (B, N, D); with ``need_weights`` also the layer's attention weights."""
        attended = self.self_attn(self.pre_norm(x), attn_mask, need_weights)
        if need_weights:
            attended, weights = attended
        x = self.norm1(x + self.drop_path(attended))
        x = x + self.drop_path(
            self.dropout2(self.linear2(self.dropout1(F.gelu(self.linear1(x)))))
        )
        return (x, weights) if need_weights else x


class SeqPool(nn.Module):
    """Sequence pooling: ``softmax(x W^T + b)`` over the N tokens weights their sum -> (B, D).

    ``weight`` (1, D) and ``bias`` (1,) are an ``nn.Linear(D, 1)``'s, held directly so the
    ``state_dict`` keys match the reference's ``attention_pool`` Linear. Tokens where ``mask``
    is False get weight zero.
    """

    def __init__(self, embedding_dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(1, embedding_dim))
        self.bias = nn.Parameter(torch.zeros(1))
        nn.init.trunc_normal_(self.weight, std=0.02)

    def pool_weights(
        self, x: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, N, D) tokens -> (B, N) weights, each row summing to one."""
        scores = F.linear(x, self.weight, self.bias).squeeze(-1)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return scores.softmax(dim=-1)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, N, D) tokens -> pooled (B, D) and the (B, N) weights used."""
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
    """Tokens (B, N, D) -> logits: position embedding, encoder layers, LayerNorm, pooling, Linear.

    Pooling is :class:`SeqPool` if ``seq_pool`` (CVT, CCT), else a class token (ViT-Lite).
    ``positional_embedding`` is ``"learnable"`` (trunc-normal std 0.2 Parameter), ``"sine"``
    (a fixed buffer: in ``state_dict`` but not in ``parameters()``) or ``"none"``. Stochastic
    depth rises linearly from 0 in the first layer to ``stochastic_depth`` in the last; Linear
    weights are trunc-normal std 0.02 with zero biases, LayerNorms ones and zeros.
    """

    def __init__(
        self,
        seq_pool: bool = True,
        embedding_dim: int = 768,
        num_layers: int = 12,
        num_heads: int = 12,
        mlp_ratio: float = 4.0,
        num_classes: int = 1000,
        dropout: float = 0.1,
        attention_dropout: float = 0.1,
        stochastic_depth: float = 0.1,
        positional_embedding: str = "learnable",
        sequence_length: int | None = None,
    ):
        super().__init__()
        check_sizes(
            embedding_dim=embedding_dim,
            num_layers=num_layers,
            num_heads=num_heads,
            num_classes=num_classes,
        )
        check_positive(mlp_ratio=mlp_ratio)
        check_rates(
            dropout=dropout,
            attention_dropout=attention_dropout,
            stochastic_depth=stochastic_depth,
        )
        if int(embedding_dim * mlp_ratio) < 1:
            raise ValueError(
                f"mlp_ratio={mlp_ratio} gives an MLP of width "
                f"int({embedding_dim} * {mlp_ratio}) = 0: use a larger mlp_ratio."
            )
        if sequence_length is not None:
            check_sizes(sequence_length=sequence_length)
        if positional_embedding not in POSITIONAL_EMBEDDINGS:
            raise ValueError(
                f"Unknown positional_embedding {positional_embedding!r}: choose one of "
                f"{', '.join(map(repr, POSITIONAL_EMBEDDINGS))}."
            )
        if sequence_length is None and positional_embedding != "none":
            raise ValueError(
                f"positional_embedding={positional_embedding!r} needs sequence_length."
            )
        self.sequence_length = sequence_length
        if seq_pool:
            self.class_emb = None
            self.attention_pool = SeqPool(embedding_dim)
        else:
            self.class_emb = nn.Parameter(torch.zeros(1, 1, embedding_dim))
            self.attention_pool = None
        num_positions = (
            None
            if sequence_length is None
            else sequence_length + (0 if seq_pool else 1)
        )
        if positional_embedding == "learnable":
            self.positional_emb = nn.Parameter(
                torch.empty(1, num_positions, embedding_dim)
            )
            nn.init.trunc_normal_(self.positional_emb, std=0.2)
        elif positional_embedding == "sine":
            self.register_buffer(
                "positional_emb", sinusoidal_embedding(num_positions, embedding_dim)
            )
        else:
            self.positional_emb = None
        self.dropout = nn.Dropout(dropout)
        rates = torch.linspace(0, stochastic_depth, num_layers, device="cpu").tolist()
        self.blocks = nn.ModuleList(
            TransformerEncoderLayer(
                embedding_dim,
                num_heads,
                int(embedding_dim * mlp_ratio),
                dropout,
                attention_dropout,
                drop_path_rate=rate,
            )
            for rate in rates
        )
        self.norm = nn.LayerNorm(embedding_dim)
        self.fc = nn.Linear(embedding_dim, num_classes)
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
        if self.class_emb is not None:
            x = torch.cat([self.class_emb.expand(x.shape[0], -1, -1), x], dim=1)
            if mask is not None:
                mask = torch.cat([mask.new_ones(mask.shape[0], 1), mask], dim=1)
        if self.positional_emb is not None:
            if x.shape[1] > self.positional_emb.shape[1]:
                raise ValueError(
                    f"Got {x.shape[1]} tokens but the position embedding has "
                    f"{self.positional_emb.shape[1]} positions: shorten the input or build the "
                    "model for longer sequences."
                )
            x = x + self.positional_emb[:, : x.shape[1]]
        return self.dropout(x), mask

    def forward_features(
        self, x: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Tokens (B, N, D) -> encoded tokens after the final LayerNorm (B, N (+1), D)."""
        x, mask = self._embed(x, mask)
        attn_mask = None if mask is None else mask[:, None, None, :]
        for block in self.blocks:
            x = block(x, attn_mask)
        return self.norm(x)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        return_pool_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Tokens (B, N, D) and optional (B, N) mask (True = real token) -> logits (B, classes).

        With ``return_pool_weights`` also SeqPool's (B, N) weights (not for class-token models).
        """
        x = self.forward_features(x, mask)
        if self.attention_pool is None:
            if return_pool_weights:
                raise ValueError(
                    "This model pools with a class token: it has no SeqPool weights."
                )
            return self.fc(x[:, 0])
        pooled, weights = self.attention_pool(x, mask)
        logits = self.fc(pooled)
        return (logits, weights) if return_pool_weights else logits

    @torch.no_grad()
    def get_attention_maps(
        self, x: torch.Tensor, mask: torch.Tensor | None = None
    ) -> list[torch.Tensor]:
        """One (B, heads, N, N) attention tensor per layer, computed in eval mode."""
        was_training = self.training
        self.eval()
        try:
            x, mask = self._embed(x, mask)
            attn_mask = None if mask is None else mask[:, None, None, :]
            maps = []
            for block in self.blocks:
                x, weights = block(x, attn_mask, need_weights=True)
                maps.append(weights)
        finally:
            self.train(was_training)
        return maps


# Image models -----------------------------------------------------------------------------------


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
    """A :class:`Tokenizer` followed by a :class:`TransformerClassifier`, for fixed-size images.

    ``grid_size`` is the (H', W') token grid, e.g. to show SeqPool weights as an image:
    ``model(x, return_pool_weights=True)[1].reshape(-1, *model.grid_size)``.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        img_size: int | tuple[int, int],
        seq_pool: bool,
        num_classes: int = 10,
        embedding_dim: int = 256,
        num_layers: int = 7,
        num_heads: int = 4,
        mlp_ratio: float = 2.0,
        dropout: float = 0.0,
        attention_dropout: float = 0.1,
        stochastic_depth: float = 0.1,
        positional_embedding: str = "learnable",
    ):
        super().__init__()
        self.img_size = _image_size(img_size)
        self.in_channels = tokenizer.in_channels
        self.tokenizer = tokenizer
        self.grid_size = tokenizer.grid_size(*self.img_size)
        self.classifier = TransformerClassifier(
            seq_pool=seq_pool,
            embedding_dim=embedding_dim,
            num_layers=num_layers,
            num_heads=num_heads,
            mlp_ratio=mlp_ratio,
            num_classes=num_classes,
            dropout=dropout,
            attention_dropout=attention_dropout,
            stochastic_depth=stochastic_depth,
            positional_embedding=positional_embedding,
            sequence_length=self.grid_size[0] * self.grid_size[1],
        )

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
        """Images (B, C, H, W) -> logits (B, classes); with ``return_pool_weights`` also the
        (B, N) SeqPool weights (CVT and CCT only)."""
        return self.classifier(self._tokens(x), return_pool_weights=return_pool_weights)

    def get_attention_maps(self, x: torch.Tensor) -> list[torch.Tensor]:
        """One (B, heads, N, N) attention tensor per encoder layer, computed in eval mode."""
        return self.classifier.get_attention_maps(self._tokens(x))


class CCT(CompactTransformer):
    """Compact Convolutional Transformer: ``n_conv_layers`` x [conv, ReLU, max-pool], SeqPool.

    Stride and padding default to the reference's ``max(1, k // 2 - 1)`` and ``max(1, k // 2)``:
    stride 1, padding 1 for 3x3 kernels; stride 2, padding 3 for 7x7.
    """

    def __init__(
        self,
        img_size: int | tuple[int, int] = 32,
        in_channels: int = 3,
        num_classes: int = 10,
        embedding_dim: int = 256,
        n_conv_layers: int = 1,
        kernel_size: int = 3,
        stride: int | None = None,
        padding: int | None = None,
        **kwargs: Any,
    ):
        tokenizer = Tokenizer(
            in_channels,
            embedding_dim,
            kernel_size,
            stride=max(1, kernel_size // 2 - 1) if stride is None else stride,
            padding=max(1, kernel_size // 2) if padding is None else padding,
            n_conv_layers=n_conv_layers,
        )
        super().__init__(
            tokenizer, img_size, True, num_classes, embedding_dim, **kwargs
        )


def _check_patches(img_size: int | tuple[int, int], patch_size: int) -> None:
    check_sizes(patch_size=patch_size)
    for side in _image_size(img_size):
        if side % patch_size:
            raise ValueError(
                f"Image size {side} is not divisible by patch size {patch_size}: use a multiple "
                f"of {patch_size} (e.g. {max(patch_size, side // patch_size * patch_size)})."
            )


class ViTLite(CompactTransformer):
    """ViT-Lite: a small ViT (patch tokenizer, class token) with the compact encoder layers."""

    seq_pool = False

    def __init__(
        self,
        img_size: int | tuple[int, int] = 32,
        in_channels: int = 3,
        num_classes: int = 10,
        embedding_dim: int = 256,
        patch_size: int = 4,
        **kwargs: Any,
    ):
        _check_patches(img_size, patch_size)
        tokenizer = Tokenizer.patchify(in_channels, embedding_dim, patch_size)
        super().__init__(
            tokenizer, img_size, self.seq_pool, num_classes, embedding_dim, **kwargs
        )


class CVT(ViTLite):
    """Compact Vision Transformer: ViT-Lite with SeqPool instead of a class token."""

    seq_pool = True


# Text model -------------------------------------------------------------------------------------


class TextCCT(nn.Module):
    """CCT for text classification: word embedding, :class:`TextTokenizer`, transformer, SeqPool.

    ``forward(token_ids, mask)`` takes (B, L) token ids with L <= ``seq_len`` and an optional
    (B, L) padding mask, True for real tokens, padding at the end. Padding then changes nothing:
    the logits equal those of the unpadded sequence (the mask is applied to the embeddings, in
    every attention layer as a key-padding mask, and in SeqPool). Without a mask every position
    is treated as a real token. ``embedding_weights`` (vocab_size, word_embedding_dim), e.g.
    GloVe vectors, initialise the word embedding; ``freeze_embedding`` keeps it fixed.
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        seq_len: int = 64,
        word_embedding_dim: int = 300,
        embedding_dim: int = 128,
        num_layers: int = 2,
        num_heads: int = 2,
        mlp_ratio: float = 1.0,
        kernel_size: int = 2,
        stride: int | None = None,
        padding: int | None = None,
        pooling_kernel_size: int = 2,
        pooling_stride: int = 2,
        pooling_padding: int = 1,
        dropout: float = 0.0,
        attention_dropout: float = 0.1,
        stochastic_depth: float = 0.1,
        positional_embedding: str = "sine",
        padding_idx: int | None = 1,
        embedding_weights: torch.Tensor | None = None,
        freeze_embedding: bool = False,
    ):
        super().__init__()
        check_sizes(
            vocab_size=vocab_size,
            num_classes=num_classes,
            seq_len=seq_len,
            word_embedding_dim=word_embedding_dim,
        )
        if embedding_weights is None:
            self.embedding = nn.Embedding(
                vocab_size, word_embedding_dim, padding_idx=padding_idx
            )
            self.embedding.weight.requires_grad_(not freeze_embedding)
        else:
            if tuple(embedding_weights.shape) != (vocab_size, word_embedding_dim):
                raise ValueError(
                    f"embedding_weights has shape {tuple(embedding_weights.shape)}, expected "
                    f"(vocab_size, word_embedding_dim) = ({vocab_size}, {word_embedding_dim})."
                )
            self.embedding = nn.Embedding.from_pretrained(
                embedding_weights, freeze=freeze_embedding, padding_idx=padding_idx
            )
        self.seq_len = seq_len
        self.tokenizer = TextTokenizer(
            word_embedding_dim,
            embedding_dim,
            kernel_size,
            stride=max(1, kernel_size // 2 - 1) if stride is None else stride,
            padding=max(1, kernel_size // 2) if padding is None else padding,
            pooling_kernel_size=pooling_kernel_size,
            pooling_stride=pooling_stride,
            pooling_padding=pooling_padding,
        )
        tokens = self.tokenizer.sequence_length(seq_len)
        if tokens < 1:
            raise ValueError(
                f"seq_len={seq_len} leaves no tokens after the convolution and pooling: "
                "use longer sequences or a smaller kernel_size or pooling."
            )
        self.classifier = TransformerClassifier(
            seq_pool=True,
            embedding_dim=embedding_dim,
            num_layers=num_layers,
            num_heads=num_heads,
            mlp_ratio=mlp_ratio,
            num_classes=num_classes,
            dropout=dropout,
            attention_dropout=attention_dropout,
            stochastic_depth=stochastic_depth,
            positional_embedding=positional_embedding,
            sequence_length=tokens,
        )

    def forward(
        self,
        token_ids: torch.Tensor,
        mask: torch.Tensor | None = None,
        return_pool_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """(B, L) token ids and optional (B, L) mask -> logits (B, classes); with
        ``return_pool_weights`` also SeqPool's (B, N) weights over the conv tokens."""
        if token_ids.ndim != 2 or token_ids.shape[1] > self.seq_len:
            raise ValueError(
                f"Expected token ids of shape (B, L) with L <= seq_len={self.seq_len}, got "
                f"{tuple(token_ids.shape)}."
            )
        if mask is not None:
            if mask.shape != token_ids.shape:
                raise ValueError(
                    f"mask shape {tuple(mask.shape)} differs from token_ids {tuple(token_ids.shape)}."
                )
            mask = mask.bool()
            if (mask[:, 1:] & ~mask[:, :-1]).any():
                raise ValueError(
                    "mask must be right-padded: True for the real tokens, then False."
                )
            if not mask[:, 0].all():
                raise ValueError(
                    "Every sequence needs at least one real token (mask[:, 0] True)."
                )
        x, mask = self.tokenizer(self.embedding(token_ids), mask)
        return self.classifier(x, mask, return_pool_weights=return_pool_weights)


# Registered factories ---------------------------------------------------------------------------

# num_layers -> (embedding_dim, num_heads, mlp_ratio), as in the paper
_SIZES: dict[int, tuple[int, int, float]] = {
    2: (128, 2, 1.0),
    4: (128, 2, 1.0),
    6: (256, 4, 2.0),
    7: (256, 4, 2.0),
    14: (384, 6, 3.0),
}


def _size(num_layers: int) -> dict[str, Any]:
    embedding_dim, num_heads, mlp_ratio = _SIZES[num_layers]
    return dict(
        num_layers=num_layers,
        embedding_dim=embedding_dim,
        num_heads=num_heads,
        mlp_ratio=mlp_ratio,
    )


def _image_variant(
    name: str,
    cls: type[CompactTransformer],
    num_layers: int,
    img_size: int = 32,
    **tokenizer: int,
) -> Callable[..., CompactTransformer]:
    """A factory for one of the paper's variants, registered with :func:`build_model` as ``name``.

    The factory takes ``num_classes``, ``img_size``, ``in_channels`` and ``positional_embedding``;
    any other keyword (``dropout``, ``embedding_dim``, ...) overrides the variant's setting.
    """
    default_img_size = img_size

    def factory(
        num_classes: int = 10,
        img_size: int = default_img_size,
        in_channels: int = 3,
        positional_embedding: str = "learnable",
        **overrides: Any,
    ) -> CompactTransformer:
        config = (
            _size(num_layers)
            | tokenizer
            | {"positional_embedding": positional_embedding}
        )
        return cls(img_size, in_channels, num_classes, **(config | overrides))

    dim, heads, ratio = _SIZES[num_layers]
    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = (
        f"{cls.__name__}, {num_layers} layers, D={dim}, {heads} heads, MLP ratio {ratio:g}, "
        f"tokenizer {tokenizer}; {default_img_size} px images by default."
    )
    return register_model(name)(factory)


# ViT-Lite-L/P and CVT-L/P: L layers, PxP patches. CCT-L/KxC: L layers, C convs of kernel K.
vit_lite_2_4 = _image_variant("vit_lite_2_4", ViTLite, 2, patch_size=4)
vit_lite_4_4 = _image_variant("vit_lite_4_4", ViTLite, 4, patch_size=4)
vit_lite_6_4 = _image_variant("vit_lite_6_4", ViTLite, 6, patch_size=4)
vit_lite_7_4 = _image_variant("vit_lite_7_4", ViTLite, 7, patch_size=4)
cvt_2_4 = _image_variant("cvt_2_4", CVT, 2, patch_size=4)
cvt_4_4 = _image_variant("cvt_4_4", CVT, 4, patch_size=4)
cvt_6_4 = _image_variant("cvt_6_4", CVT, 6, patch_size=4)
cvt_7_4 = _image_variant("cvt_7_4", CVT, 7, patch_size=4)
cct_2_3x2 = _image_variant("cct_2_3x2", CCT, 2, kernel_size=3, n_conv_layers=2)
cct_4_3x2 = _image_variant("cct_4_3x2", CCT, 4, kernel_size=3, n_conv_layers=2)
cct_6_3x1 = _image_variant("cct_6_3x1", CCT, 6, kernel_size=3, n_conv_layers=1)
cct_6_3x2 = _image_variant("cct_6_3x2", CCT, 6, kernel_size=3, n_conv_layers=2)
cct_7_3x1 = _image_variant("cct_7_3x1", CCT, 7, kernel_size=3, n_conv_layers=1)
cct_7_3x2 = _image_variant("cct_7_3x2", CCT, 7, kernel_size=3, n_conv_layers=2)
cct_7_7x2 = _image_variant(
    "cct_7_7x2", CCT, 7, img_size=224, kernel_size=7, n_conv_layers=2
)
cct_14_7x2 = _image_variant(
    "cct_14_7x2", CCT, 14, img_size=224, kernel_size=7, n_conv_layers=2
)


# Text factories (not registered: they take token ids and a vocabulary, not images) -------------


def _text_variant(num_layers: int) -> Callable[..., TextCCT]:
    """The factory ``text_cct_<num_layers>``: ``(vocab_size, num_classes, kernel_size, seq_len)``."""

    def factory(
        vocab_size: int,
        num_classes: int,
        kernel_size: int = 2,
        seq_len: int = 64,
        **overrides: Any,
    ) -> TextCCT:
        config = _size(num_layers) | overrides
        return TextCCT(
            vocab_size, num_classes, seq_len, kernel_size=kernel_size, **config
        )

    dim, heads, ratio = _SIZES[num_layers]
    factory.__name__ = factory.__qualname__ = f"text_cct_{num_layers}"
    factory.__doc__ = (
        f"Text CCT-{num_layers}: {num_layers} layers, D={dim}, {heads} heads, MLP ratio {ratio:g}; "
        "the reference uses kernel 1, 2 or 4."
    )
    return factory


text_cct_2 = _text_variant(2)
text_cct_4 = _text_variant(4)
text_cct_6 = _text_variant(6)
