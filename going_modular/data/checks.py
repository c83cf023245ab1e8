"""The package's one set of argument checks: a bad value is named where it is passed, not
met later as a ``ZeroDivisionError`` or a shape error.

It lives in ``data``, the lowest subpackage, so that every layer can use it: ``data``
itself, ``models`` (:mod:`going_modular.models.checks` adds the patch-grid check),
``training`` and the top-level modules. Each check takes ``name=value`` keywords and raises
ValueError naming the first value that fails, with the rule it breaks.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

__all__ = [
    "check_non_negative",
    "check_positive",
    "check_range",
    "check_rates",
    "check_sizes",
]


def check_sizes(minimum: int = 1, **values: object) -> None:
    """Raise ValueError naming the first of ``values`` that is not an integer >= ``minimum``
    (1: sizes, counts; 0: paddings, worker counts). None is not an integer."""
    for name, value in values.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, Integral)
            or value < minimum
        ):
            kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise ValueError(f"{name} must be {kind}, got {value!r}.")


def _is_real(value: object) -> bool:
    """A finite real number that is not a bool."""
    return (
        not isinstance(value, bool) and isinstance(value, Real) and math.isfinite(value)
    )


def check_positive(**values: object) -> None:
    """Raise ValueError naming the first of ``values`` that is not a finite number > 0."""
    for name, value in values.items():
        if not (_is_real(value) and value > 0):
            raise ValueError(f"{name} must be a positive number, got {value!r}.")


def check_non_negative(**values: object) -> None:
    """Raise ValueError naming the first of ``values`` that is not a finite number >= 0."""
    for name, value in values.items():
        if not (_is_real(value) and value >= 0):
            raise ValueError(f"{name} must be a number >= 0, got {value!r}.")


def check_rates(**values: object) -> None:
    """Raise ValueError naming the first of ``values`` (a dropout or stochastic-depth
    probability) outside [0, 1): at 1 every unit or residual branch would be dropped."""
    for name, value in values.items():
        if not (_is_real(value) and 0 <= value < 1):
            raise ValueError(
                f"{name} must be at least 0 and below 1 (a probability of dropping), "
                f"got {value!r}."
            )


def check_range(
    name: str,
    value: object,
    low: float,
    high: float,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    """Raise ValueError naming ``name`` unless ``value`` is a finite number in the interval
    from ``low`` to ``high`` (closed unless ``low_open``/``high_open``)."""
    inside = _is_real(value) and (
        (low < value if low_open else low <= value)
        and (value < high if high_open else value <= high)
    )
    if not inside:
        interval = (
            f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        )
        raise ValueError(
            f"{name} must be a finite number in {interval}, got {value!r}."
        )
