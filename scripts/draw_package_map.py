"""Draw book/images/package_map.png, the picture of the architecture page (book/package.md).

Run it after adding, removing or renaming a module of going_modular:
    .venv/bin/python scripts/draw_package_map.py
tests/test_package.py checks that the page and this picture name every module.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.patches import Circle, FancyBboxPatch  # noqa: E402

from vitbook.book.diagrams import arrow, box  # noqa: E402
from vitbook.book.style import COLUMN_INCHES, use_book_style  # noqa: E402

__all__ = ["LAYERS", "RUN", "main"]

OUT = Path(__file__).resolve().parents[1] / "book" / "images" / "package_map.png"

# The layers top to bottom: (title, what it is for, fill colour, modules in reading order).
# Each layer imports only from the layers below it. A module with submodules (listed right
# after it) is drawn as a box holding them.
LAYERS = [
    (
        "book/",
        "runs the chapters; the only part that reads BOOK_* variables",
        "#fbf3c9",
        [
            "book.settings",
            "book.stats",
            "book.glue",
            "book.style",
            "book.diagrams",
            "book.attention_maps",
            "book.reference",
            "book.explorers",
            "book.self_check",
            "book.widgets",
        ],
    ),
    (
        "top level",
        "the command line: train, then its parts in cli/; the course's own modules",
        "#eeeeee",
        [
            "train",
            "cli.options",
            "cli.config",
            "cli.errors",
            "cli.output_dir",
            "cli.resume",
            "cli.parts",
            "cli.ranks",
            "cli.stops",
            "data_setup",
            "engine",
            "utils",
            "predictions",
        ],
    ),
    (
        "training/",
        "everything fit needs besides the model and the data",
        "#d9f0d3",
        [
            "training.recipe",
            "training.cct_recipes",
            "training.optim",
            "training.loop",
            "training.steps",
            "training.budget",
            "training.checkpoint",
            "training.divergence",
            "training.runs",
            "training.model_files",
            "training.seeding",
            "training.distributed",
            "training.tracking",
            "training.experiments",
            "training.timing",
            "training.speed",
            "training.clock",
            "training.source_backbone",
            "training.plots",
        ],
    ),
    (
        "models/",
        "what a network is; every model buildable by name",
        "#fde2c8",
        [
            "models.registry",
            "models.vit",
            "models.cct",
            "models.cct_variants",
            "models.text_cct",
            "models.vitbn",
            "models.tinyvgg",
            "models.layers",
            "models.pretrained",
            "models.fashion_source",
            "models.convert",
            "models.checks",
            "models.complexity",
        ],
    ),
    (
        "data/",
        "where images and text come from, and how they reach a model",
        "#d8e8f8",
        [
            "data.datasets",
            "data.text_datasets",
            "data.standins",
            "data.download",
            "data.http_fetch",
            "data.archives",
            "data.network",
            "data.paths",
            "data.files",
            "data.checks",
            "data.loaders",
            "data.text_data",
            "data.augment",
            "data.gpu_augment",
            "data.gpu_augment.ops",
            "data.gpu_augment.policies",
            "data.gpu_augment.crops",
        ],
    ),
]
# One run, `python -m vitbook.train --model cct_2_3x2 --dataset cifar10 --recipe cct`:
# (what happens, the modules it happens in), in order.
RUN = [
    ("parse and check the options: one config", ["train", "cli.options"]),
    (
        "CIFAR-10 (offline: a stand-in), in batches",
        ["data.datasets", "data_setup", "data.loaders", "data.gpu_augment"],
    ),
    (
        'build_model("cct_2_3x2")',
        ["models.registry", "models.cct_variants", "models.cct", "models.layers"],
    ),
    ("the CCT recipe: a Recipe", ["training.cct_recipes", "training.recipe"]),
    (
        "fit: epochs of steps, a checkpoint each",
        ["training.loop", "training.steps", "training.checkpoint"],
    ),
    (
        "save model.pth, results.json",
        ["training.runs", "training.model_files", "data.files"],
    ),
]
RED, GREY, PALE = "#b03a2e", "#555555", "#eef4fb"
IMPORTS = "imports from: each layer uses only the layers below it"
SLOTS = 6  # module boxes in a row
SLOT_W, BOX_W, BOX_H, ROW_H = COLUMN_INCHES / SLOTS, 1.24, 0.32, 0.42
HEAD_H, GAP = 0.34, 0.3  # a layer's title line; the space between layers, for the arrow


def _short(name: str) -> str:
    """The name as drawn inside its layer: without the subpackage."""
    return name.split(".", 1)[1] if "." in name else name


def _slots(modules: list[str]) -> list[tuple[str, list[str]]]:
    """Each module with its submodules (drawn inside it), the submodules not on their own."""
    parents = [m for m in modules if not any(m.startswith(p + ".") for p in modules)]
    return [(p, [m for m in modules if m.startswith(p + ".")]) for p in parents]


def _rows(modules: list[str]) -> int:
    """Rows of module boxes a layer needs (a nested box takes one slot per submodule)."""
    return -(-sum(max(1, len(children)) for _, children in _slots(modules)) // SLOTS)


def _badge(ax: Axes, x: float, y: float, step: int) -> None:
    """A red disc with the run's step number, on a box's top right corner."""
    ax.add_patch(Circle((x, y), 0.1, facecolor=RED, edgecolor="white", zorder=3))
    ax.text(
        x, y, str(step), ha="center", va="center", fontsize=8, color="white", zorder=4
    )


def _mark_if_run(ax: Axes, name: str, corner: tuple[float, float]) -> None:
    """Outline the box just drawn in red and number it at its top right ``corner`` if the
    run uses module ``name``."""
    steps = [i for i, (_, names) in enumerate(RUN, start=1) if name in names]
    if steps:
        ax.patches[-1].set(edgecolor=RED, linewidth=1.8)
        _badge(ax, corner[0] - 0.04, corner[1] + 0.02, steps[0])


def _module(ax: Axes, x: float, y: float, name: str, colour: str) -> None:
    """One module's box, centred on (x, y)."""
    box(ax, x, y, BOX_W, BOX_H, _short(name), fontsize=9.5, facecolor=colour)
    _mark_if_run(ax, name, (x + BOX_W / 2, y + BOX_H / 2))


def _nested(ax: Axes, x0: float, y: float, name: str, children: list[str]) -> None:
    """A package whose own module holds code, as one box spanning a slot per submodule
    from ``x0``, its submodules inside."""
    margin, span = (SLOT_W - BOX_W) / 2, len(children) * SLOT_W
    ax.add_patch(
        FancyBboxPatch(
            (x0 + margin, y - BOX_H / 2),
            span - 2 * margin,
            BOX_H,
            boxstyle="round,pad=0.02,rounding_size=0.08",
            facecolor="white",
            edgecolor="#333333",
            lw=1.1,
        )
    )
    ax.text(x0 + margin + 0.08, y, _short(name) + ":", va="center", fontsize=9.5)
    _mark_if_run(ax, name, (x0 + span - margin, y + BOX_H / 2))
    inner = (span - 2 * margin - 1.16) / len(children)  # after the package's own name
    for i, child in enumerate(children):
        x = x0 + margin + 1.12 + (i + 0.5) * inner
        label = child.rsplit(".", 1)[1]
        box(ax, x, y, inner - 0.08, BOX_H - 0.1, label, fontsize=9.5, facecolor=PALE)


def _layer(ax: Axes, top: float, layer: tuple) -> float:
    """One layer's panel from ``top`` down: title, then its modules six to a row; returns
    the panel's bottom."""
    title, what, colour, modules = layer
    slots = _slots(modules)
    bottom = top - HEAD_H - _rows(modules) * ROW_H
    ax.add_patch(
        FancyBboxPatch(
            (0.02, bottom),
            COLUMN_INCHES - 0.04,
            top - bottom,
            boxstyle="round,pad=0,rounding_size=0.1",
            facecolor=colour,
            edgecolor="none",
            alpha=0.45,
        )
    )
    ax.text(0.12, top - HEAD_H / 2, title, va="center", fontsize=11, weight="bold")
    ax.text(1.2, top - HEAD_H / 2, what, va="center", fontsize=9.5, color=GREY)
    slot = 0
    for name, children in slots:
        span = max(1, len(children))
        if slot % SLOTS + span > SLOTS:
            slot += SLOTS - slot % SLOTS  # a nested box does not break across rows
        row, column = divmod(slot, SLOTS)
        x0, y = column * SLOT_W, top - HEAD_H - (row + 0.5) * ROW_H
        if children:
            _nested(ax, x0, y, name, children)
        else:
            _module(ax, x0 + SLOT_W / 2, y, name, colour)
        slot += span
    return bottom


def _run_steps(ax: Axes, top: float) -> None:
    """The run's steps in two columns below the layers, each naming its modules."""
    ax.text(
        0.12,
        top,
        "One run: python -m vitbook.train --model cct_2_3x2 --dataset cifar10 "
        "--recipe cct",
        fontsize=9.5,
        color=RED,
        weight="bold",
        va="center",
    )
    half = -(-len(RUN) // 2)
    for i, (what, modules) in enumerate(RUN):
        column, row = divmod(i, half)
        x, y = 0.2 + column * COLUMN_INCHES / 2, top - 0.32 - row * 0.42
        _badge(ax, x, y, i + 1)
        ax.text(x + 0.2, y + 0.08, what, va="center", fontsize=9.5)
        names = ", ".join(modules)
        ax.text(x + 0.2, y - 0.1, names, va="center", fontsize=8.5, color=GREY)


def main() -> None:
    """Draw the layers top to bottom, an arrow down between each two, then the run's steps."""
    use_book_style()
    rows = sum(_rows(modules) for *_, modules in LAYERS)
    height = len(LAYERS) * (HEAD_H + GAP) + rows * ROW_H + 1.45
    fig = plt.figure(figsize=(COLUMN_INCHES, height), layout="none")
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set(xlim=(0, COLUMN_INCHES), ylim=(0, height))
    ax.axis("off")
    top = height - 0.05
    for i, layer in enumerate(LAYERS):
        bottom = _layer(ax, top, layer)
        top = bottom - GAP
        if i + 1 < len(LAYERS):
            arrow(ax, (COLUMN_INCHES / 2, bottom), (COLUMN_INCHES / 2, top))
            if i == 0:
                x = COLUMN_INCHES / 2 + 0.12
                ax.text(x, top + GAP / 2, IMPORTS, va="center", fontsize=9, color=GREY)
    _run_steps(ax, top + GAP - 0.25)
    fig.savefig(OUT, dpi=100)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
