"""The time budget of a run: :attr:`Recipe.time_budget <vitbook.training.recipe.Recipe>`
seconds over the whole run, resumed calls included.

Once it is spent, the current epoch's training ends after the step in progress
(:class:`UntilDeadline`), that epoch is tested and recorded as usual, and no further epoch
starts. The checkpoint records the seconds spent, so a run stopped by its budget continues
with its next epoch when called again with a larger one.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from vitbook.training import distributed as ddp
from vitbook.training.distributed import Distributed

__all__ = ["TimeBudget", "UntilDeadline", "agree"]


def agree(flag: bool, ctx: Distributed | None) -> bool:
    """``flag``, or in a distributed run whether it holds on any process."""
    return flag if ctx is None else ddp.any_rank(flag, ctx)


class TimeBudget:
    """``seconds`` over the whole run: ``spent`` in the calls before a resume (saved in the
    checkpoint), plus this call's. None: no budget."""

    def __init__(self, seconds: float | None, spent: float) -> None:
        self.seconds, self.spent, self.start = seconds, spent, time.perf_counter()
        self.message = f"Time budget of {seconds or 0:.0f} s spent"

    def used(self) -> float:
        return self.spent + time.perf_counter() - self.start

    def deadline(self) -> float:
        return self.start + self.seconds - self.spent

    def over(self) -> bool:
        return self.seconds is not None and self.used() >= self.seconds


class UntilDeadline:
    """Iterate over ``loader`` until ``time.perf_counter()`` passes ``deadline`` (on any
    process, in a distributed run ``ctx``).

    The first batch is always yielded, so an epoch that starts in time trains at least one
    step; ``len()`` is the loader's, for progress bars. ``stopped`` tells whether the
    deadline cut the pass short.
    """

    def __init__(self, loader: Iterable, deadline: float, ctx: Distributed | None):
        self.loader, self.deadline, self.ctx = loader, deadline, ctx
        self.stopped = False

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __iter__(self):
        for i, batch in enumerate(self.loader):
            if i > 0 and agree(time.perf_counter() >= self.deadline, self.ctx):
                self.stopped = True
                return
            yield batch
