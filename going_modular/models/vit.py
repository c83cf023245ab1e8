"""The Vision Transformer of "An Image is Worth 16x16 Words" (Dosovitskiy et al., 2021).

Figure 1 and section 3.1 of the paper, one class per piece:

* Eq. 1  ``z_0 = [x_class; x_p^1 E; ...; x_p^N E] + E_pos``  -> :class:`PatchEmbedding`, and the
  class and position embeddings of :class:`ViT`
* Eq. 2  ``z'_l = MSA(LN(z_{l-1})) + z_{l-1}``                 -> :class:`MultiheadSelfAttentionBlock`
* Eq. 3  ``z_l = MLP(LN(z'_l)) + z'_l``                        -> :class:`MLPBlock`
* Eq. 2 and 3 together                                         -> :class:`TransformerEncoderBlock`
* Eq. 4  ``y = LN(z_L^0)`` then a linear head                  -> ``ViT.classifier``

Table 1's ViT-Base/Large/Huge are the registered factories ``vit_b_16``, ``vit_l_16`` and
``vit_h_14``; ``vit_tiny`` is a small ViT for training from scratch on a CPU. The
``load_*`` helpers copy weights from torchvision and ``torch.nn`` modules, so the chapters can
check every block against a reference implementation.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torchvision.models import VisionTransformer

from .checks import check_positive, check_rates, check_sizes
from .registry import register_model


class PatchEmbedding(nn.Module):
    """Eq. 1's patches and linear projection: (B, C, H, W) images -> (B, N, D) patch embeddings.

    A ``Conv2d`` whose kernel and stride both equal ``patch_size`` cuts the image into
    non-overlapping patches and applies the same linear map E to each one.
    """

    def __init__(
        self, in_channels: int = 3, patch_size: int = 16, embedding_dim: int = 768
    ):
        super().__init__()
        check_sizes(
            in_channels=in_channels, patch_size=patch_size, embedding_dim=embedding_dim
        )
        self.in_channels = in_channels
        self.patch_size = patch_size
        self.patcher = nn.Conv2d(
            in_channels, embedding_dim, kernel_size=patch_size, stride=patch_size
        )
        self.flatten = nn.Flatten(start_dim=2, end_dim=3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim != 4:
            raise ValueError(
                f"Expected a batch of images shaped (B, C, H, W), got shape {tuple(x.shape)}: "
                "add a batch dimension with x.unsqueeze(0)."
            )
        _, channels, height, width = x.shape
        if channels != self.in_channels:
            raise ValueError(
                f"Expected {self.in_channels} input channels, got {channels}: convert the images "
                f"(e.g. PIL's .convert('RGB')) or build the model with in_channels={channels}."
            )
        p = self.patch_size
        if height % p or width % p:
            h, w = max(p, height // p * p), max(p, width // p * p)
            example = str(h) if h == w else f"{h}x{w}"
            raise ValueError(
                f"Image size {height}x{width} is not divisible by patch size {p}: "
                f"resize or crop to a multiple of {p} (e.g. {example})."
            )
        # (B, D, H/p, W/p) -> (B, D, N) -> (B, N, D)
        return self.flatten(self.patcher(x)).transpose(1, 2)


class MultiheadSelfAttentionBlock(nn.Module):
    """Eq. 2's ``MSA(LN(z))`` (without the residual): LayerNorm then multi-head self-attention.

    ``qkv`` is one fused Linear whose (3D, D) weight stacks W_q, W_k and W_v, laid out like
    ``nn.MultiheadAttention.in_proj_weight``; ``proj`` is the output projection W_o.
    ``proj_dropout`` is applied after ``proj`` (the paper drops out after every dense layer
    except the qkv projections); :class:`TransformerEncoderBlock` sets it to ``mlp_dropout``.
    """

    def __init__(
        self,
        embedding_dim: int = 768,
        num_heads: int = 12,
        attn_dropout: float = 0.0,
        layer_norm_eps: float = 1e-6,
        proj_dropout: float = 0.0,
    ):
        super().__init__()
        check_sizes(embedding_dim=embedding_dim, num_heads=num_heads)
        check_rates(attn_dropout=attn_dropout, proj_dropout=proj_dropout)
        check_positive(layer_norm_eps=layer_norm_eps)
        if embedding_dim % num_heads:
            raise ValueError(
                f"embedding_dim={embedding_dim} is not divisible by num_heads={num_heads}: each "
                "head gets embedding_dim // num_heads dimensions, so pick num_heads among the "
                f"divisors of {embedding_dim} (ViT-Base: 768 / 12 = 64 per head)."
            )
        self.num_heads = num_heads
        self.head_dim = embedding_dim // num_heads
        self.attn_dropout = attn_dropout
        self.layer_norm = nn.LayerNorm(embedding_dim, eps=layer_norm_eps)
        self.qkv = nn.Linear(embedding_dim, 3 * embedding_dim)
        self.proj = nn.Linear(embedding_dim, embedding_dim)
        self.proj_dropout = nn.Dropout(proj_dropout)

    def forward(
        self, x: torch.Tensor, need_weights: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """(B, N, D) -> (B, N, D); with ``need_weights`` also the (B, heads, N, N) attention.

        The returned weights are the softmax before attention dropout, so each row sums to one.
        """
        batch, tokens, dim = x.shape
        qkv = self.qkv(self.layer_norm(x))
        # (B, N, 3D) -> (3, B, heads, N, head_dim)
        qkv = qkv.reshape(batch, tokens, 3, self.num_heads, self.head_dim).permute(
            2, 0, 3, 1, 4
        )
        q, k, v = qkv.unbind(0)
        dropout_p = self.attn_dropout if self.training else 0.0
        if need_weights:
            weights = (q @ k.transpose(-2, -1) * self.head_dim**-0.5).softmax(dim=-1)
            out = F.dropout(weights, dropout_p, training=self.training) @ v
        else:
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
        out = self.proj_dropout(
            self.proj(out.transpose(1, 2).reshape(batch, tokens, dim))
        )
        return (out, weights) if need_weights else out


class MLPBlock(nn.Module):
    """Eq. 3's ``MLP(LN(z))`` (without the residual): LN, Linear, GELU, Dropout, Linear, Dropout."""

    def __init__(
        self,
        embedding_dim: int = 768,
        mlp_size: int = 3072,
        dropout: float = 0.1,
        layer_norm_eps: float = 1e-6,
    ):
        super().__init__()
        check_sizes(embedding_dim=embedding_dim, mlp_size=mlp_size)
        check_rates(dropout=dropout)
        check_positive(layer_norm_eps=layer_norm_eps)
        self.layer_norm = nn.LayerNorm(embedding_dim, eps=layer_norm_eps)
        self.mlp = nn.Sequential(
            nn.Linear(embedding_dim, mlp_size),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(mlp_size, embedding_dim),
            nn.Dropout(dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.layer_norm(x))


class TransformerEncoderBlock(nn.Module):
    """One pre-norm encoder layer: ``x = msa(x) + x`` (Eq. 2), then ``x = mlp(x) + x`` (Eq. 3).

    ``mlp_dropout`` is the paper's (and torchvision's) dropout after each dense layer: the
    MLP's two Linears and the attention's output projection. ``attn_dropout`` drops attention
    weights.
    """

    def __init__(
        self,
        embedding_dim: int = 768,
        num_heads: int = 12,
        mlp_size: int = 3072,
        mlp_dropout: float = 0.1,
        attn_dropout: float = 0.0,
        layer_norm_eps: float = 1e-6,
    ):
        super().__init__()
        self.msa_block = MultiheadSelfAttentionBlock(
            embedding_dim,
            num_heads,
            attn_dropout,
            layer_norm_eps,
            proj_dropout=mlp_dropout,
        )
        self.mlp_block = MLPBlock(embedding_dim, mlp_size, mlp_dropout, layer_norm_eps)

    def forward(
        self, x: torch.Tensor, need_weights: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """(B, N, D) -> (B, N, D); with ``need_weights`` also the (B, heads, N, N) attention."""
        if need_weights:
            attended, weights = self.msa_block(x, need_weights=True)
        else:
            attended = self.msa_block(x)
        x = attended + x
        x = self.mlp_block(x) + x
        return (x, weights) if need_weights else x


class ViT(nn.Module):
    """The Vision Transformer of Figure 1: patch + class + position embeddings, encoder, head.

    Initialisation, for training from scratch: the class and position embeddings and every
    Linear weight, head included (not zeros), ~ N(0, 0.02^2), as timm's ``trunc_normal_(std=.02)``
    whose +-2 bounds never bite; the patch projection ~ N(0, 1 / fan_in) (LeCun normal, as
    torchvision); biases zero; LayerNorms weight one, bias zero.
    """

    def __init__(
        self,
        img_size: int = 224,
        in_channels: int = 3,
        patch_size: int = 16,
        num_transformer_layers: int = 12,
        embedding_dim: int = 768,
        mlp_size: int = 3072,
        num_heads: int = 12,
        attn_dropout: float = 0.0,
        mlp_dropout: float = 0.1,
        embedding_dropout: float = 0.1,
        num_classes: int = 1000,
        layer_norm_eps: float = 1e-6,
    ):
        super().__init__()
        check_sizes(
            img_size=img_size,
            in_channels=in_channels,
            patch_size=patch_size,
            num_transformer_layers=num_transformer_layers,
            embedding_dim=embedding_dim,
            mlp_size=mlp_size,
            num_heads=num_heads,
            num_classes=num_classes,
        )
        check_rates(
            attn_dropout=attn_dropout,
            mlp_dropout=mlp_dropout,
            embedding_dropout=embedding_dropout,
        )
        check_positive(layer_norm_eps=layer_norm_eps)
        if img_size % patch_size:
            raise ValueError(
                f"Image size {img_size} is not divisible by patch size {patch_size}: choose an "
                f"img_size that is a multiple of {patch_size} "
                f"(e.g. {max(patch_size, img_size // patch_size * patch_size)})."
            )
        self.img_size = img_size
        self.patch_size = patch_size
        self.num_patches = (img_size // patch_size) ** 2
        self.patch_embedding = PatchEmbedding(in_channels, patch_size, embedding_dim)
        self.class_embedding = nn.Parameter(torch.empty(1, 1, embedding_dim))
        self.position_embedding = nn.Parameter(
            torch.empty(1, self.num_patches + 1, embedding_dim)
        )
        self.embedding_dropout = nn.Dropout(embedding_dropout)
        self.encoder = nn.Sequential(
            *(
                TransformerEncoderBlock(
                    embedding_dim,
                    num_heads,
                    mlp_size,
                    mlp_dropout,
                    attn_dropout,
                    layer_norm_eps,
                )
                for _ in range(num_transformer_layers)
            )
        )
        self.classifier = nn.Sequential(
            nn.LayerNorm(embedding_dim, eps=layer_norm_eps),
            nn.Linear(embedding_dim, num_classes),
        )
        self._init_weights()

    def _init_weights(self) -> None:
        nn.init.normal_(self.class_embedding, std=0.02)
        nn.init.normal_(self.position_embedding, std=0.02)
        patcher = self.patch_embedding.patcher
        fan_in = patcher.in_channels * patcher.kernel_size[0] * patcher.kernel_size[1]
        nn.init.normal_(patcher.weight, std=math.sqrt(1 / fan_in))
        nn.init.zeros_(patcher.bias)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=0.02)
                nn.init.zeros_(module.bias)

    def _embed(self, x: torch.Tensor) -> torch.Tensor:
        """Eq. 1: images (B, C, H, W) -> z_0 (B, N + 1, D)."""
        patches = self.patch_embedding(x)
        if patches.shape[1] != self.num_patches:
            raise ValueError(
                f"This ViT was built for {self.img_size}x{self.img_size} images "
                f"({self.num_patches} patches of {self.patch_size}x{self.patch_size}) but got "
                f"{x.shape[-2]}x{x.shape[-1]}: resize the images to {self.img_size}x"
                f"{self.img_size} or build the model with the img_size you need."
            )
        class_token = self.class_embedding.expand(x.shape[0], -1, -1)
        z = torch.cat([class_token, patches], dim=1) + self.position_embedding
        return self.embedding_dropout(z)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Images (B, C, H, W) -> encoder output z_L (B, N + 1, D), before the final LayerNorm."""
        return self.encoder(self._embed(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Images (B, C, H, W) -> logits (B, num_classes) from the class token (Eq. 4)."""
        return self.classifier(self.forward_features(x)[:, 0])

    @torch.no_grad()
    def get_attention_maps(self, x: torch.Tensor) -> list[torch.Tensor]:
        """One (B, heads, N + 1, N + 1) attention tensor per encoder layer, computed in eval mode.

        Row i of a map is how token i (0 = class token) attends to every token. The model's
        train/eval mode is restored afterwards.
        """
        was_training = self.training
        self.eval()
        try:
            z, maps = self._embed(x), []
            for block in self.encoder:
                z, weights = block(z, need_weights=True)
                maps.append(weights)
        finally:
            self.train(was_training)
        return maps


# Weight loading from torchvision and torch.nn ----------------------------------------------


def _copy(dst: torch.Tensor, src: torch.Tensor, name: str) -> None:
    if dst.shape != src.shape:
        raise ValueError(
            f"Shape mismatch for {name}: this model has {tuple(dst.shape)}, the source has "
            f"{tuple(src.shape)}. Build the model with the source's configuration."
        )
    with torch.no_grad():
        dst.copy_(src)


def _copy_module(dst: nn.Module, src: nn.Module, name: str) -> None:
    """Copy the weight and bias of a Linear, LayerNorm or Conv2d, checking LayerNorm eps."""
    if (
        isinstance(dst, nn.LayerNorm)
        and isinstance(src, nn.LayerNorm)
        and dst.eps != src.eps
    ):
        raise ValueError(
            f"LayerNorm eps mismatch for {name}: this model uses {dst.eps}, the source {src.eps}. "
            f"Build the model with layer_norm_eps={src.eps}."
        )
    _copy(dst.weight, src.weight, f"{name}.weight")
    _copy(dst.bias, src.bias, f"{name}.bias")


def load_multihead_attention(
    block: MultiheadSelfAttentionBlock,
    mha: nn.MultiheadAttention,
    norm: nn.LayerNorm | None = None,
) -> MultiheadSelfAttentionBlock:
    """Copy an ``nn.MultiheadAttention`` (and optionally the LayerNorm before it) into ``block``."""
    if mha.in_proj_weight is None or mha.in_proj_bias is None:
        raise ValueError(
            "Only nn.MultiheadAttention with a packed in_proj_weight and biases can be loaded: "
            "build it with kdim = vdim = embed_dim and bias=True."
        )
    if mha.num_heads != block.num_heads:
        raise ValueError(
            f"Head count mismatch: the block has {block.num_heads} heads, the source "
            f"{mha.num_heads}. Build the block with num_heads={mha.num_heads}."
        )
    _copy(block.qkv.weight, mha.in_proj_weight, "qkv.weight <- in_proj_weight")
    _copy(block.qkv.bias, mha.in_proj_bias, "qkv.bias <- in_proj_bias")
    _copy_module(block.proj, mha.out_proj, "proj <- out_proj")
    if norm is not None:
        _copy_module(block.layer_norm, norm, "layer_norm")
    return block


def _load_mlp(
    block: MLPBlock, norm: nn.LayerNorm, fc1: nn.Linear, fc2: nn.Linear
) -> None:
    _copy_module(block.layer_norm, norm, "mlp_block.layer_norm")
    _copy_module(block.mlp[0], fc1, "mlp_block.mlp.0")
    _copy_module(block.mlp[3], fc2, "mlp_block.mlp.3")


def load_encoder_layer(
    block: TransformerEncoderBlock, layer: nn.TransformerEncoderLayer
) -> TransformerEncoderBlock:
    """Copy a pre-norm GELU ``nn.TransformerEncoderLayer`` into ``block``.

    The source must be built with ``norm_first=True, activation="gelu"`` to compute the same
    function (``batch_first`` does not affect the weights).
    """
    if not layer.norm_first or layer.activation is not F.gelu:
        raise ValueError(
            "Only a pre-norm GELU nn.TransformerEncoderLayer matches a ViT encoder block: build "
            'it with norm_first=True, activation="gelu".'
        )
    load_multihead_attention(block.msa_block, layer.self_attn, layer.norm1)
    _load_mlp(block.mlp_block, layer.norm2, layer.linear1, layer.linear2)
    return block


def load_torchvision_weights(model: ViT, tv_model: VisionTransformer) -> ViT:
    """Copy a ``torchvision.models.VisionTransformer``'s weights into ``model`` (same config).

    In eval mode ``model(x)`` then equals ``tv_model(x)`` up to float32 rounding.
    """
    if tv_model.representation_size is not None:
        raise ValueError(
            "torchvision ViTs with a pre-logits layer (representation_size) differ."
        )
    tv_layers = list(tv_model.encoder.layers)
    if len(tv_layers) != len(model.encoder):
        raise ValueError(
            f"Layer count mismatch: this model has {len(model.encoder)} encoder layers, the "
            f"source {len(tv_layers)}. Build it with num_transformer_layers={len(tv_layers)}."
        )
    _copy(model.class_embedding, tv_model.class_token, "class_embedding <- class_token")
    _copy_module(
        model.patch_embedding.patcher, tv_model.conv_proj, "patcher <- conv_proj"
    )
    _copy(
        model.position_embedding,
        tv_model.encoder.pos_embedding,
        "position_embedding <- encoder.pos_embedding (check img_size and patch_size)",
    )
    for block, tv_layer in zip(model.encoder, tv_layers, strict=True):
        load_multihead_attention(
            block.msa_block, tv_layer.self_attention, tv_layer.ln_1
        )
        _load_mlp(block.mlp_block, tv_layer.ln_2, tv_layer.mlp[0], tv_layer.mlp[3])
    _copy_module(model.classifier[0], tv_model.encoder.ln, "classifier.0 <- encoder.ln")
    _copy_module(model.classifier[1], tv_model.heads.head, "classifier.1 <- heads.head")
    return model


# Registered factories ------------------------------------------------------------------------


def _build(
    config: dict[str, Any],
    num_classes: int,
    img_size: int,
    in_channels: int,
    overrides: dict[str, Any],
) -> ViT:
    return ViT(
        **{**config, **overrides},
        num_classes=num_classes,
        img_size=img_size,
        in_channels=in_channels,
    )


@register_model("vit_b_16")
def vit_b_16(
    num_classes: int = 1000, img_size: int = 224, in_channels: int = 3, **overrides: Any
) -> ViT:
    """Table 1's ViT-Base/16: 12 layers, D=768, MLP 3072, 12 heads (86.6M parameters at 1000)."""
    config = dict(
        patch_size=16,
        num_transformer_layers=12,
        embedding_dim=768,
        mlp_size=3072,
        num_heads=12,
    )
    return _build(config, num_classes, img_size, in_channels, overrides)


@register_model("vit_l_16")
def vit_l_16(
    num_classes: int = 1000, img_size: int = 224, in_channels: int = 3, **overrides: Any
) -> ViT:
    """Table 1's ViT-Large/16: 24 layers, D=1024, MLP 4096, 16 heads (304.3M parameters)."""
    config = dict(
        patch_size=16,
        num_transformer_layers=24,
        embedding_dim=1024,
        mlp_size=4096,
        num_heads=16,
    )
    return _build(config, num_classes, img_size, in_channels, overrides)


@register_model("vit_h_14")
def vit_h_14(
    num_classes: int = 1000, img_size: int = 224, in_channels: int = 3, **overrides: Any
) -> ViT:
    """Table 1's ViT-Huge/14: 32 layers, D=1280, MLP 5120, 16 heads (632.0M parameters at 224)."""
    config = dict(
        patch_size=14,
        num_transformer_layers=32,
        embedding_dim=1280,
        mlp_size=5120,
        num_heads=16,
    )
    return _build(config, num_classes, img_size, in_channels, overrides)


@register_model("vit_tiny")
def vit_tiny(
    num_classes: int = 1000, img_size: int = 224, in_channels: int = 3, **overrides: Any
) -> ViT:
    """A ViT small enough to train from scratch on a few hundred images on a CPU.

    Patch 16, D=192 and 3 heads of 64 (DeiT-Tiny's width), but 4 layers and an MLP of 384 (2x
    instead of 4x) for about 1.4M parameters; dropout 0.1 everywhere but in attention, since
    small data overfits. Other sizes via overrides, e.g. ``img_size=64, patch_size=8``.
    """
    config = dict(
        patch_size=16,
        num_transformer_layers=4,
        embedding_dim=192,
        mlp_size=384,
        num_heads=3,
    )
    return _build(config, num_classes, img_size, in_channels, overrides)


@register_model("vit_cifar_p2")
def vit_cifar_p2(
    num_classes: int = 10,
    img_size: int = 32,
    in_channels: int = 3,
    patch_size: int = 2,
    **overrides: Any,
) -> ViT:
    """The 2.7M-parameter CIFAR-10 ViT of jordandeklerk/vit's FLOP table (chapter 13).

    Patch 2 on 32x32 images (256 patches + 1 class token), D=192, 9 layers, 12 heads of 16,
    MLP ratio 2 (384), qkv bias, no dropout: 2,725,632 parameters without the head.
    ``patch_size`` changes only the tokenizer, e.g. ``patch_size=4`` for 64 patches.
    """
    config = dict(
        patch_size=patch_size,
        num_transformer_layers=9,
        embedding_dim=192,
        mlp_size=384,
        num_heads=12,
        mlp_dropout=0.0,
        embedding_dropout=0.0,
    )
    return _build(config, num_classes, img_size, in_channels, overrides)
