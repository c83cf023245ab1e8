"""Chapter 12's timing: several models timed in alternating order, round after round, and
the ratio of two models' times with its 95% interval.

    times = interleaved_times({"ViT": step_vit, "ViTBN": step_bn}, rounds=10)
    ratio = time_ratio(times["ViT"], times["ViTBN"])  # > 1: ViTBN is faster
    print(ratio)  # 1.03 (95% CI 0.98 to 1.08, 10 rounds)

A change in the machine's load during one round falls on every model of that round, so the
ratio is taken round by round (paired) and its interval comes from Student's t on the
logarithms of the per-round ratios (a ratio's error is multiplicative).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from scipy import stats

__all__ = ["TimeRatio", "interleaved_times", "time_ratio"]


def interleaved_times(
    jobs: Mapping[str, Callable[[], object]],
    rounds: int,
    *,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, list[float]]:
    """Seconds of each ``jobs[name]()`` call, ``rounds`` calls each: in every round each job
    runs once, in the given order in even rounds and in reverse in odd ones (so no job always
    runs first, or right after the same one)."""
    if rounds < 1 or not jobs:
        raise ValueError(
            f"interleaved_times needs jobs and rounds >= 1; got {len(jobs)} jobs, "
            f"rounds={rounds}."
        )
    names = list(jobs)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            start = clock()
            jobs[name]()
            times[name].append(clock() - start)
    return times


@dataclass(frozen=True)
class TimeRatio:
    """The geometric mean over rounds of ``a / b`` and its 95% confidence interval."""

    ratio: float
    low: float
    high: float
    n: int

    def __str__(self) -> str:
        return (
            f"{self.ratio:.2f} (95% CI {self.low:.2f} to {self.high:.2f}, "
            f"{self.n} rounds)"
        )

    def excludes(self, value: float) -> bool:
        """Whether ``value`` lies outside the interval."""
        return not self.low <= value <= self.high


def time_ratio(a: Sequence[float], b: Sequence[float]) -> TimeRatio:
    """``a / b`` paired round by round (times of the same rounds), at least 2 rounds: the
    exponential of the mean log ratio, and of its t-based 95% interval."""
    if len(a) != len(b) or len(a) < 2:
        raise ValueError(
            f"time_ratio needs two equally long lists of at least 2 times; got {len(a)} "
            f"and {len(b)}."
        )
    if min(*a, *b) <= 0:
        raise ValueError("time_ratio needs positive times.")
    logs = [math.log(x / y) for x, y in zip(a, b)]
    n = len(logs)
    mean = sum(logs) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in logs) / (n - 1))
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    return TimeRatio(math.exp(mean), math.exp(mean - half), math.exp(mean + half), n)
