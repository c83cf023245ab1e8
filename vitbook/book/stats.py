"""Claims that compare runs, checked the way their sentences read.

Every helper here is built on :func:`~vitbook.book.settings.claim`: it prints
``Checked: <sentence> [<the numbers it used>]`` when the sentence holds, and otherwise
stops the chapter in the cpu, gpu and full settings (only reports it in the quick setting
and a dry run). Each returns whether the sentence held.

* "A beats B" (:func:`claim_beats`, :func:`claim_larger`) holds only when a two-sided
  paired t-test (``scipy.stats.ttest_rel``) over the seeds rejects equal means at 5% and
  the mean of the paired differences ``a[i] - b[i]`` (run ``i`` of both with seed ``i``)
  is above zero (above ``margin``): its 95% confidence interval lies above it. "No
  difference / within the noise" (:func:`claim_within_noise`) holds when that interval
  holds zero. Either needs at least :data:`MIN_SEEDS` seeds: with fewer, a test has too
  little power to conclude anything, and the claim does not hold.
* "above the baseline" (:func:`claim_above`): every seed's value above a fixed number,
  such as logistic regression's accuracy on the same images.
* "falls like 1/sqrt(n)" (:func:`claim_slope`): the least-squares slope of log y against
  log x within ``tol`` of ``expected``; "grows with depth" (:func:`claim_trend`): every step
  (or, with ``all_steps=False``, the majority of pairs: Kendall's tau) in that direction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats as scipy_stats

from vitbook.book.settings import claim

__all__ = [
    "MIN_SEEDS",
    "PairedDifference",
    "PairedTTest",
    "claim_above",
    "claim_beats",
    "claim_larger",
    "claim_order",
    "claim_slope",
    "claim_trend",
    "claim_within_noise",
    "kendall_tau",
    "log_log_slope",
    "paired_difference",
    "paired_t_test",
]

MIN_SEEDS = 5  # the fewest seeds a comparison concludes from


@dataclass(frozen=True)
class PairedDifference:
    """The mean of ``a[i] - b[i]`` over ``n`` seeds, its standard error and ``t = mean/se``.

    ``t`` is infinite when every difference is the same nonzero number (``se == 0``), and 0
    when every difference is 0.
    """

    mean: float
    se: float
    n: int

    @property
    def t(self) -> float:
        if self.se > 0:
            return self.mean / self.se
        return 0.0 if self.mean == 0 else math.copysign(math.inf, self.mean)

    def describe(self, unit: str = "points", digits: int = 2) -> str:
        """``+1.23 ± 0.31 points (paired, n=3, 2 SE = 0.62)``."""
        unit = f" {unit}" if unit else ""
        return (
            f"{self.mean:+.{digits}f} ± {self.se:.{digits}f}{unit} "
            f"(paired, n={self.n}, 2 SE = {2 * self.se:.{digits}f})"
        )

    def __str__(self) -> str:
        return self.describe()


def _floats(values: Sequence[float], name: str) -> list[float]:
    out = [float(v) for v in values]
    if not all(math.isfinite(v) for v in out):
        raise ValueError(f"{name} holds a value that is not a finite number: {out}")
    return out


def _pair(a: Sequence[float], b: Sequence[float]) -> list[float]:
    a, b = _floats(a, "a"), _floats(b, "b")
    if len(a) != len(b):
        raise ValueError(
            f"paired results need one value per seed on both sides: "
            f"a has {len(a)}, b has {len(b)}"
        )
    if not a:
        raise ValueError("paired results need at least one seed; got none")
    return [x - y for x, y in zip(a, b)]


def paired_difference(a: Sequence[float], b: Sequence[float]) -> PairedDifference:
    """The mean paired difference ``a - b`` over seeds, with its standard error.

    ``a[i]`` and ``b[i]`` are the results of the two settings with the same seed ``i``.
    Needs at least two seeds (a standard error needs two) and as many values in ``a`` as
    in ``b``; raises ValueError otherwise.
    """
    diffs = _pair(a, b)
    n = len(diffs)
    if n < 2:
        raise ValueError(
            f"a paired difference needs at least 2 seeds for its standard error; got {n}"
        )
    mean = sum(diffs) / n
    variance = sum((d - mean) ** 2 for d in diffs) / (n - 1)
    return PairedDifference(mean=mean, se=math.sqrt(variance / n), n=n)


@dataclass(frozen=True)
class PairedTTest:
    """A two-sided paired t-test of ``a[i] - b[i]`` over ``n`` seeds: the mean difference,
    its 95% confidence interval ``[low, high]``, ``t`` and the p-value ``p``."""

    mean: float
    low: float
    high: float
    t: float
    p: float
    n: int

    def describe(self, unit: str = "points", digits: int = 2) -> str:
        """``+2.00 points, 95% CI [-0.48, +4.48], t = 3.46, p = 0.074 (paired t-test,
        n=3)``."""
        unit = f" {unit}" if unit else ""
        return (
            f"{self.mean:+.{digits}f}{unit}, 95% CI [{self.low:+.{digits}f}, "
            f"{self.high:+.{digits}f}], t = {self.t:.2f}, p = {self.p:.2g} "
            f"(paired t-test, n={self.n})"
        )


def paired_t_test(a: Sequence[float], b: Sequence[float]) -> PairedTTest:
    """Two-sided paired t-test of ``a - b`` (``scipy.stats.ttest_rel``), at least 2 seeds.

    When every difference is the same number there is no spread: ``p`` is 0 for a
    nonzero difference and 1 for none, and the interval is that number.
    """
    diffs = paired_difference(a, b)  # checks the lengths, finite values and n >= 2
    if diffs.se == 0:
        p = 1.0 if diffs.mean == 0 else 0.0
        return PairedTTest(diffs.mean, diffs.mean, diffs.mean, diffs.t, p, diffs.n)
    result = scipy_stats.ttest_rel(a, b)
    interval = result.confidence_interval(0.95)
    return PairedTTest(
        mean=diffs.mean,
        low=float(interval.low),
        high=float(interval.high),
        t=float(result.statistic),
        p=float(result.pvalue),
        n=diffs.n,
    )


def _with(sentence: str, numbers: str) -> str:
    return f"{sentence} [{numbers}]"


def _too_few(sentence: str, a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether there are fewer than :data:`MIN_SEEDS` pairs; if so the claim is reported
    as not holding, with the reason."""
    n = len(_pair(a, b))
    if n >= MIN_SEEDS:
        return False
    claim(_with(sentence, f"n={n}: fewer than {MIN_SEEDS} seeds, no verdict"), False)
    return True


def claim_beats(
    sentence: str,
    a: Sequence[float],
    b: Sequence[float],
    *,
    margin: float = 0.0,
    alpha: float = 0.05,
    unit: str = "points",
    digits: int = 2,
) -> bool:
    """Check "A beats B (by more than ``margin``)" on per-seed paired results: a
    two-sided paired t-test of ``a - b - margin`` rejects zero at level ``alpha`` and the
    mean is positive (the 95% interval lies above ``margin``). Needs :data:`MIN_SEEDS`
    seeds."""
    if _too_few(sentence, a, b):
        return False
    test = paired_t_test([x - margin for x in _floats(a, "a")], b)
    numbers = test.describe(unit, digits)
    if margin:
        numbers += f", over a margin of {margin:.{digits}f}"
    holds = test.p < alpha and test.mean > 0
    claim(_with(sentence, numbers), holds)
    return holds


claim_larger = claim_beats  # "A is larger than B": the same test, in other words


def claim_within_noise(
    sentence: str,
    a: Sequence[float],
    b: Sequence[float],
    *,
    unit: str = "points",
    digits: int = 2,
) -> bool:
    """Check "A and B do not differ / the change is within the noise" on paired results:
    the paired t-test's 95% interval of ``a - b`` holds zero (p >= 0.05). Needs
    :data:`MIN_SEEDS` seeds."""
    if _too_few(sentence, a, b):
        return False
    test = paired_t_test(a, b)
    holds = test.p >= 0.05
    claim(_with(sentence, test.describe(unit, digits)), holds)
    return holds


def claim_order(
    a_label: str,
    a: Sequence[float],
    b_label: str,
    b: Sequence[float],
    *,
    unit: str = "points",
    digits: int = 2,
) -> str:
    """How A stands against B on paired results, in words the prose can quote, checked.

    ``"beats"`` when the paired t-test rejects at 5% with a positive mean, ``"trails"``
    when it rejects with a negative one, else ``"is within the noise of"``; the check
    printed (:func:`claim_beats` or :func:`claim_within_noise`) states the outcome chosen,
    with its numbers, so a sentence built from the words says what the data say. With
    fewer than :data:`MIN_SEEDS` seeds: ``"is not separable from"``.
    """
    if _too_few(f"{a_label} against {b_label}", a, b):
        return "is not separable from"
    test = paired_t_test(a, b)
    if test.p < 0.05 and test.mean > 0:
        claim_beats(f"{a_label} beats {b_label}", a, b, unit=unit, digits=digits)
        return "beats"
    if test.p < 0.05:
        claim_beats(f"{b_label} beats {a_label}", b, a, unit=unit, digits=digits)
        return "trails"
    claim_within_noise(
        f"{a_label} and {b_label} are within the noise", a, b, unit=unit, digits=digits
    )
    return "is within the noise of"


def claim_above(
    sentence: str,
    values: Sequence[float],
    baseline: float,
    *,
    unit: str = "points",
    digits: int = 2,
) -> bool:
    """Check "every seed is above ``baseline``" (a fixed number, e.g. logistic
    regression's accuracy on the same test images), reporting the smallest margin."""
    values = _floats(values, "values")
    if not values:
        raise ValueError("claim_above needs at least one value; got none")
    smallest = min(values) - baseline
    unit = f" {unit}" if unit else ""
    numbers = (
        f"smallest margin {smallest:+.{digits}f}{unit} over {baseline:.{digits}f}, "
        f"n={len(values)}"
    )
    holds = smallest > 0
    claim(_with(sentence, numbers), holds)
    return holds


def _points(
    x: Sequence[float], y: Sequence[float], what: str
) -> tuple[list[float], list[float]]:
    """``x`` and ``y`` as finite floats, as many of each and at least two points."""
    x, y = _floats(x, "x"), _floats(y, "y")
    if len(x) != len(y):
        raise ValueError(f"x has {len(x)} values, y has {len(y)}")
    if len(x) < 2:
        raise ValueError(f"{what} needs at least 2 points; got {len(x)}")
    return x, y


def log_log_slope(x: Sequence[float], y: Sequence[float]) -> float:
    """The least-squares slope of ``log y`` against ``log x`` (every value positive)."""
    x, y = _points(x, y, "a slope")
    if min(x) <= 0 or min(y) <= 0:
        raise ValueError("a log-log slope needs positive x and y")
    lx, ly = [math.log(v) for v in x], [math.log(v) for v in y]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    sxx = sum((u - mx) ** 2 for u in lx)
    if sxx == 0:
        raise ValueError("a slope needs at least two different x values")
    return sum((u - mx) * (v - my) for u, v in zip(lx, ly)) / sxx


def claim_slope(
    sentence: str,
    x: Sequence[float],
    y: Sequence[float],
    *,
    expected: float,
    tol: float,
) -> bool:
    """Check "y falls like 1/sqrt(x)" (``expected=-0.5``) and the like: the log-log
    least-squares slope within ``tol`` of ``expected``."""
    slope = log_log_slope(x, y)
    holds = abs(slope - expected) <= tol
    numbers = (
        f"log-log slope {slope:+.2f}, expected {expected:+.2f} ± {tol:.2f}, "
        f"{len(x)} points"
    )
    claim(_with(sentence, numbers), holds)
    return holds


def kendall_tau(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-a: (concordant - discordant pairs) / all pairs, from -1 to 1."""
    x, y = _points(x, y, "a trend")
    n = len(x)
    score = sum(
        _sign(x[j] - x[i]) * _sign(y[j] - y[i])
        for i in range(n)
        for j in range(i + 1, n)
    )
    return score / (n * (n - 1) / 2)


def _sign(value: float) -> int:
    return (value > 0) - (value < 0)


def claim_trend(
    sentence: str,
    x: Sequence[float],
    y: Sequence[float],
    increasing: bool = True,
    *,
    all_steps: bool = True,
) -> bool:
    """Check "y grows with x" (or falls, ``increasing=False``).

    By default every step between neighbouring x values must go that way (strictly);
    with ``all_steps=False`` it is enough that Kendall's tau has that sign.
    """
    tau = kendall_tau(x, y)
    if len({float(v) for v in x}) != len(x):
        raise ValueError("a trend needs distinct x values")
    order = sorted(range(len(x)), key=lambda i: x[i])
    steps = [y[order[k + 1]] - y[order[k]] for k in range(len(order) - 1)]
    sign = 1 if increasing else -1
    going = sum(_sign(step) == sign for step in steps)
    word = "up" if increasing else "down"
    numbers = f"{going} of {len(steps)} steps {word}; Kendall's tau {tau:+.2f}"
    holds = going == len(steps) if all_steps else sign * tau > 0
    claim(_with(sentence, numbers), holds)
    return holds
