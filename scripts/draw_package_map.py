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

from going_modular.book.diagrams import arrow, box  # noqa: E402
from going_modular.book.style import use_book_style  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "book" / "images" / "package_map.png"

# Columns in the order a training run goes through them: (title, colour, modules top to bottom).
COLUMNS = [
    ("1 entry", "#eeeeee", ["cli", "train", "settings", "paths"]),
    (
        "2 data",
        "#d8e8f8",
        [
            "datasets",
            "text_datasets",
            "standins",
            "download",
            "data_setup",
            "text_data",
            "augment",
            "gpu_augment",
            "gpu_augment_ops",
            "gpu_augment_policies",
            "gpu_augment_crops",
        ],
    ),
    (
        "3 model",
        "#fde2c8",
        [
            "models.registry",
            "models.vit",
            "models.cct",
            "models.text_cct",
            "models.vitbn",
            "models.tinyvgg",
            "models.pretrained",
            "models.layers",
            "models.checks",
            "models.complexity",
        ],
    ),
    (
        "4 training",
        "#d9f0d3",
        [
            "recipe",
            "cct_recipes",
            "optim",
            "engine",
            "divergence",
            "checkpoint",
            "tracking",
            "timing",
            "experiments",
            "utils",
        ],
    ),
    (
        "5 results",
        "#eadcf5",
        [
            "runs",
            "files",
            "plots",
            "predictions",
            "attention_maps",
            "diagrams",
            "reference",
            "style",
            "glue",
        ],
    ),
]
# The path of one run, `python -m going_modular.train --model cct_2_3x2 --dataset cifar10
# --recipe cct`: (modules, what happens there), left to right in the bottom lane.
PATH = [
    (["train", "cli"], "main(): options\nchecked first"),
    (["datasets", "standins"], "CIFAR-10, or a\nstand-in offline"),
    (["gpu_augment"], "batches augmented\non the device"),
    (["models.registry", "models.cct", "models.layers"], 'build_model\n("cct_2_3x2")'),
    (["cct_recipes", "recipe"], "CCTRecipe ->\nRecipe"),
    (["engine", "checkpoint"], "fit: epochs,\na checkpoint each"),
    (["runs", "files"], "model.pth +\nresults.json"),
]
RED = "#b03a2e"


def main() -> None:
    use_book_style()
    width, row = 2.05, 0.42
    fig, ax = plt.subplots(figsize=(11.5, 7.7))
    ax.set(xlim=(0, 11.5), ylim=(-0.6, 7.7))
    ax.axis("off")
    on_path = {name for names, _ in PATH for name in names}
    for c, (title, colour, modules) in enumerate(COLUMNS):
        x = 1.2 + c * 2.3
        ax.text(x, 7.45, title, ha="center", va="center", fontsize=11, weight="bold")
        for r, name in enumerate(modules):
            y = 6.95 - r * (row + 0.06)
            box(ax, x, y, width, row, name, fontsize=9, facecolor=colour)
            if name in on_path:
                ax.patches[-1].set(edgecolor=RED, linewidth=2)
    ax.text(
        0.15,
        1.45,
        "One run: python -m going_modular.train --model cct_2_3x2 --dataset cifar10 "
        "--recipe cct (the modules on its path are outlined in red above)",
        fontsize=9.5,
        color=RED,
    )
    step = 11.5 / len(PATH)
    xs = [step / 2 + i * step for i in range(len(PATH))]
    for i, (x, (names, what)) in enumerate(zip(xs, PATH), start=1):
        box(
            ax,
            x,
            0.75,
            step - 0.3,
            0.85,
            f"{i}  {what}",
            fontsize=8.5,
            facecolor="white",
        )
        ax.patches[-1].set(edgecolor=RED)
        modules = "\n".join(name.removeprefix("models.") for name in names)
        ax.text(x, 0.25, modules, ha="center", va="top", fontsize=7.5, color="#555555")
    for x0, x1 in zip(xs, xs[1:]):
        arrow(
            ax, (x0 + (step - 0.3) / 2, 0.7), (x1 - (step - 0.3) / 2, 0.7), colour=RED
        )
    ax.set_title(
        "going_modular, module by module, in the order a training run uses them",
        fontsize=12,
    )
    fig.savefig(OUT, dpi=110, bbox_inches="tight")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
