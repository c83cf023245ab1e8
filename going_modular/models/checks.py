"""Checks of the models' hyper-parameters, so that a bad value is named when the model is
built, not met later as a ``ZeroDivisionError`` or a "mat1 and mat2" shape error.

The general checks live in :mod:`going_modular.data.checks` (the package's one set, at its
lowest layer) and are re-exported here; this module adds the patch-grid check.
"""

from __future__ import annotations

from going_modular.data.checks import check_positive, check_rates, check_sizes

__all__ = ["check_patch_grid", "check_positive", "check_rates", "check_sizes"]


def check_patch_grid(
    img_size: int,
    patch_size: int,
    in_channels: int,
    num_classes: int,
    dim: int,
    depth: int,
    heads: int,
) -> None:
    """Check a patch model's sizes (each a positive integer) and that its patches tile the
    image, naming a size that would."""
    check_sizes(
        img_size=img_size,
        patch_size=patch_size,
        in_channels=in_channels,
        num_classes=num_classes,
        dim=dim,
        depth=depth,
        heads=heads,
    )
    if img_size % patch_size:
        raise ValueError(
            f"Image size {img_size} is not divisible by patch size {patch_size}: choose an "
            f"img_size that is a multiple of {patch_size} "
            f"(e.g. {max(patch_size, img_size // patch_size * patch_size)})."
        )
