"""Checks of the models' hyper-parameters, so that a bad value is named when the model is
built, not met later as a ``ZeroDivisionError`` or a "mat1 and mat2" shape error."""

from __future__ import annotations

import math
from numbers import Integral, Real

__all__ = ["check_positive", "check_rates", "check_sizes"]


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
