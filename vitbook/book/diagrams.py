"""Block diagrams the chapters draw: Figure 1 of the ViT paper and one encoder block.

Both are drawn with matplotlib patches on an ``Axes`` the caller owns, so a chapter sets the
figure size and title and the package keeps the drawing code (chapters 1 and 4, and the
package map of the architecture page).
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.axes import Axes
from matplotlib.patches import Circle, FancyBboxPatch

__all__ = [
    "EQUATION_COLOURS",
    "arrow",
    "box",
    "draw_encoder_block",
    "draw_vit_overview",
]

# Fill colour of a block by the equation of the paper that defines it (23: Eq. 2 and 3).
EQUATION_COLOURS = {
    1: "#d8e8f8",
    2: "#fde2c8",
    3: "#d9f0d3",
    4: "#eadcf5",
    23: "#fbf3c9",
}


def box(
    ax: Axes,
    x: float,
    y: float,
    w: float,
    h: float,
    text: str,
    eq: int | None = None,
    tag: str | None = None,
    fontsize: float = 9.5,
    facecolor: str | None = None,
) -> None:
    """A rounded box centred on (x, y), filled with its equation's colour, ``tag`` above its
    top right corner."""
    ax.add_patch(
        FancyBboxPatch(
            (x - w / 2, y - h / 2),
            w,
            h,
            boxstyle="round,pad=0.02,rounding_size=0.08",
            facecolor=facecolor or EQUATION_COLOURS.get(eq, "#f2f2f2"),
            edgecolor="#333333",
            lw=1.1,
        )
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize)
    if tag:
        ax.text(
            x + w / 2, y + h / 2 + 0.04, tag, ha="right", fontsize=8, color="#555555"
        )


def arrow(
    ax: Axes,
    start: tuple[float, float],
    end: tuple[float, float],
    colour: str = "#333333",
    **kw,
) -> None:
    """An arrow from ``start`` to ``end`` (``kw`` go to matplotlib's ``arrowprops``)."""
    ax.annotate(
        "",
        xy=end,
        xytext=start,
        arrowprops=dict(arrowstyle="-|>", color=colour, lw=1.2, **kw),
    )


def _lane(
    ax: Axes, y: float, blocks: Sequence[tuple], xs: Sequence[float], width: float
) -> None:
    """The top lane of Figure 1: one box per block, its shape below, arrows between."""
    for x, (text, eq, tag, shape) in zip(xs, blocks):
        box(ax, x, y, width, 1.0, text, eq, tag, fontsize=9)
        ax.text(x, y - 0.6, shape, ha="center", va="top", fontsize=8.5, color="#666666")
    for x0, x1 in zip(xs, xs[1:]):
        arrow(ax, (x0 + width / 2, y), (x1 - width / 2, y))


def draw_vit_overview(ax: Axes) -> None:
    """Figure 1 of the paper redrawn left to right, on an 8.2 x 5.1 inch axes: the whole
    model in the top lane (shapes for ViT-B/16 on a 224 x 224 RGB image, 3 classes), one
    encoder layer opened up below, each block coloured by the equation that defines it."""
    ax.set(xlim=(0, 8.2), ylim=(0, 5.1))
    ax.axis("off")
    top, width = 4.25, 1.0
    lane = [
        ("image $x$\n$H \\times W \\times C$", None, None, "224 x 224 x 3"),
        ("$N$ patches,\nflattened:\n$N \\times P^2C$", 1, "Eq. 1", "196 x 768"),
        ("linear\nprojection\n$x_p^i\\,E$: $N \\times D$", 1, "Eq. 1", "196 x 768"),
        (
            "$+\\,x_{class}$,\n$+\\,E_{pos}$\n$z_0$: $(N{+}1) \\times D$",
            1,
            "Eq. 1",
            "197 x 768",
        ),
        ("Transformer\nencoder\n$L$ layers", 23, "Eq. 2, 3", "197 x 768"),
        ("class token\n$z_L^0$, LayerNorm\n$y$: $D$", 4, "Eq. 4", "768"),
        ("head\n(Linear)\n$K$ logits", None, "on $y$", "3"),
    ]
    xs = [0.55 + 1.17 * i for i in range(len(lane))]
    _lane(ax, top, lane, xs, width)

    bot = 1.55
    ax.add_patch(
        FancyBboxPatch(
            (0.08, 0.35),
            8.04,
            2.45,
            boxstyle="round,pad=0.02,rounding_size=0.12",
            facecolor="white",
            edgecolor="#888888",
            linestyle="--",
            lw=1,
        )
    )
    ax.text(
        0.2,
        2.7,
        "encoder layer $\\ell$ (one of $L$; shape in = shape out = $(N{+}1) \\times D$)",
        fontsize=9,
        va="top",
        color="#444444",
    )
    steps = [  # (centre, text, equation, tag, width)
        (0.5, "$z_{\\ell-1}$", None, None, 0.6),
        (1.55, "LayerNorm", 2, "Eq. 2", 0.95),
        (2.85, "multi-head\nself-attention", 2, "Eq. 2", 1.25),
        (3.9, "$+$", None, None, 0.4),
        (4.85, "LayerNorm", 3, "Eq. 3", 0.95),
        (6.15, "MLP\n(Linear, GELU,\nLinear)", 3, "Eq. 3", 1.2),
        (7.2, "$+$", None, None, 0.4),
    ]
    for x, text, eq, tag, w in steps:
        small = w < 0.7
        box(ax, x, bot, w, 0.5 if small else 0.9, text, eq, tag, 11 if small else 9)
    for (x0, *_, w0), (x1, *_, w1) in zip(steps, steps[1:]):
        arrow(ax, (x0 + w0 / 2, bot), (x1 - w1 / 2, bot))
    arrow(ax, (7.4, bot), (7.7, bot))
    ax.text(7.73, bot, "$z_\\ell$", va="center", fontsize=11)
    residuals = [
        (
            0.5,
            3.9,
            "$z'_\\ell = \\mathrm{MSA}(\\mathrm{LN}(z_{\\ell-1})) + z_{\\ell-1}$",
        ),
        (4.1, 7.2, "$z_\\ell = \\mathrm{MLP}(\\mathrm{LN}(z'_\\ell)) + z'_\\ell$"),
    ]
    for x_from, x_to, label in residuals:
        arrow(
            ax,
            (x_from, bot + 0.45),
            (x_to, bot + 0.25),
            colour="#b03a2e",
            connectionstyle="bar,fraction=-0.1",
        )
        ax.text(
            (x_from + x_to) / 2,
            bot - 0.72,
            label,
            ha="center",
            fontsize=9.5,
            color="#b03a2e",
        )
    # Zoom lines from the encoder block to the opened layer.
    ax.plot([xs[4] - width / 2, 0.1], [top - 0.85, 2.82], color="#999999", ls=":", lw=1)
    ax.plot([xs[4] + width / 2, 8.1], [top - 0.85, 2.82], color="#999999", ls=":", lw=1)


def _vertical_arrows(ax: Axes, cx: float, stops: Sequence[tuple[float, float]]) -> None:
    """Arrows up the main path between ``(y, half height)`` stops."""
    for (y1, h1), (y2, h2) in zip(stops, stops[1:]):
        start, end = y1 + h1 + (0.05 if h1 else 0), y2 - h2 - (0.05 if h2 else 0)
        ax.annotate(
            "",
            (cx, end),
            (cx, start),
            arrowprops=dict(arrowstyle="-|>", color="0.2", lw=1.3),
        )


def draw_encoder_block(ax: Axes) -> None:
    """One pre-norm encoder block bottom to top (Equations 2 and 3), the residual
    connections in red, on an axes of about 7.5 x 6.4 inches."""
    x0, w, h = 0.0, 3.0, 0.6
    cx = x0 + w / 2
    boxes = [
        (1.0, "LayerNorm", "#fde2a7"),
        (2.0, "Multi-head\nself-attention", "#a7d3fd"),
        (4.0, "LayerNorm", "#fde2a7"),
        (5.0, "MLP\nLinear, GELU, Linear", "#b9f0b1"),
    ]
    for y, label, colour in boxes:
        ax.add_patch(
            FancyBboxPatch(
                (x0, y - h / 2),
                w,
                h,
                boxstyle="round,pad=0.05",
                facecolor=colour,
                edgecolor="0.3",
            )
        )
        ax.text(cx, y, label, ha="center", va="center", fontsize=10)
    for y in (3.0, 6.0):  # the two additions
        ax.add_patch(Circle((cx, y), 0.18, facecolor="white", edgecolor="0.3"))
        ax.text(cx, y, "+", ha="center", va="center", fontsize=13)
    _vertical_arrows(
        ax,
        cx,
        [
            (0.0, 0),
            (1.0, h / 2),
            (2.0, h / 2),
            (3.0, 0.18),
            (4.0, h / 2),
            (5.0, h / 2),
            (6.0, 0.18),
            (7.0, 0),
        ],
    )
    xr = x0 + w + 0.5
    for y_from, y_to in ((0.45, 3.0), (3.45, 6.0)):  # the residual connections
        ax.plot([cx, xr, xr], [y_from, y_from, y_to], color="C3", lw=1.6)
        ax.annotate(
            "",
            (cx + 0.18, y_to),
            (xr, y_to),
            arrowprops=dict(arrowstyle="-|>", color="C3", lw=1.6),
        )
        ax.text(
            xr + 0.1,
            (y_from + y_to) / 2,
            "residual",
            color="C3",
            rotation=90,
            va="center",
            fontsize=9,
        )
    ax.text(cx, -0.25, r"$z_{\ell-1}$", ha="center", va="top", fontsize=12)
    ax.text(cx - 0.15, 3.45, r"$z'_\ell$", ha="right", va="center", fontsize=12)
    ax.text(cx, 7.1, r"$z_\ell$", ha="center", va="bottom", fontsize=12)
    equations = [
        (
            0.5,
            3.2,
            "Eq. 2\n" r"$z'_\ell = \mathrm{MSA}(\mathrm{LN}(z_{\ell-1})) + z_{\ell-1}$",
        ),
        (
            3.5,
            6.2,
            "Eq. 3\n" r"$z_\ell = \mathrm{MLP}(\mathrm{LN}(z'_\ell)) + z'_\ell$",
        ),
    ]
    for y1, y2, text in equations:
        xb = x0 - 0.5
        ax.plot([xb + 0.1, xb, xb, xb + 0.1], [y1, y1, y2, y2], color="0.4", lw=1)
        ax.text(xb - 0.1, (y1 + y2) / 2, text, ha="right", va="center", fontsize=10)
    ax.set(xlim=(-4.6, 4.2), ylim=(-0.8, 7.7), aspect="equal")
    ax.axis("off")
