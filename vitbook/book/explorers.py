"""The book's four explorers, each defined once, and their offline front end.

Python computes what each explorer shows with the package: the calculator's model
configurations and counts, the schedule's settings, sliders and curve, an image's patches
and position similarities, a model's attention rows. Two thin front ends draw it:
:class:`Explorer` carries the data as JSON with the book's small script (``explorers.js``,
no library, no network), interactive on the rendered page offline, in Jupyter and on Colab;
:mod:`vitbook.book.widgets` redraws the same computations live with ipywidgets.
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

import numpy as np
import torch
from PIL import Image
from torch import nn

from going_modular.models.cct import CompactTransformer, ViTLite
from going_modular.models.cct_variants import CCT, CVT
from going_modular.models.layers import collect_attention, sinusoidal_embedding
from going_modular.models.registry import build_model
from going_modular.models.vit import HybridEmbedding, ViT
from vitbook.book.attention_maps import attention_rollout
from vitbook.models.complexity import count_macs, count_params
from vitbook.training.optim import warmup_cosine_schedule

__all__ = [
    "PAPER_PRESETS",
    "SIZE_FIELDS",
    "AttentionData",
    "Explorer",
    "POSITION_KINDS",
    "PatchData",
    "attention_data",
    "attention_explorer",
    "explorer_page",
    "model_config",
    "model_size",
    "patch_data",
    "patch_explorer",
    "position_similarity",
    "position_table",
    "preset_configs",
    "schedule_controls",
    "schedule_curve",
    "schedule_explorer",
    "schedule_settings",
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

# The calculator's editable fields: configuration key -> label.
SIZE_FIELDS = {
    "img": "image size",
    "patch": "patch size",
    "dim": "dim",
    "depth": "depth",
    "heads": "heads",
    "mlp_ratio": "MLP ratio",
    "conv_layers": "conv layers",
    "kernel": "kernel",
}

# JSON inside a <script>: no "</script>", "<!--" or "&" may reach the HTML parser.
_HTML_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


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
        payload = json.dumps(self.data, separators=(",", ":")).translate(_HTML_SAFE)
        uid = "vx-" + hashlib.sha1(payload.encode()).hexdigest()[:12]
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


def _as_tensor(image: torch.Tensor | Image.Image) -> torch.Tensor:
    """A (C, H, W) tensor in [0, 1] (C = 1 or 3) or a PIL image (as RGB) -> a (C, H, W)
    float tensor on the CPU."""
    if isinstance(image, Image.Image):
        pixels = np.array(image.convert("RGB"))  # (H, W, 3) bytes
        return torch.from_numpy(pixels).permute(2, 0, 1).float() / 255
    if image.ndim != 3 or image.shape[0] not in (1, 3):
        raise ValueError(
            f"Expected a (C, H, W) image tensor, got shape {tuple(image.shape)}."
        )
    low, high = image.min().item(), image.max().item()
    if low < 0 or high > 1:
        raise ValueError(
            f"Expected an image with values in [0, 1], got values from {low:g} to "
            f"{high:g}: divide a 0..255 image by 255 (or pass a PIL image)."
        )
    return image.detach().float().cpu()


def _data_uri(image: torch.Tensor, side: int, kind: str = "PNG") -> str:
    """A (C, H, W) tensor in [0, 1] -> a square PNG (or ``kind="JPEG"``, for a photograph)
    data URI, ``side`` pixels wide or the image's own width if smaller (the page scales it
    up)."""
    array = (image.clamp(0, 1) * 255).round().byte()  # (C, H, W) -> (H, W, C) bytes
    picture = Image.fromarray(array.permute(1, 2, 0).squeeze(-1).numpy())
    buffer = io.BytesIO()
    side = min(side, picture.size[0])
    picture = picture.convert("RGB").resize((side, side), Image.BILINEAR)
    picture.save(buffer, kind, **({"quality": 85} if kind == "JPEG" else {}))
    return (
        f"data:image/{kind.lower()};base64,"
        + base64.b64encode(buffer.getvalue()).decode()
    )


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


def preset_configs(
    presets: Mapping[str, nn.Module | str | dict] | None = None,
) -> dict[str, dict[str, Any]]:
    """Label -> :func:`model_config` of each of ``presets`` (a model, a registered name or a
    configuration; default: :data:`PAPER_PRESETS`)."""
    presets = PAPER_PRESETS if presets is None else presets
    return {
        label: dict(spec) if isinstance(spec, Mapping) else model_config(spec)
        for label, spec in presets.items()
    }


def model_size(config: Mapping[str, Any]) -> dict[str, int]:
    """Encoder tokens, ``count_params`` and ``count_macs`` (by kind, one image) of the model
    a :func:`model_config` configuration describes, built on the meta device (a ``stride``
    or ``padding`` of None: the CCT's default). The script computes the same (tested)."""
    common = dict(
        img_size=config["img"],
        in_channels=config["channels"],
        num_classes=config["classes"],
        dim=config["dim"],
        depth=config["depth"],
        heads=config["heads"],
        mlp_ratio=config["mlp_ratio"],
    )
    kinds = {"vit": ViT, "vit_lite": ViTLite, "cvt": CVT}
    with torch.device("meta"):  # sizes only: no memory, no initialisation
        if config["kind"] in kinds:
            model = kinds[config["kind"]](patch_size=config["patch"], **common)
        else:
            model = CCT(
                n_conv_layers=config["conv_layers"],
                kernel_size=config["kernel"],
                stride=config.get("stride"),
                padding=config.get("padding"),
                **common,
            )
    patches = model.num_patches if isinstance(model, ViT) else model.num_tokens
    macs = count_macs(model, (1, config["channels"], config["img"], config["img"]))
    return {
        "tokens": patches + (model.cls_token is not None),
        "params": count_params(model),
        **{f"macs_{kind}": n for kind, n in macs.items()},
    }


def size_calculator(
    presets: Mapping[str, nn.Module | str | dict] | None = None,
) -> Explorer:
    """Image size, patch size (or the CCT's convolutions), dim, depth, heads and MLP ratio ->
    tokens, parameters, multiply-adds and training activations per image.

    ``presets`` as for :func:`preset_configs`. The script's counts equal
    :func:`model_size`'s (tested).
    """
    return Explorer("size", {"presets": preset_configs(presets), "fields": SIZE_FIELDS})


# Learning-rate schedule -----------------------------------------------------------------------


def schedule_settings(
    warmup_steps: int = 500,
    total_steps: int = 5000,
    peak_lr: float = 1e-3,
    final_lr: float = 0.0,
    label_smoothing: float = 0.1,
) -> dict[str, float]:
    """The schedule explorer's starting values, checked, by control name."""
    if not 0 <= warmup_steps <= total_steps or not 0 <= final_lr <= peak_lr:
        raise ValueError(
            "Need 0 <= warmup_steps <= total_steps and 0 <= final_lr <= peak_lr."
        )
    return {
        "warmup": warmup_steps,
        "total": total_steps,
        "peak": peak_lr,
        "final": final_lr,
        "smoothing": label_smoothing,
    }


def schedule_controls(settings: Mapping[str, float]) -> list[tuple]:
    """The schedule explorer's sliders: (name, label, minimum, maximum, step); integer steps
    make integer sliders."""
    steps, peak = 2 * settings["total"], settings["peak"]
    return [
        ("warmup", "warmup steps", 0, steps, 1),
        ("total", "total steps", 1, steps, 1),
        ("peak", "peak LR", peak / 10, peak * 3, peak / 10),
        ("final", "final LR", 0, peak, peak / 100),
        ("smoothing", "label smoothing", 0, 0.5, 0.01),
    ]


def schedule_curve(
    settings: Mapping[str, float], num_classes: int
) -> tuple[list[float], list[float]]:
    """The learning rate at every step by :func:`~vitbook.training.optim.warmup_cosine_schedule`
    (which refuses settings it cannot run), and the label-smoothed target of an image of
    class 0. The script computes the same (tested)."""
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    min_factor = settings["final"] / settings["peak"]
    schedule = warmup_cosine_schedule(
        optimizer, settings["warmup"], settings["total"], min_factor
    )
    factor = schedule.lr_lambdas[0]  # step -> fraction of the peak
    lr = [settings["peak"] * factor(step) for step in range(settings["total"])]
    eps = settings["smoothing"]
    targets = [eps / num_classes + (1 - eps) * (k == 0) for k in range(num_classes)]
    return lr, targets


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
    initial = schedule_settings(
        warmup_steps, total_steps, peak_lr, final_lr, label_smoothing
    )
    controls = schedule_controls(initial)
    return Explorer(
        "schedule", {"initial": initial, "classes": num_classes, "controls": controls}
    )


# Patches and position embeddings --------------------------------------------------------------


def _square(image: torch.Tensor) -> torch.Tensor:
    """The largest centred square of a (C, H, W) tensor."""
    height, width = image.shape[-2:]
    side = min(height, width)
    top, left = (height - side) // 2, (width - side) // 2
    return image[..., top : top + side, left : left + side]


#: The position embeddings the patch explorers compare, at every patch size: name -> kind.
POSITION_KINDS = {"learned (at initialisation)": "random", "sinusoidal": "sinusoidal"}


def position_table(kind: str, positions: int, dim: int, seed: int = 0) -> torch.Tensor:
    """(positions, dim) position embeddings of one of :data:`POSITION_KINDS`' kinds:
    ``"sinusoidal"`` is the package's ``sinusoidal_embedding``; ``"random"`` a learned table
    at its initialisation, normal draws with std 0.02 from a generator seeded with ``seed``
    (the page draws its own, with the same statistics)."""
    if kind == "sinusoidal":
        return sinusoidal_embedding(positions, dim)[0]
    if kind == "random":
        generator = torch.Generator().manual_seed(seed)
        return 0.02 * torch.randn(positions, dim, generator=generator)
    raise ValueError(
        f"Unknown kind {kind!r}: use one of {sorted(set(POSITION_KINDS.values()))}."
    )


def position_similarity(table: torch.Tensor, position: int) -> torch.Tensor:
    """The cosine similarity of row ``position`` of a (N, D) ``table`` to every row: (N,)."""
    return torch.nn.functional.cosine_similarity(table[position][None], table, dim=-1)


class PatchData(NamedTuple):
    """An image and its patch sizes, as the patch explorers show them."""

    image: torch.Tensor  # (C, side, side) in [0, 1]: the image's centred square
    patch_sizes: list[int]  # each divides the side
    dim: int  # the width of the position embeddings compared


def patch_data(
    image: torch.Tensor | Image.Image,
    patch_sizes: Sequence[int] = (4, 8, 16, 32),
    dim: int = 768,
) -> PatchData:
    """``image``'s centred square (a (C, H, W) tensor in [0, 1] or a PIL image), and the
    patch sizes checked against its side; ``dim`` is the width of the position embeddings
    whose similarities the explorers show, at the grid of every patch size."""
    image = _square(_as_tensor(image))
    side = image.shape[-1]
    if bad := [p for p in patch_sizes if p < 1 or side % p]:
        raise ValueError(f"Patch sizes {bad} do not divide the image's side {side}.")
    if dim < 1:
        raise ValueError(f"dim must be positive; got {dim}.")
    return PatchData(image, list(patch_sizes), dim)


def patch_explorer(
    image: torch.Tensor | Image.Image,
    patch_sizes: Sequence[int] = (4, 8, 16, 32),
    dim: int = 768,
    display_size: int = 224,
) -> Explorer:
    """A patch-size slider over ``image`` showing the grid, N = HW/P^2 and the sequence; and,
    on the grid of the patch size chosen, the cosine similarity of a clicked position's
    embedding to all the others, for each of :data:`POSITION_KINDS` (``dim`` wide). The page
    computes the tables itself (:func:`position_table`'s formulas), so nothing grows with
    the grid. Arguments as for :func:`patch_data`."""
    data = patch_data(image, patch_sizes, dim)
    return Explorer(
        "patch",
        {
            "image": _data_uri(data.image, display_size, "JPEG"),
            "size": data.image.shape[-1],
            "patch_sizes": data.patch_sizes,
            "dim": data.dim,
            "seed": 0,
            "kinds": POSITION_KINDS,
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
            return model(images), model.pool_weights(images)
        return model(images), None
    finally:
        model.train(was_training)


def _scaled(rows: torch.Tensor) -> torch.Tensor:
    """Each row scaled to a maximum of one (to quantise it to bytes)."""
    return rows / rows.amax(dim=-1, keepdim=True).clamp_min(1e-12)


def _largest(rows: torch.Tensor) -> list[float]:
    """Each row's largest value (4 significant digits), flattened: what :func:`_scaled`
    divided by, so that the page can show the weights themselves."""
    return [float(f"{v:.4g}") for v in rows.amax(dim=-1).flatten().tolist()]


def unit_range(images: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) images rescaled to [0, 1] one by one, for display."""
    low = images.amin(dim=(1, 2, 3), keepdim=True)
    high = images.amax(dim=(1, 2, 3), keepdim=True)
    return (images - low) / (high - low).clamp_min(1e-12)


class AttentionData(NamedTuple):
    """A model's attention on a few images, as both attention explorers show it."""

    maps: torch.Tensor  # (L, B, heads, T, T): every layer's attention
    rollout: torch.Tensor  # (B, T, T)
    pool: torch.Tensor | None  # (B, N): SeqPool's weights, for a CVT or CCT
    labels: list[str]  # "image 1 (predicted: name)", ...
    shown: torch.Tensor  # (B, C, H, W) in [0, 1]: the images under the maps
    grid: int  # the patches form a grid x grid square
    offset: int  # 1 with a class token in front of the patches, else 0

    def rows(self, queries: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """What is shown for each of ``queries`` (-1: the class token, else a patch index):
        its attention (B, L, heads, Q, N) and rollout (B, Q, N) over the patch keys."""
        tokens = [q + self.offset for q in queries]
        raw = self.maps[..., tokens, self.offset :].transpose(0, 1)
        return raw, self.rollout[:, tokens, self.offset :]


def attention_data(
    model: nn.Module,
    images: torch.Tensor,
    class_names: Sequence[str] | None = None,
    display_images: torch.Tensor | None = None,
) -> AttentionData:
    """Run ``model`` once (eval mode, no gradients) on ``images`` (B, C, H, W, moved to the
    model's device) and collect its attention, rollout, SeqPool weights and predictions
    (named by ``class_names``, one per class). ``display_images`` (B, C, H, W) in [0, 1]
    are shown under the maps (default: ``images`` rescaled to [0, 1] one by one)."""
    images = images.to(next(model.parameters()).device)
    maps = torch.stack(collect_attention(model, images)).float()  # (L, B, heads, T, T)
    logits, pool = _forward(model, images)
    tokens = maps.shape[-1]
    grid = math.isqrt(tokens)
    offset = 0 if grid * grid == tokens else 1  # 1 = a class token in front
    grid = math.isqrt(tokens - offset)
    if grid * grid != tokens - offset:
        raise ValueError(f"{tokens} tokens are not a square grid (plus a class token).")
    classes = logits.shape[-1]
    if class_names and len(class_names) != classes:
        raise ValueError(
            f"The model has {classes} classes, so class_names needs {classes} names "
            f"(one per class, in order); got {len(class_names)}."
        )
    predicted = logits.argmax(dim=-1).tolist()
    names = [class_names[p] if class_names else str(p) for p in predicted]
    labels = [f"image {i + 1} (predicted: {name})" for i, name in enumerate(names)]
    if display_images is None:
        display_images = unit_range(images)
    shown = torch.stack([_as_tensor(image) for image in display_images])
    rollout = attention_rollout(list(maps))
    return AttentionData(maps, rollout, pool, labels, shown, grid, offset)


def attention_explorer(
    model: nn.Module,
    images: torch.Tensor,
    class_names: Sequence[str] | None = None,
    display_images: torch.Tensor | None = None,
    max_bytes: int = 250_000,
) -> Explorer:
    """Every layer's and head's attention (and the rollout, and SeqPool's weights for CVT and
    CCT) of ``model`` on a few ``images``; arguments as for :func:`attention_data`.

    Pick an image, a layer, a head or their mean, raw attention or rollout; click a patch to
    see where it attends (the query patch is outlined, and a colour scale gives the weights).
    Attention rows are stored for the class token and every patch, or a regular subgrid of
    them when that would exceed about ``max_bytes`` per image (a click then picks the nearest
    stored patch and says so); each row as bytes scaled to its largest weight, which is stored
    beside it.
    """
    data = attention_data(model, images, class_names, display_images)
    layers, _, heads, *_ = data.maps.shape
    per_query = layers * heads * data.grid**2  # bytes of one query's rows
    queries = _query_tokens(data.grid, data.offset == 1, max_bytes // per_query)
    raw, rollout = data.rows(queries)
    entries = [
        {
            "src": _data_uri(image, 224),
            "raw": _b64(_scaled(raw[i])),
            "raw_max": _largest(raw[i]),
            "rollout": _b64(_scaled(rollout[i])),
            "rollout_max": _largest(rollout[i]),
            "pool": None if data.pool is None else _b64(_scaled(data.pool[i])),
            "label": data.labels[i],
        }
        for i, image in enumerate(data.shown)
    ]
    keys = data.grid**2 + data.offset  # what a row of attention spreads over
    sizes = {"grid": data.grid, "layers": layers, "heads": heads, "keys": keys}
    return Explorer("attention", {**sizes, "queries": queries, "images": entries})


def explorer_page(*explorers: Explorer, title: str = "explorers") -> str:
    """A whole offline HTML page holding ``explorers`` (for the browser test and sharing)."""
    body = "\n".join(e.html for e in explorers)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width'><title>{html.escape(title)}"
        f"</title></head><body>{body}</body></html>"
    )
