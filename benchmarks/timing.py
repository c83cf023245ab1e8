"""The benchmarks' timing loop: things compared are timed in alternating order.

On a shared machine the load changes from second to second, so things compared are timed in
alternating order (A, then B, repeat after repeat) and summarised by their median (and best)
run; ratios of those are what a benchmark reports. A model's speed is
:func:`vitbook.training.timing.images_per_second`.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["interleave"]


def interleave(
    runs: dict[str, Callable[[], float]],
    repeats: int,
    *,
    verbose: bool = True,
) -> dict[str, list[float]]:
    """Call each of ``runs`` (each returns a rate) once per repeat, in alternating order;
    return every rate per name."""
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for repeat in range(repeats):
        order = list(runs) if repeat % 2 == 0 else list(reversed(runs))
        for name in order:
            rates[name].append(runs[name]())
        if verbose:
            print(
                f"  repeat {repeat}: "
                + "  ".join(f"{n} {rates[n][-1]:.1f}" for n in runs),
                flush=True,
            )
    return rates
