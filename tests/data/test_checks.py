"""going_modular.data.checks: the package's one set of argument checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from going_modular.data import checks
from going_modular.models import checks as model_checks


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: checks.check_sizes(batch_size=0),
            "batch_size must be a positive integer, got 0",
        ),
        (lambda: checks.check_sizes(n=True), "n must be a positive integer, got True"),
        (lambda: checks.check_sizes(n=2.0), "n must be a positive integer, got 2.0"),
        (
            lambda: checks.check_sizes(0, padding=-1),
            "padding must be an integer >= 0, got -1",
        ),
        (
            lambda: checks.check_positive(lr=math.nan),
            "lr must be a positive number, got nan",
        ),
        (lambda: checks.check_positive(lr=0), "lr must be a positive number, got 0"),
        (
            lambda: checks.check_non_negative(wd=-0.1),
            r"wd must be a number >= 0, got -0.1",
        ),
        (lambda: checks.check_rates(p=1.0), r"p must be at least 0 and below 1"),
        (
            lambda: checks.check_range("p", 1.5, 0, 1),
            r"p must be a finite number in \[0, 1\], got 1.5",
        ),
        (
            lambda: checks.check_range("s", 1, 0, 1, high_open=True),
            r"s must be a finite number in \[0, 1\), got 1",
        ),
        (
            lambda: checks.check_range("x", math.inf, 0, math.inf),
            r"in \[0, inf\], got inf",
        ),
    ],
)
def test_a_bad_value_is_named_with_its_rule(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_good_values_pass_and_the_first_bad_one_is_named():
    checks.check_sizes(a=1, b=np.int64(3))
    checks.check_sizes(0, padding=0)
    checks.check_positive(lr=1e-9, n=2)
    checks.check_non_negative(wd=0.0)
    checks.check_rates(p=0.0, q=0.99)
    checks.check_range("p", 0, 0, 1)
    with pytest.raises(ValueError, match="^b must"):
        checks.check_sizes(a=1, b=0, c=0)


def test_models_use_the_same_checks():
    assert model_checks.check_sizes is checks.check_sizes
    assert model_checks.check_positive is checks.check_positive
    assert model_checks.check_rates is checks.check_rates
