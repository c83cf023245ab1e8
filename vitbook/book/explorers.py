"""Interactive explorers that work on the rendered page, offline, and in any kernel.

One technique for the whole book: Python computes the data with the package (sizes, the
schedule's settings, position similarities, attention maps), and each function returns an
:class:`Explorer` whose HTML carries that data as JSON and the book's small script
(``explorers.js``, no library, no network). The same output is interactive in the static
book, in Jupyter and on Colab; in a kernel the functions run on the reader's own image,
model or settings.
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import json
import math
from collections.abc import Mapping, Sequence
from functools import cache
from importlib.resources import files
from typing import Any, NamedTuple

import torch
from PIL import Image
from torch import nn

from going_modular.models.cct import CompactTransformer
from going_modular.models.cct_variants import CCT, CVT
from going_modular.models.layers import collect_attention
from going_modular.models.registry import build_model
from going_modular.models.vit import HybridEmbedding, ViT
from vitbook.book.attention_maps import (
    attention_rollout,
    position_embedding_similarity,
)

__all__ = [
    "PAPER_PRESETS",
    "AttentionData",
    "Explorer",
    "attention_data",
    "attention_explorer",
    "explorer_page",
    "model_config",
    "patch_explorer",
    "schedule_explorer",
    "size_calculator",
    "unit_range",
]

# The ViT paper's Table 1 and the CCT paper's models: calculator preset -> registered name.
PAPER_PRESETS = {
    "ViT-B/16": "vit_b_16",
    "ViT-L/16": "vit_l_16",
    "ViT-H/14": "vit_h_14",
    "CCT-7/3x1": "cct_7_3x1",
    "CCT-14/7x2": "cct_14_7x2",
    "ViT-Lite-7/4": "vit_lite_7_4",
    "CVT-7/4": "cvt_7_4",
}


@cache
def _asset(name: str) -> str:
    return files("vitbook.book").joinpath(name).read_text(encoding="utf-8")


class Explorer:
    """An explorer's data and its self-contained HTML (``_repr_html_``, for notebooks)."""

    def __init__(self, kind: str, data: dict[str, Any]):
        self.kind, self.data = kind, {"kind": kind, **data}

    @property
    def html(self) -> str:
        """``<style>``, an empty ``<div>`` and a ``<script>`` that draws into it."""
        payload = json.dumps(self.data, separators=(",", ":"))
        uid = "vx-" + hashlib.sha1(payload.encode()).hexdigest()[:12]
        payload = payload.replace(
            "</", "<\\/"
        )  # a "</script>" in data must not end the tag
        return (
            f"<style>{_asset('explorers.css')}</style>"
            f'<div class="vx" id="{uid}"></div>'
            f"<script>{_asset('explorers.js')}\n"
            f"VitExplorers.mount(document.getElementById('{uid}'), {payload});</script>"
        )

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return f"<{self.kind} explorer: run in a notebook to see it>"


def _b64(values: torch.Tensor) -> str:
    """Values in [0, 1] -> base64 of their uint8 quantisation (0..255)."""
    quantised = (values.clamp(0, 1) * 255).round().to(torch.uint8)
    return base64.b64encode(quantised.cpu().numpy().tobytes()).decode("ascii")


def _png(image: torch.Tensor | Image.Image, side: int) -> str:
    """A (C, H, W) tensor in [0, 1] or a PIL image -> a square PNG data URI, ``side`` pixels
    wide or the image's own width if smaller (the page scales it up)."""
    if isinstance(image, torch.Tensor):
        if image.ndim != 3 or image.shape[0] not in (1, 3):
            raise ValueError(
                f"Expected a (C, H, W) image tensor, got shape {tuple(image.shape)}."
            )
        # (C, H, W) in [0, 1] -> (H, W, C) bytes
        array = (image.detach().float().clamp(0, 1) * 255).round().byte()
        image = Image.fromarray(array.permute(1, 2, 0).squeeze(-1).cpu().numpy())
    buffer = io.BytesIO()
    side = min(side, image.size[0])
    image.convert("RGB").resize((side, side), Image.BILINEAR).save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


# Size calculator ------------------------------------------------------------------------------


def model_config(model: nn.Module | str) -> dict[str, Any]:
    """The calculator's description of a ViT, ViT-Lite, CVT or CCT (or a registered name)."""
    if isinstance(model, str):
        with torch.device("meta"):  # sizes only: no memory, no initialisation
            model = build_model(model)
    block = model.blocks[0]
    dim = block.attn.proj.out_features
    config = {
        "dim": dim,
        "depth": len(model.blocks),
        "heads": block.attn.heads,
        "mlp_ratio": block.mlp.fc1.out_features / dim,
        "classes": model.head.out_features,
    }
    if isinstance(model, ViT):
        if isinstance(model.patch_embed, HybridEmbedding):
            raise TypeError(
                "No calculator for a hybrid ViT (a CNN stem under its patches)."
            )
        proj = model.patch_embed.proj
        return {
            "kind": "vit",
            "img": model.img_size,
            "channels": proj.in_channels,
            "patch": model.patch_size,
            **config,
        }
    if (
        not isinstance(model, CompactTransformer)
        or model.img_size[0] != model.img_size[1]
    ):
        raise TypeError(
            f"No calculator for {type(model).__name__} (square images only)."
        )
    convs = [m for m in model.tokenizer.modules() if isinstance(m, nn.Conv2d)]
    first = convs[0]
    config |= {"img": model.img_size[0], "channels": model.in_channels}
    if not isinstance(model, CCT):
        kind = "cvt" if isinstance(model, CVT) else "vit_lite"
        return {"kind": kind, "patch": first.kernel_size[0], **config}
    return {
        "kind": "cct",
        "conv_layers": len(convs),
        "kernel": first.kernel_size[0],
        "stride": first.stride[0],
        "padding": first.padding[0],
        "in_planes": first.out_channels if len(convs) > 1 else 64,
        **config,
    }


def size_calculator(
    presets: Mapping[str, nn.Module | str | dict] | None = None,
) -> Explorer:
    """Image size, patch size (or the CCT's convolutions), dim, depth, heads and MLP ratio ->
    tokens, parameters, multiply-adds and training activations per image.

    ``presets`` maps a label to a model, a registered name or a :func:`model_config` dict
    (default: :data:`PAPER_PRESETS`). The script's counts equal
    ``vitbook.models.complexity.count_params`` and ``count_macs`` (tested).
    """
    presets = PAPER_PRESETS if presets is None else presets
    configs = {
        label: dict(spec) if isinstance(spec, Mapping) else model_config(spec)
        for label, spec in presets.items()
    }
    return Explorer("size", {"presets": configs})


# Learning-rate schedule -----------------------------------------------------------------------


def schedule_explorer(
    warmup_steps: int = 500,
    total_steps: int = 5000,
    peak_lr: float = 1e-3,
    final_lr: float = 0.0,
    label_smoothing: float = 0.1,
    num_classes: int = 10,
) -> Explorer:
    """Sliders for :func:`vitbook.training.optim.warmup_cosine_schedule` (its factor,
    ported to the script and tested against it) and for the label-smoothed targets."""
    if not 0 <= warmup_steps <= total_steps or not 0 <= final_lr <= peak_lr:
        raise ValueError(
            "Need 0 <= warmup_steps <= total_steps and 0 <= final_lr <= peak_lr."
        )
    initial = {
        "warmup": warmup_steps,
        "total": total_steps,
        "peak": peak_lr,
        "final": final_lr,
        "smoothing": label_smoothing,
    }
    return Explorer(
        "schedule",
        {"initial": initial, "classes": num_classes, "max_steps": 2 * total_steps},
    )


# Patches and position embeddings --------------------------------------------------------------


def _square(image: torch.Tensor | Image.Image) -> torch.Tensor | Image.Image:
    """The largest centred square of a (C, H, W) tensor or a PIL image."""
    if isinstance(image, torch.Tensor):
        height, width = image.shape[-2:]
        side = min(height, width)
        top, left = (height - side) // 2, (width - side) // 2
        return image[..., top : top + side, left : left + side]
    width, height = image.size
    side = min(height, width)
    left, top = (width - side) // 2, (height - side) // 2
    return image.crop((left, top, left + side, top + side))


def _position_similarity(table: torch.Tensor) -> torch.Tensor:
    """(1, N [+1], D) or (N, D) position embeddings -> (N, N) cosine similarities in [0, 1]."""
    table = table.detach().float().reshape(-1, table.shape[-1])[None]
    if (
        math.isqrt(table.shape[1]) ** 2 == table.shape[1]
    ):  # no class token: add a stand-in
        table = torch.cat([table[:, :1], table], dim=1)
    similarity = position_embedding_similarity(table)  # (g, g, g, g)
    grid = similarity.shape[0]
    return (similarity.reshape(grid * grid, grid * grid) + 1) / 2


def patch_explorer(
    image: torch.Tensor | Image.Image,
    patch_sizes: Sequence[int] = (4, 8, 16, 32),
    position_embeddings: Mapping[str, torch.Tensor] | None = None,
    display_size: int = 224,
) -> Explorer:
    """A patch-size slider over ``image`` (a (C, H, W) tensor in [0, 1] or a PIL image, its
    centred square kept) showing the grid, N = HW/P^2 and the sequence; and, for each of
    ``position_embeddings`` ({"learned": model.pos_embed, "sinusoidal": ...}, all of one
    grid), the cosine similarity of a clicked position's embedding to all the others."""
    image = _square(image)
    side = image.shape[-1] if isinstance(image, torch.Tensor) else image.size[0]
    if bad := [p for p in patch_sizes if p < 1 or side % p]:
        raise ValueError(f"Patch sizes {bad} do not divide the image's side {side}.")
    similarities = {
        name: _position_similarity(table)
        for name, table in (position_embeddings or {}).items()
    }
    if len({s.shape for s in similarities.values()}) > 1:
        raise ValueError("The position embeddings must all have the same grid.")
    grid = math.isqrt(next(iter(similarities.values())).shape[0]) if similarities else 1
    if not similarities:  # nothing to compare: one position, similar to itself
        similarities = {"none": torch.ones(1, 1)}
    return Explorer(
        "patch",
        {
            "image": _png(image, display_size),
            "size": side,
            "patch_sizes": list(patch_sizes),
            "grid": grid,
            "similarity": {name: _b64(s) for name, s in similarities.items()},
        },
    )


# Attention ------------------------------------------------------------------------------------


def _query_tokens(grid: int, has_class_token: bool, keep: int) -> list[int]:
    """At most about ``keep`` query tokens: the class token (-1) and a regular subgrid."""
    stride = max(1, math.ceil(grid / math.isqrt(max(1, keep))))
    start = (grid - 1) % stride // 2  # centre the subgrid
    patches = [
        r * grid + c
        for r in range(start, grid, stride)
        for c in range(start, grid, stride)
    ]
    return ([-1] if has_class_token else []) + patches


@torch.no_grad()
def _forward(model: nn.Module, images: torch.Tensor) -> tuple[torch.Tensor, Any]:
    """Logits and, for a SeqPool model, its (B, N) pooling weights, in eval mode."""
    was_training = model.training
    model.eval()
    try:
        if getattr(model, "seq_pool", None) is not None:
            return model(images, return_pool_weights=True)
        return model(images), None
    finally:
        model.train(was_training)


def _rows(weights: torch.Tensor, queries: list[int], offset: int) -> torch.Tensor:
    """(..., T, T) attention -> (..., Q, N): the query tokens' rows over the patch keys,
    each row scaled to a maximum of one."""
    rows = weights[..., [q + offset for q in queries], offset:]
    return rows / rows.amax(dim=-1, keepdim=True).clamp_min(1e-12)


class AttentionData(NamedTuple):
    """A model's attention on a few images, as both the explorer and the live widget use it."""

    maps: torch.Tensor  # (L, B, heads, T, T): every layer's attention
    rollout: torch.Tensor  # (B, T, T)
    pool: torch.Tensor | None  # (B, N): SeqPool's weights, for a CVT or CCT
    predicted: list[int]  # the predicted class of each image
    grid: int  # the patches form a grid x grid square
    offset: int  # 1 with a class token in front of the patches, else 0


def attention_data(model: nn.Module, images: torch.Tensor) -> AttentionData:
    """Run ``model`` once (eval mode, no gradients) on ``images`` (B, C, H, W, moved to the
    model's device) and collect its attention, rollout, SeqPool weights and predictions."""
    images = images.to(next(model.parameters()).device)
    maps = torch.stack(collect_attention(model, images)).float()  # (L, B, heads, T, T)
    logits, pool = _forward(model, images)
    tokens = maps.shape[-1]
    grid = math.isqrt(tokens)
    offset = 0 if grid * grid == tokens else 1  # 1 = a class token in front
    grid = math.isqrt(tokens - offset)
    if grid * grid != tokens - offset:
        raise ValueError(f"{tokens} tokens are not a square grid (plus a class token).")
    rollout = attention_rollout(list(maps))
    return AttentionData(
        maps, rollout, pool, logits.argmax(dim=-1).tolist(), grid, offset
    )


def unit_range(images: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) images rescaled to [0, 1] one by one, for display."""
    low = images.amin(dim=(1, 2, 3), keepdim=True)
    high = images.amax(dim=(1, 2, 3), keepdim=True)
    return (images - low) / (high - low).clamp_min(1e-12)


def attention_explorer(
    model: nn.Module,
    images: torch.Tensor,
    class_names: Sequence[str] | None = None,
    display_images: torch.Tensor | None = None,
    max_bytes: int = 250_000,
) -> Explorer:
    """Every layer's and head's attention (and the rollout, and SeqPool's weights for CVT and
    CCT) of ``model`` on a few ``images`` (B, C, H, W, as the model takes them; moved to the
    model's device).

    Pick an image, a layer, a head or their mean, raw attention or rollout; click a patch to
    see where it attends. Attention rows are stored for the class token and the patches of a
    regular subgrid (a click picks the nearest), each quantised to a byte: about
    ``max_bytes`` per image. ``display_images`` (B, C, H, W) in [0, 1] are shown under the
    maps (default: ``images`` rescaled to [0, 1] one by one); ``class_names`` names the
    predicted classes.
    """
    maps, rollout, pool, predicted, grid, offset = attention_data(model, images)
    per_query = maps.shape[0] * maps.shape[2] * grid * grid  # bytes of one query's rows
    queries = _query_tokens(grid, offset == 1, max_bytes // per_query)
    raw = _rows(maps, queries, offset).transpose(0, 1)  # (B, L, heads, Q, N)
    rollout = _rows(rollout, queries, offset)  # (B, Q, N)
    if display_images is None:
        display_images = unit_range(images)
    entries = []
    for i, image in enumerate(display_images):
        entry = {
            "src": _png(image, 224),
            "raw": _b64(raw[i]),
            "rollout": _b64(rollout[i]),
        }
        entry["pool"] = None if pool is None else _b64(pool[i] / pool[i].max())
        name = class_names[predicted[i]] if class_names else str(predicted[i])
        entry["label"] = f"image {i + 1} (predicted: {name})"
        entries.append(entry)
    return Explorer(
        "attention",
        {
            "grid": grid,
            "layers": maps.shape[0],
            "heads": maps.shape[2],
            "queries": queries,
            "images": entries,
        },
    )


def explorer_page(*explorers: Explorer, title: str = "explorers") -> str:
    """A whole offline HTML page holding ``explorers`` (for the browser test and sharing)."""
    body = "\n".join(e.html for e in explorers)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width'><title>{html.escape(title)}"
        f"</title></head><body>{body}</body></html>"
    )
