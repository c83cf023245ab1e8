"""vitbook.book.style: the book's figure style, figure sizes, image grids and tables."""

from __future__ import annotations

import io
import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from PIL import Image  # noqa: E402

from vitbook.book.style import (
    BOOK_STYLE,
    COLUMN_INCHES,
    figsize,
    show_images,
    table,
    use_book_style,
)

COLUMN_PX = 832  # the rendered book's output column at a 1400 px window


@pytest.fixture(autouse=True)
def book_style():
    with matplotlib.rc_context():
        use_book_style()
        yield
    plt.close("all")


def _saved_png(fig) -> Image.Image:
    """The figure as Jupyter's inline backend stores it (tight bounding box)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight")
    return Image.open(io.BytesIO(buffer.getvalue()))


def test_style_sets_legible_fonts_and_the_column_width():
    assert matplotlib.rcParams["font.size"] >= 11
    assert matplotlib.rcParams["figure.dpi"] == matplotlib.rcParams["savefig.dpi"]
    width, _ = matplotlib.rcParams["figure.figsize"]
    assert width * BOOK_STYLE["figure.dpi"] <= COLUMN_PX
    assert matplotlib.rcParams["image.interpolation"] == "nearest"


def test_a_two_panel_figure_is_stored_no_wider_than_the_column():
    fig, axes = plt.subplots(1, 2, figsize=figsize(2), layout="constrained")
    for ax in axes:
        ax.plot(range(10), label="a fairly long legend entry")
        ax.set(xlabel="a label", ylabel="a longer y label", title="a title")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center")
    assert _saved_png(fig).width <= COLUMN_PX


def test_figsize_stacks_at_most_two_columns_and_fits_the_column():
    assert figsize(2, 3, panel_height=2.5) == (COLUMN_INCHES, 7.5)
    assert figsize(width=5) == (5, 3.2)
    with pytest.raises(ValueError, match="at most 2"):
        figsize(3)
    with pytest.raises(ValueError, match="rows"):
        figsize(1, 0)
    with pytest.raises(ValueError, match="at most the column"):
        figsize(width=COLUMN_INCHES + 1)


def test_show_images_draws_each_pixel_as_a_block_of_scale_pixels():
    checker = np.indices((28, 28)).sum(axis=0) % 2  # alternating pixels: 0, 1, 0, ...
    fig = show_images([checker] * 8, [f"image {k}" for k in range(8)], scale=3)
    png = np.asarray(_saved_png(fig).convert("L"), dtype=float)
    assert png.shape[1] <= COLUMN_PX
    # One row through the first image: runs of 3 equal pixels, alternating.
    rows = [r for r in range(png.shape[0]) if (png[r] < 20).sum() > 100]
    line = png[rows[len(rows) // 2]]
    dark = np.flatnonzero(line < 20)
    start = dark[0] - (3 if line[dark[0] - 3] > 235 else 0)
    block = line[start : start + 3 * 28 : 3]
    assert np.all(line[start : start + 3 * 28].reshape(28, 3).std(axis=1) < 1)
    assert set(np.round(block / 255)) == {0.0, 1.0}


def test_show_images_refuses_a_grid_wider_than_the_column():
    with pytest.raises(ValueError, match="fewer columns or a smaller scale"):
        show_images([np.zeros((28, 28))] * 10, columns=10, scale=4)
    with pytest.raises(ValueError, match="one size"):
        show_images([np.zeros((28, 28)), np.zeros((32, 32))])


def test_table_has_no_index_column_and_rounds_floats():
    frame = pd.DataFrame(
        {"model": ["ViT", "CCT"], "accuracy": [71.234, 80.06], "params": [85_798, 3]},
        index=[7, 8],
    )
    shown = table(frame, digits=1)
    html = shown._repr_html_()
    assert html.startswith('<table class="book-table">')
    assert len(re.findall(r"<th[ >]", html)) == 3  # the column headers, no index
    assert "71.2" in html and "80.1" in html and "85,798" in html
    assert "71.234" not in html and ">7<" not in html
    assert repr(shown).splitlines()[0].split() == ["model", "accuracy", "params"]
