"""Live explorers: the book's four explorers driven by Python through ipywidgets.

Where a kernel and a widget frontend run (Colab, or Jupyter when the reader opts in with
``vitbook.book.widgets.LIVE = True``), :func:`show` returns the live version, which
recomputes everything with the package on the reader's own image, model or settings. Anywhere
else, above all in the headless runs that store the book's outputs, it returns the offline
HTML explorer of :mod:`vitbook.book.explorers`, so the page never holds a widget.

This is only a front end: each explorer's data, controls and what they show come from
:mod:`vitbook.book.explorers`, as for the offline page; here they are drawn with matplotlib
into an ``ipywidgets.Image``. ipywidgets is imported only when a live explorer is built: it is
on Colab and in the book's requirements, not a dependency of the package.
"""

from __future__ import annotations

import html
import importlib.util
import io
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from PIL import Image
from torch import nn

from vitbook.book.attention_maps import overlay
from vitbook.book.explorers import (
    POSITION_KINDS,
    SIZE_FIELDS,
    Explorer,
    attention_data,
    model_size,
    patch_data,
    position_similarity,
    position_table,
    preset_configs,
    schedule_controls,
    schedule_curve,
    schedule_settings,
)

__all__ = [
    "LIVE",
    "LiveExplorer",
    "live_attention_explorer",
    "live_patch_explorer",
    "live_schedule_explorer",
    "live_size_calculator",
    "show",
    "wants_live",
]

# None: live on Colab only; True or False: the reader's choice, everywhere.
LIVE: bool | None = None


def wants_live(live: bool | None = None) -> bool:
    """Whether to show live widgets: ``live`` if given, else :data:`LIVE` if set, else only
    on Colab; never without ipywidgets."""
    if live is None:
        live = LIVE if LIVE is not None else "google.colab" in sys.modules
    return bool(live) and importlib.util.find_spec("ipywidgets") is not None


def show(
    explorer: Explorer,
    live: Callable[[], LiveExplorer] | None = None,
    *,
    use_live: bool | None = None,
) -> Explorer | LiveExplorer:
    """``live()`` where live widgets are wanted (:func:`wants_live`), else ``explorer``, the
    offline HTML. Put it last in a cell: the notebook displays what it returns."""
    return live() if live is not None and wants_live(use_live) else explorer


class LiveExplorer:
    """Controls, a readout and a picture in one ipywidgets box, redrawn on every change.

    ``draw(values)`` gets the controls' values by name and returns a matplotlib figure (or
    None: no picture) and the readout's HTML; a ``ValueError`` it raises (a size the package
    refuses) is shown in the readout. ``figure`` keeps the last figure drawn.
    """

    def __init__(
        self,
        controls: Mapping[str, Any],
        draw: Callable[[dict[str, Any]], tuple[Figure | None, str]],
    ):
        import ipywidgets as widgets

        self.controls, self._draw, self._paused = dict(controls), draw, False
        self.figure: Figure | None = None  # the last figure drawn
        self.readout = widgets.HTML()
        self.picture = widgets.Image(format="png", layout={"max_width": "100%"})
        for control in self.controls.values():
            control.observe(lambda _: self._paused or self.redraw(), names="value")
        row = widgets.HBox(
            list(self.controls.values()), layout={"flex_flow": "row wrap"}
        )
        self.box = widgets.VBox([row, self.readout, self.picture])
        self.redraw()

    @contextmanager
    def paused(self):
        """Change several controls at once, then redraw once."""
        self._paused = True
        try:
            yield
        finally:
            self._paused = False
        self.redraw()

    def redraw(self) -> None:
        try:
            figure, text = self._draw({k: c.value for k, c in self.controls.items()})
        except ValueError as error:
            self.readout.value = f"<b>{html.escape(str(error))}</b>"
            return
        self.readout.value, self.figure = text, figure
        self.picture.layout.display = "none" if figure is None else None
        if figure is not None:
            buffer = io.BytesIO()
            figure.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
            self.picture.value = buffer.getvalue()

    def _ipython_display_(self) -> None:  # ipywidgets 7 (Colab's) and 8 alike
        from IPython.display import display

        display(self.box)


def _grid_sliders(grid: int, name: str) -> dict[str, Any]:
    """A row and a column slider over a grid x grid of patches."""
    import ipywidgets as widgets

    return {
        axis: widgets.IntSlider(
            value=grid // 2, min=0, max=grid - 1, description=f"{name} {axis}"
        )
        for axis in ("row", "column")
    }


def _figure(panels: int) -> tuple[Figure, list]:
    """A figure of ``panels`` axes side by side, made outside pyplot (so never auto-shown)."""
    figure = Figure(figsize=(4.2 * panels, 4.2), layout="constrained")
    return figure, list(figure.subplots(1, panels, squeeze=False)[0])


def _pixels(image: torch.Tensor) -> np.ndarray:
    """A (C, H, W) tensor in [0, 1] -> (H, W[, C]) floats for imshow."""
    return image.clamp(0, 1).cpu().permute(1, 2, 0).squeeze(-1).numpy()


# Size calculator ------------------------------------------------------------------------------


def live_size_calculator(
    presets: Mapping[str, nn.Module | str | dict] | None = None,
) -> LiveExplorer:
    """A preset and its sizes -> :func:`~vitbook.book.explorers.model_size`'s tokens,
    parameters and multiply-adds, counted by the package on a model built on the meta
    device. ``presets`` as for :func:`~vitbook.book.explorers.size_calculator`."""
    import ipywidgets as widgets

    configs = preset_configs(presets)
    first = next(iter(configs.values()))
    controls = {"preset": widgets.Dropdown(options=list(configs), description="preset")}
    for key, label in SIZE_FIELDS.items():
        if key == "mlp_ratio":
            controls[key] = widgets.BoundedFloatText(
                value=first[key], min=0.25, max=64, step=0.25, description=label
            )
        else:
            controls[key] = widgets.BoundedIntText(
                value=first.get(key, 1), min=1, max=10_000, description=label
            )

    def draw(values: dict[str, Any]) -> tuple[None, str]:
        base = configs[values.pop("preset")]
        config = {**base, **{k: v for k, v in values.items() if k in base}}
        if config.get("kernel") != base.get("kernel"):  # a new kernel: the CCT's own
            config |= {"stride": None, "padding": None}  # default stride and padding
        size = model_size(config)
        rows = [("tokens", size["tokens"]), ("parameters", size["params"])] + [
            (f"multiply-adds, {kind}", size[f"macs_{kind}"])
            for kind in ("total", "linear", "attention", "conv")
        ]
        return None, "<br>".join(f"{name}: <b>{n:,}</b>" for name, n in rows)

    explorer = LiveExplorer(controls, draw)

    def choose(_: Any = None) -> None:
        config = configs[controls["preset"].value]
        with explorer.paused():
            for key in SIZE_FIELDS:
                controls[key].layout.display = None if key in config else "none"
                if key in config:
                    controls[key].value = config[key]

    controls["preset"].observe(choose, names="value")
    choose()
    return explorer


# Learning-rate schedule -----------------------------------------------------------------------


def live_schedule_explorer(
    warmup_steps: int = 500,
    total_steps: int = 5000,
    peak_lr: float = 1e-3,
    final_lr: float = 0.0,
    label_smoothing: float = 0.1,
    num_classes: int = 10,
) -> LiveExplorer:
    """The schedule explorer's sliders drawing
    :func:`~vitbook.book.explorers.schedule_curve`: the engine's learning rate at every
    step and the label-smoothed target of one image."""
    import ipywidgets as widgets

    settings = schedule_settings(
        warmup_steps, total_steps, peak_lr, final_lr, label_smoothing
    )
    controls = {}
    for key, label, low, high, step in schedule_controls(settings):
        options = dict(min=low, max=high, step=step, continuous_update=False)
        if isinstance(step, int):
            slider = widgets.IntSlider(**options)
        else:
            slider = widgets.FloatSlider(readout_format=".3g", **options)
        slider.value, slider.description = settings[key], label
        slider.style.description_width = "initial"
        controls[key] = slider

    def draw(v: dict[str, Any]) -> tuple[Figure, str]:
        lr, targets = schedule_curve(v, num_classes)
        figure, (curve, bars) = _figure(2)
        curve.plot(lr)
        curve.set(xlabel="step", ylabel="learning rate", title="warmup, then cosine")
        bars.bar(range(num_classes), targets, color=["C0"] + ["C1"] * (num_classes - 1))
        bars.set(ylim=(0, 1), title="target of an image of class 0")
        text = (
            f"peak <b>{max(lr):.3g}</b> at step {lr.index(max(lr))}, last step "
            f"<b>{lr[-1]:.3g}</b>; true class <b>{targets[0]:.3g}</b>, each other "
            f"<b>{targets[-1]:.3g}</b>"
        )
        return figure, text

    return LiveExplorer(controls, draw)


# Patches and position embeddings --------------------------------------------------------------


def live_patch_explorer(
    image: torch.Tensor | Image.Image,
    patch_sizes: Sequence[int] = (4, 8, 16, 32),
    dim: int = 768,
) -> LiveExplorer:
    """A patch-size slider over ``image``: the grid and N = HW/P^2; and, on the grid of the
    patch size chosen, the cosine similarity of a chosen position's embedding to every
    other's, for each of :data:`~vitbook.book.explorers.POSITION_KINDS`. Arguments as for
    :func:`~vitbook.book.explorers.patch_data`."""
    import ipywidgets as widgets

    data = patch_data(image, patch_sizes, dim)
    pixels, (channels, side, _) = _pixels(data.image), data.image.shape
    finest = side // min(data.patch_sizes)  # the position sliders span the finest grid
    controls = {
        "patch": widgets.SelectionSlider(
            options=data.patch_sizes, description="patch size"
        ),
        "table": widgets.Dropdown(
            options=list(POSITION_KINDS), description="embedding"
        ),
        **_grid_sliders(finest, "position"),
    }

    def draw(v: dict[str, Any]) -> tuple[Figure, str]:
        patch = v["patch"]
        grid = side // patch
        figure, axes = _figure(2)
        axes[0].imshow(pixels, cmap="gray", extent=(0, side, side, 0))
        axes[0].set_axis_off()
        for edge in range(patch, side, patch):
            axes[0].axhline(edge, color="white", lw=0.8)
            axes[0].axvline(edge, color="white", lw=0.8)
        axes[0].set_title(f"P = {patch}: N = {grid * grid} patches")
        text = (
            f"N = ({side} / {patch})<sup>2</sup> = <b>{grid * grid}</b> patches; the "
            f"sequence is ({grid * grid} + 1) x {patch * patch * channels}"
            " (class token, flattened patches)"
        )
        row, col = v["row"] * grid // finest, v["column"] * grid // finest
        table = position_table(POSITION_KINDS[v["table"]], grid * grid, data.dim)
        similarity = position_similarity(table, row * grid + col)
        shown = axes[1].imshow(
            similarity.reshape(grid, grid).numpy(), cmap="viridis", vmin=-1, vmax=1
        )
        axes[1].add_patch(Rectangle((col - 0.5, row - 0.5), 1, 1, fill=False, ec="red"))
        axes[1].set_title(
            f"{v['table']}: cosine similarity to ({row}, {col}) of {grid} x {grid}"
        )
        axes[1].set(xticks=[], yticks=[])
        figure.colorbar(shown, ax=axes[1], fraction=0.046)
        return figure, text

    return LiveExplorer(controls, draw)


# Attention ------------------------------------------------------------------------------------


def live_attention_explorer(
    model: nn.Module,
    images: torch.Tensor,
    class_names: Sequence[str] | None = None,
    display_images: torch.Tensor | None = None,
) -> LiveExplorer:
    """Every layer's and head's attention of ``model`` on ``images`` (B, C, H, W), the rollout
    and, for a CVT or CCT, SeqPool's weights: pick an image, a layer, a head (or their mean),
    a mode, and the query patch (or the class token). Arguments as for
    :func:`~vitbook.book.explorers.attention_data`."""
    import ipywidgets as widgets

    data = attention_data(model, images, class_names, display_images)
    layers, _, heads, *_ = data.maps.shape
    modes = ["attention", "rollout"] + ["SeqPool weights"] * (data.pool is not None)
    controls = {
        "image": widgets.Dropdown(
            options=[(label, i) for i, label in enumerate(data.labels)],
            description="image",
        ),
        "layer": widgets.Dropdown(
            options=[(str(k + 1), k) for k in range(layers)], description="layer"
        ),
        "head": widgets.Dropdown(
            options=[("mean", -1)] + [(str(h + 1), h) for h in range(heads)],
            description="head",
        ),
        "mode": widgets.ToggleButtons(options=modes),
        **_grid_sliders(data.grid, "query"),
    }
    if data.offset:
        controls["class_token"] = widgets.Checkbox(
            value=False, description="query: class token"
        )

    def draw(v: dict[str, Any]) -> tuple[Figure, str]:
        i, row, col, mode = v["image"], v["row"], v["column"], v["mode"]
        from_class = v.get("class_token", False)
        raw, rollout = data.rows([-1 if from_class else row * data.grid + col])
        if mode == "SeqPool weights":
            attention, what = data.pool[i], "SeqPool's weight on each token"
        else:
            if mode == "rollout":
                attention, what = rollout[i, 0], "rollout through all layers"
            else:
                by_head, head = raw[i, v["layer"], :, 0], v["head"]  # (heads, N)
                attention = by_head.mean(dim=0) if head < 0 else by_head[head]
                heads = "mean of the heads" if head < 0 else f"head {head + 1}"
                what = f"layer {v['layer'] + 1}, {heads}"
            asked = "the class token" if from_class else f"patch ({row}, {col})"
            what += f"; query: {asked}"
        figure, (left, right) = _figure(2)
        pixels = _pixels(data.shown[i])
        left.imshow(pixels, cmap="gray")
        left.set_axis_off()
        right.set_axis_off()
        if mode != "SeqPool weights" and not from_class:  # frame the query patch
            height, width = pixels.shape[0] / data.grid, pixels.shape[1] / data.grid
            frame = Rectangle((col * width, row * height), width, height, fill=False)
            left.add_patch(frame).set(edgecolor="red", linewidth=2)
        right.imshow(pixels, cmap="gray")
        grid_map = attention.reshape(data.grid, data.grid).cpu()
        right.imshow(overlay(data.shown[i], grid_map), cmap="inferno", alpha=0.6)
        left.set_title(data.labels[i])
        right.set_title(what, fontsize=9)
        return figure, what

    return LiveExplorer(controls, draw)
