"""vitbook.book.diagrams: the block diagrams of chapters 1 and 4."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from vitbook.book.diagrams import (
    EQUATION_COLOURS,
    draw_encoder_block,
    draw_vit_overview,
)


@pytest.mark.parametrize(
    "draw, boxes", [(draw_vit_overview, 7 + 7 + 1), (draw_encoder_block, 4 + 2)]
)
def test_diagrams_draw_every_block_inside_the_axes(draw, boxes):
    fig, ax = plt.subplots()
    draw(ax)
    assert len(ax.patches) == boxes
    x0, x1 = ax.get_xlim()
    y0, y1 = ax.get_ylim()
    for patch in ax.patches:
        box = patch.get_extents().transformed(ax.transData.inverted())
        assert x0 <= box.x0 and box.x1 <= x1 and y0 <= box.y0 and box.y1 <= y1
    plt.close(fig)


def test_overview_colours_blocks_by_their_equation():
    fig, ax = plt.subplots()
    draw_vit_overview(ax)
    colours = {matplotlib.colors.to_hex(p.get_facecolor()) for p in ax.patches}
    assert {EQUATION_COLOURS[eq] for eq in (1, 2, 3, 4, 23)} <= colours
    plt.close(fig)
