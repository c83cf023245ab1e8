"""Chapter 2's exercises: the cost of attention against the patch size, patching
without a loop or a convolution, the spread of a fresh position embedding's
similarities, and the position embeddings resized for 384-pixel images."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vitbook.book.exercises import Exercise, Mistake

__all__ = ["ex1", "ex2", "ex3", "ex4"]


# Exercise 1 ---------------------------------------------------------------------------


def _attention_entries(image_size: int, patch_size: int) -> int:
    n = (image_size // patch_size) ** 2
    return (n + 1) ** 2


def _check_attention_entries(attention_entries) -> str:
    for size, patch in ((224, 16), (224, 8), (224, 32), (384, 16), (32, 4)):
        n = (size // patch) ** 2
        got = attention_entries(size, patch)
        if got == (n + 1) ** 2:
            continue
        where = f"attention_entries({size}, {patch}) = {got}"
        if got == n * n:
            raise Mistake(
                f"{where} counts the {n} patches only: the class token is a token too, "
                "so the sequence is N + 1 long."
            )
        if got in (n, n + 1):
            raise Mistake(
                f"{where} is a number of tokens: attention compares every token with "
                "every token, so one head's matrix has one entry per pair of tokens."
            )
        raise Mistake(f"{where}, expected {(n + 1) ** 2:,}.")
    return "one head's attention matrix, class token included."


ex1 = Exercise(
    title="Patch size and the cost of attention",
    checker=_check_attention_entries,
    hint_text=(
        "First the number of patches, N = HW / P^2 (the image is square here). Then "
        "the sequence the encoder reads, and how many pairs of its tokens attention "
        "compares."
    ),
    solution_code="""
def attention_entries(image_size, patch_size):
    n = (image_size // patch_size) ** 2  # N patches
    return (n + 1) ** 2  # the class token too; every token with every token


for patch in (32, 16, 8):
    ratio = attention_entries(224, patch) / attention_entries(224, 16)
    print(f"P={patch}: {attention_entries(224, patch):,} entries, {ratio:.2f}x P=16")
""",
    explanation=(
        "A 224-pixel image gives N = 49, 196 and 784 patches for P = 32, 16 and 8, so "
        "sequences of 50, 197 and 785 tokens. One head's attention matrix has one "
        "entry per pair of tokens: 2,500, 38,809 and 616,225. Halving the patch size "
        "quadruples N and multiplies the entries by about 16 (15.9 with the class "
        "token); doubling it divides them by about 16 (15.5)."
    ),
    reference=lambda: (_attention_entries,),
    mistakes=[
        (lambda: (lambda size, patch: ((size // patch) ** 2) ** 2,), "class token"),
        (lambda: (lambda size, patch: (size // patch) ** 2 + 1,), "number of tokens"),
    ],
)


# Exercise 2 ---------------------------------------------------------------------------


class _NotToBeCalled(nn.Conv2d):
    """A convolution whose weight and bias may be read, but which may not be run."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise Mistake(
            "the answer runs the convolution: use only its weight and bias, with "
            "F.unfold (or Tensor.unfold) and a matrix product."
        )


def _embed_without_conv(images: torch.Tensor, conv: nn.Conv2d) -> torch.Tensor:
    p = conv.kernel_size[0]
    blocks = F.unfold(images, kernel_size=p, stride=p).transpose(1, 2)  # (B, N, C*P*P)
    weight = conv.weight.reshape(conv.out_channels, -1)  # (D, C*P*P), channel first
    return blocks @ weight.T + conv.bias


def _embeddings(images: torch.Tensor, conv: nn.Conv2d) -> torch.Tensor:
    return F.conv2d(images, conv.weight, conv.bias, stride=conv.stride)


def _check_embed_without_conv(embed_without_conv) -> str:
    torch.manual_seed(0)
    conv = _NotToBeCalled(3, 8, kernel_size=4, stride=4)
    images = torch.rand(2, 3, 8, 12)  # a 2 x 3 grid of patches: rows != columns
    with torch.no_grad():
        maps = _embeddings(images, conv)  # (B, D, 2, 3)
        expected = maps.flatten(2).transpose(1, 2)  # (B, N, D), row by row
        got = embed_without_conv(images, conv)
    if not isinstance(got, torch.Tensor):
        raise Mistake(f"return a tensor, not a {type(got).__name__}.")
    got = got.detach()
    if got.shape == (2, 8, 6):
        raise Mistake(
            f"shape {tuple(got.shape)} is (B, D, N): transpose it to (B, N, D), one "
            "row per patch."
        )
    if got.shape != expected.shape:
        raise Mistake(f"shape {tuple(got.shape)}, expected (B, N, D) = (2, 6, 8).")
    if torch.allclose(got, expected - conv.bias.detach(), atol=1e-5):
        raise Mistake("the bias is missing: Conv2d adds conv.bias to every patch.")
    by_columns = maps.transpose(2, 3).flatten(2).transpose(1, 2)
    if torch.allclose(got, by_columns, atol=1e-5):
        raise Mistake(
            "the patches come column by column: the convolution (and the loop) orders "
            "them row by row."
        )
    if not torch.allclose(got, expected, atol=1e-5):
        raise Mistake(
            "the values differ from the convolution's: flatten each patch channel "
            "first, (C, P, P), as conv.weight.reshape(D, -1) is laid out."
        )
    return "the convolution's patch embeddings, without the convolution."


def _pixel_first(images: torch.Tensor, conv: nn.Conv2d) -> torch.Tensor:
    p = conv.kernel_size[0]
    patches = images.unfold(2, p, p).unfold(3, p, p)  # (B, C, gh, gw, P, P)
    batch, channels, rows, cols = patches.shape[:4]
    patches = patches.permute(0, 2, 3, 4, 5, 1)  # (B, gh, gw, P, P, C): pixel first
    patches = patches.reshape(batch, rows * cols, p * p * channels)
    return patches @ conv.weight.reshape(conv.out_channels, -1).T + conv.bias


ex2 = Exercise(
    title="Patching without a loop or a convolution",
    checker=_check_embed_without_conv,
    hint_text=(
        "F.unfold(images, kernel_size=P, stride=P) gives (B, C*P*P, N): each column is "
        "one patch, flattened channel first, in the loop's order. Turn it into one row "
        "per patch, then multiply by the transpose of the weight reshaped to (D, "
        "C*P*P) and add the bias."
    ),
    solution_code="""
def embed_without_conv(images, conv):
    p = conv.kernel_size[0]  # the patch size
    blocks = F.unfold(images, kernel_size=p, stride=p)  # (B, C*P*P, N)
    rows = blocks.transpose(1, 2)  # (B, N, C*P*P): one row per patch
    weight = conv.weight.reshape(conv.out_channels, -1)  # (D, C*P*P), channel first
    return rows @ weight.T + conv.bias  # (B, N, D)
""",
    explanation=(
        "F.unfold cuts the same patches as the loop, in the same order (row by row) "
        "and flattened the same way (channel first), so its blocks are exactly the "
        "loop's x_p: cutting only moves numbers. The projection is then the Linear "
        "layer of the chapter with the convolution's kernels as rows of its weight; it "
        "adds the same products as the convolution in another order, so the two agree "
        "up to rounding (compare with torch.testing.assert_close, not torch.equal)."
    ),
    reference=lambda: (_embed_without_conv,),
    mistakes=[
        (
            lambda: (
                lambda images, conv: _embed_without_conv(images, conv) - conv.bias,
            ),
            "bias is missing",
        ),
        (
            lambda: (
                lambda images, conv: _embed_without_conv(images, conv).transpose(1, 2),
            ),
            "(B, D, N)",
        ),
        (lambda: (_pixel_first,), "channel first"),
        (
            lambda: (lambda images, conv: conv(images).flatten(2).transpose(1, 2),),
            "runs the convolution",
        ),
    ],
)


# Exercise 3 ---------------------------------------------------------------------------

_WIDTHS = (16, 64, 256, 768, 1024)


def _check_cosine_spread(cosine_spread) -> str:
    said = {dim: float(cosine_spread(dim)) for dim in _WIDTHS}
    if all(abs(value) < 1e-3 for value in said.values()):
        raise Mistake(
            "about 0 is the mean of the similarities, not their spread (their standard "
            "deviation)."
        )
    if said[16] == said[1024]:
        raise Mistake(
            f"your spread is {said[16]:.3g} at every width D. The initialisation's "
            "0.02 cancels (cosine similarity divides by both lengths), but the "
            "measured spread shrinks as D grows: 4x from D = 64 to D = 1024."
        )
    for dim, value in said.items():
        true = dim**-0.5
        if abs(value - true) > 0.1 * true:
            shrink = said[64] / said[1024] if said[1024] else float("inf")
            raise Mistake(
                f"cosine_spread({dim}) = {value:.4g}, the similarities' spread is "
                f"{true:.4g}. Yours shrinks {shrink:.3g}x from D = 64 to D = 1024, "
                "the measured one 4x."
            )
    return "the spread of the similarities is 1/sqrt(D)."


ex3 = Exercise(
    title="How far from zero is 'no information'?",
    checker=_check_cosine_spread,
    hint_text=(
        "Read the measured spreads in pairs: each time D grows 4x, by how much does the "
        "spread shrink? If it shrinks by the same factor every time, it is a power of "
        "D: which power of 4 is that factor?"
    ),
    solution_code="""
def cosine_spread(dim):
    return dim**-0.5  # 1 / sqrt(D): 0.036 for ViT-B's D = 768
""",
    explanation=(
        "The 196 patch rows of a fresh table (the class token's row aside) are "
        "independent random draws of D numbers. The cosine similarity of two such "
        "vectors is their dot product divided by both lengths, so the 0.02 of the "
        "initialisation cancels. The dot product is a sum of D independent products of "
        "mean 0, so it scatters around 0 by sqrt(D) times the spread of one product, "
        "while the two lengths multiply to about D times 0.02^2: the similarity has "
        "mean 0 and spread sqrt(D) / D = 1/sqrt(D), 0.036 for D = 768. Two random "
        "vectors in many dimensions are nearly orthogonal. Neighbouring patches are no "
        "more similar than distant ones, so a fresh table says only 'these positions "
        "are different', not 'these two are close'; as the paper puts it (section 3.1, "
        "Inductive bias), at initialisation the position embeddings carry no "
        "information about the 2D positions of the patches. The row, column and "
        "distance structure of its Figure 7 has to be learned from data, which is one "
        "more thing a ViT must learn that a CNN gets for free."
    ),
    reference=lambda: (lambda dim: dim**-0.5,),
    mistakes=[
        (lambda: (lambda dim: 0.02,), "0.02 cancels"),
        (lambda: (lambda dim: 1 / dim,), "shrinks 16x"),
        (lambda: (lambda dim: 0.0,), "the mean"),
    ],
)


# Exercise 4 ---------------------------------------------------------------------------


def _resize_pos_embed(pos_embed: torch.Tensor, new_grid: int) -> torch.Tensor:
    cls_row, patch_rows = pos_embed[:, :1], pos_embed[:, 1:]
    old_grid = int(patch_rows.shape[1] ** 0.5)
    dim = patch_rows.shape[-1]
    grid = patch_rows.reshape(1, old_grid, old_grid, dim).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, size=(new_grid, new_grid), mode="bicubic")
    patch_rows = grid.permute(0, 2, 3, 1).reshape(1, new_grid * new_grid, dim)
    return torch.cat([cls_row, patch_rows], dim=1)


def _row_and_column_probe(grid: int) -> torch.Tensor:
    """A (1, 1 + grid^2, 2) table whose features are each patch's row and column."""
    rows, cols = torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij")
    probe = torch.stack([rows, cols], dim=-1).reshape(1, grid * grid, 2).float()
    return torch.cat([torch.full((1, 1, 2), 7.0), probe], dim=1)


def _on_the_grid(row: torch.Tensor, col: torch.Tensor) -> bool:
    """Whether a resized row feature is constant along each row and varies down the
    columns, and the column feature the other way round."""
    return bool(
        row.diff(dim=1).abs().max() < 1e-4 < row.diff(dim=0).abs().max()
        and col.diff(dim=0).abs().max() < 1e-4 < col.diff(dim=1).abs().max()
    )


def _check_resize_pos_embed(resize_pos_embed) -> str:
    old, new, dim = 4, 6, 5
    torch.manual_seed(0)
    pos_embed = torch.randn(1, 1 + old * old, dim)
    with torch.no_grad():
        resized = resize_pos_embed(pos_embed.clone(), new)
        if resized.shape[1] == new * new:
            raise Mistake(
                f"{new * new} rows: the class token's row is missing; keep it in front "
                f"of the {new}x{new} patch rows."
            )
        if resized.shape != (1, 1 + new * new, dim):
            raise Mistake(
                f"shape {tuple(resized.shape)}, expected (1, 1 + {new}^2, {dim}) = "
                f"(1, {1 + new * new}, {dim})."
            )
        if not torch.allclose(resized[:, 0], pos_embed[:, 0]):
            raise Mistake(
                "the class token's row changed: it has no place on the grid, so keep "
                "it as it is."
            )
        probe = resize_pos_embed(_row_and_column_probe(old), new)[0, 1:]
        row, col = probe.reshape(new, new, 2).unbind(-1)
        if not _on_the_grid(row, col):
            if _on_the_grid(col, row):
                raise Mistake(
                    "rows and columns are swapped: a patch's row index should stay "
                    "constant along each row of the new grid. Reshape to (1, g, g, D), "
                    "then permute to (1, D, g, g)."
                )
            raise Mistake(
                "the grid is scrambled: a patch's row index should stay constant along "
                "each row of the new grid. Interpolate the patch rows on their 2-D "
                "grid, as an image with D channels, not along the sequence."
            )
        same = resize_pos_embed(pos_embed.clone(), old)
    if not torch.allclose(same, pos_embed, atol=1e-5):
        raise Mistake(
            "resized to its own 4x4 grid, the table should come back unchanged "
            "(interpolate with align_corners=False)."
        )
    return "the class token's row kept, the patch rows resized on their 2-D grid."


def _interpolated_along_the_sequence(pos_embed, new_grid):
    rows = pos_embed.transpose(1, 2)  # (1, D, 1 + g^2): all rows as one 1-D signal
    rows = F.interpolate(rows, size=1 + new_grid**2, mode="linear")
    return rows.transpose(1, 2)


def _swapped(pos_embed, new_grid):
    return _row_and_column_swap(_resize_pos_embed(pos_embed, new_grid))


def _row_and_column_swap(pos_embed):
    cls_row, patch_rows = pos_embed[:, :1], pos_embed[:, 1:]
    grid = int(patch_rows.shape[1] ** 0.5)
    patch_rows = patch_rows.reshape(1, grid, grid, -1).transpose(1, 2)
    return torch.cat([cls_row, patch_rows.reshape(1, grid * grid, -1)], dim=1)


ex4 = Exercise(
    title="Fine-tuning at 384 pixels",
    checker=_check_resize_pos_embed,
    hint_text=(
        "Split off the class token's row (pos_embed[:, :1]). Reshape the other rows to "
        "(1, g, g, D) and permute to (1, D, g, g): an image with D channels, which "
        "F.interpolate(..., size=(new_grid, new_grid), mode='bicubic') resizes. "
        "Permute and reshape back, and put the class token's row in front again."
    ),
    solution_code="""
def resize_pos_embed(pos_embed, new_grid):
    cls_row, patch_rows = pos_embed[:, :1], pos_embed[:, 1:]
    old_grid = int(patch_rows.shape[1] ** 0.5)
    dim = patch_rows.shape[-1]
    grid = patch_rows.reshape(1, old_grid, old_grid, dim).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, size=(new_grid, new_grid), mode="bicubic")
    patch_rows = grid.permute(0, 2, 3, 1).reshape(1, new_grid * new_grid, dim)
    return torch.cat([cls_row, patch_rows], dim=1)  # the class token has no place
""",
    explanation=(
        "At 384 pixels there are 24 x 24 = 576 patches, so 577 rows. The patch rows "
        "are put back on their 14 x 14 grid, resized to 24 x 24 like an image with 768 "
        "channels, and flattened again, row by row; the class token's row is not tied "
        "to any place in the image, so it is kept as it is. The patch projection E "
        "does not change at all: the patches are still 16 x 16, there are just more of "
        "them. The check also resizes a table to its own grid (it comes back "
        "unchanged) and a table whose two features are each patch's row and column: on "
        "the new grid the row feature stays constant along each row, which a permute "
        "that swapped rows and columns, or an interpolation along the flat sequence, "
        "would break."
    ),
    reference=lambda: (_resize_pos_embed,),
    mistakes=[
        (lambda: (lambda pos, grid: _resize_pos_embed(pos, grid)[:, 1:],), "missing"),
        (lambda: (_interpolated_along_the_sequence,), "scrambled"),
        (lambda: (_swapped,), "swapped"),
    ],
)
