"""Weights saved under other names: key maps and the loaders that use them.

A state dict from elsewhere (torchvision's ViT, ``nn.TransformerEncoderLayer``, the CCT
authors' checkpoints) names the same tensors differently. Each map here is a list of
``(pattern, replacement)`` regular expressions; :func:`load_renamed` applies one and checks
that every tensor finds exactly one place of the same shape.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import nn
from torchvision.models import VisionTransformer

from going_modular.models.layers import Block
from going_modular.models.vit import ViT

__all__ = [
    "REFERENCE_KEYS",
    "TORCHVISION_KEYS",
    "TORCH_LAYER_KEYS",
    "KeyRules",
    "load_encoder_layer",
    "load_renamed",
    "load_torchvision_weights",
    "rename_keys",
]

KeyRules = Sequence[tuple[str, str]]
"""``(pattern, replacement)`` pairs for ``re.sub``, applied to a key one after the other."""

ModuleT = TypeVar("ModuleT", bound=nn.Module)


def rename_keys(
    state_dict: Mapping[str, torch.Tensor], rules: KeyRules
) -> dict[str, torch.Tensor]:
    """``state_dict`` with every key rewritten by each ``(pattern, replacement)`` rule in turn
    (``re.sub``); a key that no rule matches keeps its name."""
    renamed = {}
    for key, tensor in state_dict.items():
        new = key
        for pattern, replacement in rules:
            new = re.sub(pattern, replacement, new)
        if new in renamed:
            raise ValueError(f"Two source keys are renamed to {new!r}: fix the rules.")
        renamed[new] = tensor
    return renamed


def _check_layer_norm_eps(model: nn.Module, source: nn.Module, rules: KeyRules) -> None:
    for name, module in source.named_modules():
        if not isinstance(module, nn.LayerNorm) or module.weight is None:
            continue
        ours = model.get_submodule(
            next(iter(rename_keys({f"{name}.weight": module.weight}, rules)))[
                : -len(".weight")
            ]
        )
        if isinstance(ours, nn.LayerNorm) and ours.eps != module.eps:
            raise ValueError(
                f"LayerNorm eps mismatch for {name}: this model uses {ours.eps}, the source "
                f"{module.eps}. Build the model with layer_norm_eps={module.eps} (a Block: "
                f"norm_layer=functools.partial(nn.LayerNorm, eps={module.eps}))."
            )


def load_renamed(
    model: ModuleT, source: nn.Module | Mapping[str, torch.Tensor], rules: KeyRules
) -> ModuleT:
    """Copy the weights of ``source`` (a module or a state dict) into ``model``, their keys
    renamed by ``rules`` (:func:`rename_keys`), and return ``model``.

    Every tensor of ``model``'s state dict must receive exactly one of the source's and every
    source tensor must be used, with the same shape; a source module's LayerNorms must have
    the same eps as ``model``'s. Otherwise ValueError names the first key that does not fit.
    """
    state = source.state_dict() if isinstance(source, nn.Module) else source
    renamed = rename_keys(state, rules)
    old_name = dict(zip(renamed, state, strict=True))
    ours = model.state_dict()
    unused = [old_name[key] for key in renamed if key not in ours]
    if unused:
        raise ValueError(
            f"{len(unused)} source tensors have no place in this model, e.g. {unused[0]!r} "
            f"(renamed {next(k for k in renamed if k not in ours)!r}): build the model with "
            "the source's configuration or extend the rules."
        )
    missing = [key for key in ours if key not in renamed]
    if missing:
        raise ValueError(
            f"{len(missing)} tensors of this model get no source tensor, e.g. {missing[0]!r}: "
            "build the model with the source's configuration or extend the rules."
        )
    for key, tensor in renamed.items():
        if ours[key].shape != tensor.shape:
            raise ValueError(
                f"Shape mismatch for {key} <- {old_name[key]}: this model has "
                f"{tuple(ours[key].shape)}, the source has {tuple(tensor.shape)}. Build the "
                "model with the source's configuration."
            )
    if isinstance(source, nn.Module):
        _check_layer_norm_eps(model, source, rules)
    model.load_state_dict(renamed)
    return model


TORCHVISION_KEYS = [  # torchvision.models.VisionTransformer -> ViT
    (r"^class_token$", "cls_token"),
    (r"^conv_proj\.", "patch_embed.proj."),
    (r"^encoder\.pos_embedding$", "pos_embed"),
    (r"^encoder\.layers\.encoder_layer_(\d+)\.", r"blocks.\1."),
    (r"\.ln_1\.", ".norm1."),
    (r"\.self_attention\.in_proj_", ".attn.qkv."),
    (r"\.self_attention\.out_proj\.", ".attn.proj."),
    (r"\.ln_2\.", ".norm2."),
    (r"\.mlp\.0\.", ".mlp.fc1."),
    (r"\.mlp\.3\.", ".mlp.fc2."),
    (r"^encoder\.ln\.", "norm."),
    (r"^heads\.head\.", "head."),
]

TORCH_LAYER_KEYS = [  # nn.TransformerEncoderLayer -> Block (norm1, norm2 keep their names)
    (r"(^|\.)self_attn\.in_proj_", r"\1attn.qkv."),
    (r"(^|\.)self_attn\.out_proj\.", r"\1attn.proj."),
    (r"(^|\.)linear1\.", r"\1mlp.fc1."),
    (r"(^|\.)linear2\.", r"\1mlp.fc2."),
]
r"""Also inside a model: with ``(r"^encoder\.layers\.", "blocks.")`` first, an
``nn.TransformerEncoder``'s keys."""


def _check_heads(block: Block, source_heads: int) -> None:
    if block.attn.heads != source_heads:
        raise ValueError(
            f"Head count mismatch: this model has {block.attn.heads} heads, the source "
            f"{source_heads}. Build it with heads={source_heads}."
        )


def load_encoder_layer(block: Block, layer: nn.TransformerEncoderLayer) -> Block:
    """Copy a pre-norm GELU ``nn.TransformerEncoderLayer`` into ``block`` (by
    :data:`TORCH_LAYER_KEYS`); it must be built with ``norm_first=True, activation="gelu"`` to
    compute the same function (``batch_first`` does not affect the weights)."""
    if not layer.norm_first or layer.activation is not F.gelu:
        raise ValueError(
            "Only a pre-norm GELU nn.TransformerEncoderLayer matches a ViT block: build it "
            'with norm_first=True, activation="gelu".'
        )
    _check_heads(block, layer.self_attn.num_heads)
    return load_renamed(block, layer, TORCH_LAYER_KEYS)


def load_torchvision_weights(model: ViT, tv_model: VisionTransformer) -> ViT:
    """Copy a ``torchvision.models.VisionTransformer``'s weights into ``model`` (same
    configuration, by :data:`TORCHVISION_KEYS`); in eval mode ``model(x)`` then equals
    ``tv_model(x)`` up to float32 rounding."""
    if tv_model.representation_size is not None:
        raise ValueError(
            "torchvision ViTs with a pre-logits layer (representation_size) differ."
        )
    tv_layers = list(tv_model.encoder.layers)
    if len(tv_layers) != len(model.blocks):
        raise ValueError(
            f"Layer count mismatch: this model has {len(model.blocks)} blocks, the source "
            f"{len(tv_layers)}. Build it with depth={len(tv_layers)}."
        )
    _check_heads(model.blocks[0], tv_layers[0].self_attention.num_heads)
    if model.pos_embed.shape != tv_model.encoder.pos_embedding.shape:
        raise ValueError(
            f"Shape mismatch for pos_embed <- encoder.pos_embedding: this model has "
            f"{tuple(model.pos_embed.shape)}, the source "
            f"{tuple(tv_model.encoder.pos_embedding.shape)}: build the model with the "
            f"source's img_size ({tv_model.image_size}) and patch_size ({tv_model.patch_size})."
        )
    return load_renamed(model, tv_model, TORCHVISION_KEYS)


# The authors' checkpoints (their keys -> ours) --------------------------------------------------

REFERENCE_KEYS = [
    (r"^classifier\.class_emb$", "cls_token"),
    (r"^classifier\.positional_emb$", "pos_embed"),
    (r"^classifier\.attention_pool\.", "seq_pool."),
    (
        r"^classifier\.blocks\.(\d+)\.norm1\.",
        r"blocks.\1.norm2.",
    ),  # before pre_norm -> norm1
    (r"^classifier\.blocks\.(\d+)\.pre_norm\.", r"blocks.\1.norm1."),
    (r"^classifier\.blocks\.(\d+)\.self_attn\.", r"blocks.\1.attn."),
    (r"^classifier\.blocks\.(\d+)\.linear([12])\.", r"blocks.\1.mlp.fc\2."),
    (r"^classifier\.norm\.", "norm."),
    (r"^classifier\.fc\.", "head."),
]
"""SHI-Labs/Compact-Transformers' ``state_dict`` keys -> ours (``tokenizer.*`` are the same):
``load_renamed(model, torch.load(path), REFERENCE_KEYS)``."""
