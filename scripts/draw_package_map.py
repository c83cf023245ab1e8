"""Draw book/images/package_map.png, the picture of the architecture page (book/package.md).

Run it after adding, removing or renaming a module of going_modular or vitbook:
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

__all__ = ["LAYERS", "PACKAGES", "RUN", "main"]

OUT = Path(__file__).resolve().parents[1] / "book" / "images" / "package_map.png"

# The two packages top to bottom, each drawn as a frame around its layers: (title, what).
PACKAGES = {
    "vitbook": ("vitbook/", "the book's machinery; imports going_modular"),
    "going_modular": ("going_modular/", "the course's package; never imports vitbook"),
}
# The layers top to bottom: (package, title, what it is for, fill colour, modules in
# reading order, named in full). Each layer imports only from the layers below it. A
# module with submodules (listed right after it) is drawn as a box holding them.
LAYERS = [
    (
        "vitbook",
        "book/",
        "runs the chapters; the only part that reads BOOK_* variables",
        "#fbf3c9",
        [
            "vitbook.book.settings",
            "vitbook.book.stats",
            "vitbook.book.glue",
            "vitbook.book.style",
            "vitbook.book.diagrams",
            "vitbook.book.attention_maps",
            "vitbook.book.reference",
            "vitbook.book.explorers",
            "vitbook.book.self_check",
            "vitbook.book.widgets",
            "vitbook.book.exercises",
            "vitbook.book.exercises.ch00",
            "vitbook.book.exercises.ch01",
            "vitbook.book.exercises.ch02",
            "vitbook.book.exercises.ch03",
            "vitbook.book.exercises.ch04",
            "vitbook.book.exercises.ch05",
            "vitbook.book.exercises.ch08",
            "vitbook.book.exercises.ch10",
            "vitbook.book.exercises.ch13",
            "vitbook.book.exercises.ch14",
            "vitbook.book.built.ch02",
            "vitbook.book.built.ch03",
            "vitbook.book.built.ch04",
            "vitbook.book.built.ch05",
            "vitbook.book.ch10_lab",
        ],
    ),
    (
        "vitbook",
        "command line",
        "python -m vitbook.train (vit-train), its parts in cli/",
        "#eeeeee",
        [
            "vitbook.train",
            "vitbook.cli.options",
            "vitbook.cli.config",
            "vitbook.cli.errors",
            "vitbook.cli.output_dir",
            "vitbook.cli.resume",
            "vitbook.cli.parts",
            "vitbook.cli.ranks",
            "vitbook.cli.stops",
        ],
    ),
    (
        "vitbook",
        "training/",
        "fit: the course's loop with hooks; recipes, checkpoints, runs",
        "#d9f0d3",
        [
            "vitbook.training.loop",
            "vitbook.training.steps",
            "vitbook.training.budget",
            "vitbook.training.distributed",
            "vitbook.training.checkpoint",
            "vitbook.training.divergence",
            "vitbook.training.recipe",
            "vitbook.training.cct_recipes",
            "vitbook.training.optim",
            "vitbook.training.model_files",
            "vitbook.training.runs",
            "vitbook.training.tracking",
            "vitbook.training.experiments",
            "vitbook.training.timing",
            "vitbook.training.speed",
            "vitbook.training.clock",
            "vitbook.training.source_backbone",
            "vitbook.training.plots",
        ],
    ),
    (
        "vitbook",
        "models/",
        "pretrained weights, their conversion, what a model costs",
        "#fde2c8",
        [
            "vitbook.models.pretrained",
            "vitbook.models.fashion_source",
            "vitbook.models.convert",
            "vitbook.models.complexity",
        ],
    ),
    (
        "vitbook",
        "data/",
        "datasets online, stand-ins offline, safe downloads and files",
        "#d8e8f8",
        [
            "vitbook.data.datasets",
            "vitbook.data.text_datasets",
            "vitbook.data.standins",
            "vitbook.data.download",
            "vitbook.data.http_fetch",
            "vitbook.data.archives",
            "vitbook.data.network",
            "vitbook.data.paths",
            "vitbook.data.files",
            "vitbook.data.image_folders",
            "vitbook.data.text_data",
            "vitbook.data.gpu_augment",
            "vitbook.data.gpu_augment.ops",
            "vitbook.data.gpu_augment.policies",
            "vitbook.data.gpu_augment.crops",
        ],
    ),
    (
        "going_modular",
        "top level",
        "the course's modules, under the course's names",
        "#e6def3",
        [
            "going_modular.data_setup",
            "going_modular.engine",
            "going_modular.model_builder",
            "going_modular.utils",
            "going_modular.predictions",
            "going_modular.train",
        ],
    ),
    (
        "going_modular",
        "models/",
        "what a network is; every model buildable by name",
        "#fde2c8",
        [
            "going_modular.models.registry",
            "going_modular.models.vit",
            "going_modular.models.cct",
            "going_modular.models.cct_variants",
            "going_modular.models.text_cct",
            "going_modular.models.vitbn",
            "going_modular.models.tinyvgg",
            "going_modular.models.layers",
            "going_modular.models.checks",
        ],
    ),
    (
        "going_modular",
        "data/",
        "how images reach a model",
        "#d8e8f8",
        [
            "going_modular.data.loaders",
            "going_modular.data.augment",
            "going_modular.data.checks",
        ],
    ),
]
# One run, `python -m vitbook.train --model cct_2_3x2 --dataset cifar10 --recipe cct`:
# (what happens, the modules it happens in), in order.
RUN = [
    (
        "parse and check the options: one config",
        ["vitbook.train", "vitbook.cli.options"],
    ),
    (
        "CIFAR-10 (offline: a stand-in), in batches",
        [
            "vitbook.data.datasets",
            "vitbook.data.gpu_augment",
            "going_modular.data.loaders",
        ],
    ),
    (
        'build_model("cct_2_3x2")',
        [
            "going_modular.models.registry",
            "going_modular.models.cct_variants",
            "going_modular.models.cct",
            "going_modular.models.layers",
        ],
    ),
    (
        "the CCT recipe: a Recipe",
        ["vitbook.training.cct_recipes", "vitbook.training.recipe"],
    ),
    (
        "fit: the course's engine.train with the book's hooks, a checkpoint each epoch",
        [
            "vitbook.training.loop",
            "going_modular.engine",
            "vitbook.training.checkpoint",
        ],
    ),
    (
        "save model.pth, results.json",
        [
            "vitbook.training.runs",
            "vitbook.training.model_files",
            "vitbook.data.files",
        ],
    ),
]
RED, GREY, PALE = "#b03a2e", "#555555", "#eef4fb"
IMPORTS = "imports from: each layer uses only the layers below it"
BETWEEN = "vitbook imports going_modular, never the reverse"
SLOTS = 6  # module boxes in a row
PAD = 0.1  # a package's frame around its layers
SLOT_W, BOX_W, BOX_H, ROW_H = (COLUMN_INCHES - 2 * PAD) / SLOTS, 1.24, 0.32, 0.42
HEAD_H, GAP = 0.34, 0.3  # a layer's title line; the space between layers, for the arrow
PACKAGE_H, PACKAGE_GAP = 0.44, 0.5  # a package's title line; the space between packages
STEP_H = 0.42  # one step of the run, two lines


def _short(name: str) -> str:
    """The name as drawn inside its layer: without the package and the subpackage."""
    below = name.split(".")[1:]
    return ".".join(below[1:] if len(below) > 1 else below)


def _grouped(modules: list[str]) -> str:
    """Modules by package: ``vitbook: train, cli.options; going_modular: engine``."""
    packages = dict.fromkeys(name.split(".")[0] for name in modules)
    return "; ".join(
        f"{package}: "
        + ", ".join(m.split(".", 1)[1] for m in modules if m.startswith(package + "."))
        for package in packages
    )


def _slots(modules: list[str]) -> list[tuple[str, list[str]]]:
    """Each module with its submodules (drawn inside it), the submodules not on their own."""
    parents = [m for m in modules if not any(m.startswith(p + ".") for p in modules)]
    return [(p, [m for m in modules if m.startswith(p + ".")]) for p in parents]


def _rows(modules: list[str]) -> int:
    """Rows of module boxes a layer needs (a nested box takes one slot per submodule)."""
    return -(-sum(_span(children) for _, children in _slots(modules)) // SLOTS)


def _span(children: list[str]) -> int:
    """Slots a module takes: one, or one per submodule up to a whole row."""
    return min(max(1, len(children)), SLOTS)


def _layers_of(package: str) -> list[tuple]:
    return [layer for layer in LAYERS if layer[0] == package]


def _height() -> float:
    """The picture's height: the packages' frames, the gaps between them, the run."""
    layers = sum(HEAD_H + _rows(modules) * ROW_H for *_, modules in LAYERS)
    gaps = sum((len(_layers_of(package)) - 1) * GAP for package in PACKAGES)
    frames = len(PACKAGES) * (PACKAGE_H + PAD) + (len(PACKAGES) - 1) * PACKAGE_GAP
    return 0.05 + layers + gaps + frames + 0.55 + len(RUN) * STEP_H


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
    margin, span = (SLOT_W - BOX_W) / 2, _span(children) * SLOT_W
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
    _, title, what, colour, modules = layer
    bottom = top - HEAD_H - _rows(modules) * ROW_H
    ax.add_patch(
        FancyBboxPatch(
            (PAD, bottom),
            COLUMN_INCHES - 2 * PAD,
            top - bottom,
            boxstyle="round,pad=0,rounding_size=0.1",
            facecolor=colour,
            edgecolor="none",
            alpha=0.45,
        )
    )
    ax.text(PAD + 0.1, top - HEAD_H / 2, title, va="center", fontsize=11, weight="bold")
    ax.text(1.5, top - HEAD_H / 2, what, va="center", fontsize=9.5, color=GREY)
    slot = 0
    for name, children in _slots(modules):
        span = _span(children)
        if slot % SLOTS + span > SLOTS:
            slot += SLOTS - slot % SLOTS  # a nested box does not break across rows
        row, column = divmod(slot, SLOTS)
        x0, y = PAD + column * SLOT_W, top - HEAD_H - (row + 0.5) * ROW_H
        if children:
            _nested(ax, x0, y, name, children)
        else:
            _module(ax, x0 + SLOT_W / 2, y, name, colour)
        slot += span
    return bottom


def _package(ax: Axes, top: float, package: str, first: bool) -> float:
    """One package's frame from ``top`` down: its title, then its layers with an arrow
    down between each two; returns the frame's bottom."""
    title, what = PACKAGES[package]
    middle = top - PACKAGE_H / 2
    ax.text(PAD + 0.1, middle, title, va="center", fontsize=13, weight="bold")
    ax.text(2.0, middle, what, va="center", fontsize=10, color=GREY)
    layers = _layers_of(package)
    below = top - PACKAGE_H
    for i, layer in enumerate(layers):
        bottom = _layer(ax, below, layer)
        below = bottom - GAP
        if i + 1 < len(layers):
            arrow(ax, (COLUMN_INCHES / 2, bottom), (COLUMN_INCHES / 2, below))
            if first and i == 0:
                x = COLUMN_INCHES / 2 + 0.12
                ax.text(
                    x, below + GAP / 2, IMPORTS, va="center", fontsize=9, color=GREY
                )
    ax.add_patch(
        FancyBboxPatch(
            (0.03, bottom - PAD),
            COLUMN_INCHES - 0.06,
            top - bottom + PAD,
            boxstyle="round,pad=0,rounding_size=0.15",
            facecolor="none",
            edgecolor="#333333",
            lw=1.6,
        )
    )
    return bottom - PAD


def _run_steps(ax: Axes, top: float) -> None:
    """The run's steps one below the other, each naming its modules by package."""
    ax.text(
        PAD + 0.02,
        top,
        "One run: python -m vitbook.train --model cct_2_3x2 --dataset cifar10 "
        "--recipe cct",
        fontsize=9.5,
        color=RED,
        weight="bold",
        va="center",
    )
    for i, (what, modules) in enumerate(RUN):
        x, y = PAD + 0.1, top - 0.4 - i * STEP_H
        _badge(ax, x, y, i + 1)
        ax.text(x + 0.2, y + 0.08, what, va="center", fontsize=9.5)
        ax.text(
            x + 0.2, y - 0.1, _grouped(modules), va="center", fontsize=8.5, color=GREY
        )


def main() -> None:
    """Draw the packages top to bottom, vitbook above the going_modular it imports, an
    arrow down between them, then the run's steps."""
    use_book_style()
    height = _height()
    fig = plt.figure(figsize=(COLUMN_INCHES, height), layout="none")
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set(xlim=(0, COLUMN_INCHES), ylim=(0, height))
    ax.axis("off")
    top = height - 0.05
    for i, package in enumerate(PACKAGES):
        bottom = _package(ax, top, package, first=i == 0)
        top = bottom - PACKAGE_GAP
        if i + 1 < len(PACKAGES):
            arrow(ax, (COLUMN_INCHES / 2, bottom), (COLUMN_INCHES / 2, top))
            x = COLUMN_INCHES / 2 + 0.12
            ax.text(x, top + PACKAGE_GAP / 2, BETWEEN, va="center", fontsize=9.5)
    _run_steps(ax, top + PACKAGE_GAP - 0.3)
    fig.savefig(OUT, dpi=100)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
