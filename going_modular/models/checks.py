"""Checks of the models' hyper-parameters, so that a bad value is named when the model is
built, not met later as a ``ZeroDivisionError`` or a "mat1 and mat2" shape error."""

from __future__ import annotations

import math
from numbers import Integral, Real

__all__ = ["check_patch_grid", "check_positive", "check_rates", "check_sizes"]


def check_sizes(minimum: int = 1, **values: object) -> None:
    """Raise ValueError naming the first of ``values`` that is not an integer >= ``minimum``
    (1: sizes, counts; 0: paddings)."""
    for name, value in values.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, Integral)
            or value < minimum
        ):
            kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise ValueError(f"{name} must be {kind}, got {value!r}.")


def check_positive(**values: object) -> None:
    """Raise ValueError naming the first of ``values`` that is not a finite number > 0."""
    for name, value in values.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, Real)
            or not (math.isfinite(value) and value > 0)
        ):
            raise ValueError(f"{name} must be a positive number, got {value!r}.")


def check_rates(**values: object) -> None:
    """Raise ValueError naming the first of ``values`` (a dropout or stochastic-depth
    probability) outside [0, 1): at 1 every unit or residual branch would be dropped."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, Real) or not 0 <= value < 1:
            raise ValueError(
                f"{name} must be at least 0 and below 1 (a probability of dropping), "
                f"got {value!r}."
            )


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
