"""The book's one look for figures and tables.

The rendered book's output column is 832 px wide at a 1400 px window. Figures drawn at
100 dpi and at most :data:`COLUMN_INCHES` wide are shown at their natural size there, so
11-point text is 15 px tall; on a phone they shrink with the column. Call
:func:`use_book_style` once, in a chapter's import cell; size figures with
:func:`figsize`, draw small images at an integer scale with :func:`show_images` and show
data frames with :func:`table`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

__all__ = [
    "BOOK_STYLE",
    "COLUMN_INCHES",
    "Table",
    "figsize",
    "show_images",
    "table",
    "use_book_style",
]

COLUMN_INCHES = 8.2  # 820 px at 100 dpi: the output column at 1400 px, less a margin
DPI = 100
MAX_COLUMNS = 2  # panels side by side; more make every label too small to read

BOOK_STYLE: Mapping[str, object] = {
    "figure.dpi": DPI,
    "savefig.dpi": DPI,
    "figure.figsize": (COLUMN_INCHES, 3.6),
    # Tight layout, the engine the package's plot helpers also ask for (fig.tight_layout):
    # a figure that wants a legend outside its axes passes layout="constrained" itself.
    "figure.autolayout": True,
    "font.size": 11,
    "axes.titlesize": 12,
    "axes.labelsize": 11,
    "figure.titlesize": 12,
    "xtick.labelsize": 10.5,
    "ytick.labelsize": 10.5,
    "legend.fontsize": 10.5,
    "legend.frameon": False,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "grid.alpha": 0.3,  # for plots that ask for a grid (no grid over images)
    "lines.linewidth": 1.8,
    "errorbar.capsize": 3,
    "image.interpolation": "nearest",  # small images keep their pixels
    "image.cmap": "viridis",
}


def use_book_style() -> None:
    """Set matplotlib's defaults to the book's style (sizes, fonts, layout, legends)."""
    mpl.rcParams.update(BOOK_STYLE)


def figsize(
    columns: int = 1,
    rows: int = 1,
    panel_height: float = 3.2,
    width: float = COLUMN_INCHES,
) -> tuple[float, float]:
    """A figure size for ``rows`` x ``columns`` panels that fits the book's column.

    At most two panels side by side: put further panels in more rows. ``width`` may be
    narrower than the column (a single square image), never wider.
    """
    if not 1 <= columns <= MAX_COLUMNS:
        raise ValueError(
            f"columns={columns}: the book's figures stack to at most {MAX_COLUMNS} "
            "columns; put further panels in more rows."
        )
    if rows < 1:
        raise ValueError(f"rows must be at least 1, got {rows}.")
    if not 0 < width <= COLUMN_INCHES:
        raise ValueError(
            f"width={width} in: a figure is at most the column's {COLUMN_INCHES} in wide."
        )
    return width, panel_height * rows


def show_images(
    images: Sequence[np.ndarray],
    titles: Sequence[str] | None = None,
    columns: int = 8,
    scale: int = 2,
    title: str | None = None,
    cmap: str = "gray",
    vmin: float = 0.0,
    vmax: float = 1.0,
    colorbar: str | None = None,
) -> plt.Figure:
    """``images`` ((H, W) or (H, W, C) arrays) in a grid, each pixel drawn as a
    ``scale`` x ``scale`` block: small images stay sharp instead of blurred or stretched.

    ``titles`` label the images (one or more lines, each about as wide as an image);
    ``title`` heads the grid. One-channel images are coloured by ``cmap`` from ``vmin``
    to ``vmax``; ``colorbar`` (its label) adds the scale on the right. The grid must
    fit the column: fewer ``columns`` or a smaller ``scale``.
    """
    if titles is not None and len(titles) != len(images):
        raise ValueError(f"{len(titles)} titles for {len(images)} images.")
    height, width = images[0].shape[:2]
    if any(image.shape[:2] != (height, width) for image in images):
        raise ValueError("show_images draws images of one size; resize them first.")
    columns = min(columns, len(images))
    rows = -(-len(images) // columns)
    cell_w, cell_h = scale * width, scale * height  # in pixels
    lines = max((t.count("\n") + 1 for t in titles or []), default=0)
    gap, label = 10, (6 + 16 * lines if lines else 0)  # title band: 16 px a line
    head = 30 if title else 0
    grid_w = columns * cell_w + (columns - 1) * gap
    fig_w = grid_w + (80 if colorbar else 0)  # the bar, its ticks and its label
    fig_h = head + rows * (label + cell_h) + (rows - 1) * gap
    if fig_w > COLUMN_INCHES * DPI:
        raise ValueError(
            f"{columns} images of {width} px at scale {scale} make a {fig_w} px wide "
            f"figure, wider than the column ({COLUMN_INCHES * DPI:.0f} px): use fewer "
            "columns or a smaller scale."
        )
    fig = plt.figure(figsize=(fig_w / DPI, fig_h / DPI), dpi=DPI, layout="none")
    for index, image in enumerate(images):
        row, column = divmod(index, columns)
        left = column * (cell_w + gap)
        top = head + row * (label + cell_h + gap) + label
        ax = fig.add_axes(
            (left / fig_w, 1 - (top + cell_h) / fig_h, cell_w / fig_w, cell_h / fig_h)
        )
        shown = ax.imshow(
            image, cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest"
        )
        ax.set_axis_off()
        if titles is not None:
            ax.set_title(titles[index], fontsize=10, pad=3)
    if colorbar:
        bar_h = fig_h - head - label  # from the bottom row to the top row's images
        bar = fig.add_axes(((grid_w + 14) / fig_w, 0, 12 / fig_w, bar_h / fig_h))
        fig.colorbar(shown, cax=bar, label=colorbar)
    if title:
        fig.suptitle(title, y=1 - 4 / fig_h, va="top")
    return fig


@dataclass(frozen=True)
class Table:
    """A data frame in the book's table style: HTML in a notebook, plain text elsewhere."""

    html: str
    text: str

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return self.text


def table(frame: pd.DataFrame, digits: int = 1, thousands: str = ",") -> Table:
    """``frame`` in the book's table style: no index column, floats to ``digits`` places.

    Numbers are grouped by ``thousands`` ("," or "" for none, e.g. for years).

    The rendered book's CSS (``book.css``, ``table.book-table``) pads the cells,
    right-aligns numbers and rules the header. Keep a meaningful index as a column:
    ``table(frame.reset_index())``.
    """
    html = (
        frame.style.hide(axis="index")
        .format(precision=digits, thousands=thousands)
        .to_html(exclude_styles=True)  # no random ids or empty <style> block
        .replace("<table>", '<table class="book-table">', 1)
    )
    text = frame.to_string(
        index=False,
        float_format=lambda x: f"{x:{thousands}.{digits}f}",
    )
    return Table(html=html, text=text)
