"""A stop (Ctrl-C, SIGTERM, SIGHUP) or a failure during a run: what is kept of the run (on
rank 0) and the one line said instead of a traceback."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from vitbook.cli import ranks
from vitbook.cli.errors import (
    FAILURES,
    ProcessGroupFailed,
    TrainingFailed,
    TrainingInterrupted,
)
from vitbook.training import distributed, runs
from vitbook.training.distributed import Distributed
from vitbook.training.divergence import TrainingDiverged

__all__ = ["kept_if_stopped"]


def _stopped_elsewhere(error: BaseException, ctx: Distributed) -> BaseException:
    """What a rank other than 0 raises when a stop or a failure ends its part: nothing to
    say for a stop or a divergence (rank 0 keeps the run and reports), one line naming the
    rank for its own failure."""
    if isinstance(error, KeyboardInterrupt):
        return TrainingInterrupted("", runs.exit_code(error))
    if isinstance(error, TrainingDiverged):  # every rank stopped at the same step
        return TrainingFailed("")
    if isinstance(error, FAILURES):
        return TrainingFailed(f"{ranks.where(ctx)}{runs.describe_error(error)}")
    return error


def _stopped(
    current: runs.Run, error: BaseException, ctx: Distributed | None = None
) -> BaseException:
    """Keep what ``error`` left of the run (:meth:`~vitbook.training.runs.Run.keep_stopped`,
    on rank 0); return what to raise instead: one line for a stop or a known failure (a lost
    process among them), else ``error``."""
    if ranks.lost_contact(error, ctx):
        first_line = str(error).strip().splitlines()[0].split(". ")[0][:160]
        error = ProcessGroupFailed(
            f"{ranks.where(ctx)}Lost contact with another process: it ended, or did not "
            f"answer within --dist-timeout ({first_line}). torchrun's summary names "
            "the rank that failed first."
        )
    together = ctx is not None and isinstance(error, TrainingDiverged)  # same step
    if not ranks.is_main(ctx):
        if together:
            distributed.barrier()  # exit after rank 0 has kept the run
        return _stopped_elsewhere(error, ctx)
    # under torchrun, another rank's exit brings a SIGTERM: it waits for the keeping
    with runs.signals_held() if ctx is not None else contextlib.nullcontext():
        record, kept, from_checkpoint = current.keep_stopped(error)
    if together:
        distributed.barrier()
    epochs = record["epochs_completed"]
    launcher = (
        "python" if ctx is None else f"torchrun --nproc_per_node={ctx.world_size}"
    )
    resume = f" Continue with: {launcher} -m vitbook.train --resume {current.dir}"
    interrupted = isinstance(error, KeyboardInterrupt)
    if (
        not (from_checkpoint and epochs)
        or (not interrupted and isinstance(error, TrainingDiverged))
        or not current.in_place()
    ):  # nothing to continue, the same options would diverge again, or moved
        resume = ""
    if interrupted:
        if not from_checkpoint:  # the checkpoint is lost: where the run was is unknown
            when = "Interrupted"
        elif epochs:
            when = f"Interrupted during epoch {epochs + 1}"
        else:
            when = "Interrupted before an epoch was complete"
        return TrainingInterrupted(f"{when}: {kept}.{resume}", runs.exit_code(error))
    if isinstance(error, FAILURES):
        return TrainingFailed(f"{record['error']} {kept[0].upper()}{kept[1:]}.{resume}")
    return error


@contextlib.contextmanager
def kept_if_stopped(
    current: runs.Run, ctx: Distributed | None = None
) -> Iterator[None]:
    """Within the block, a stop or a failure keeps what the run has done (:func:`_stopped`)."""
    try:
        yield
    except BaseException as error:
        stop = _stopped(current, error, ctx)
        if stop is error:
            raise
        raise stop from None
