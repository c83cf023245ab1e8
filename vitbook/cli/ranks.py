"""Under torchrun: that every process was given the same options, what rank 0 does for
the others (it creates the run folder, prepares the data first), who speaks, and how a
lost process is recognised (:mod:`vitbook.training.distributed` holds the process group
itself)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import TypeVar

import torch.distributed as dist

from vitbook.cli.config import PER_PROCESS, RunConfig, flag, flags
from vitbook.cli.errors import ProcessGroupFailed, UsageError
from vitbook.training import distributed
from vitbook.training.distributed import Distributed

__all__ = [
    "check_on_every_rank",
    "check_same_options",
    "is_main",
    "join",
    "lost_contact",
    "main_first",
    "on_main",
    "share_work",
    "silenced",
    "where",
]

_T = TypeVar("_T")


def join(timeout_s: float) -> Distributed | None:
    """This process's place under torchrun (None without it): a command that torchrun did
    not start is a UsageError, processes that never joined a ProcessGroupFailed."""
    try:
        return distributed.from_environment(timeout_s)
    except distributed.NotLaunched as error:
        raise UsageError(str(error)) from None
    except distributed.NeverJoined as error:
        raise ProcessGroupFailed(f"{error}; --dist-timeout sets the wait") from None


def is_main(ctx: Distributed | None) -> bool:
    """Whether this process writes the run: the only one, or rank 0."""
    return ctx is None or ctx.is_main


def where(ctx: Distributed | None) -> str:
    """Which process says a line: "[rank r of N] " under torchrun, else nothing."""
    return "" if ctx is None else f"[rank {ctx.rank} of {ctx.world_size}] "


def on_main(ctx: Distributed | None, make: Callable[[], _T]) -> _T:
    """``make()`` on rank 0 alone; its result, or the UsageError it raised, on every rank."""
    if ctx is None:
        return make()
    value, refused = None, None
    if ctx.is_main:
        try:
            value = make()
        except UsageError as error:
            refused = error
    value, refused = distributed.broadcast((value, refused), ctx)
    if refused is not None:
        raise refused
    return value


def check_on_every_rank(ctx: Distributed | None, check: Callable[[], None]) -> None:
    """``check()`` on every rank; when it raises a UsageError on any rank, every rank
    raises the first such rank's, together: none is left working (and then stopped by
    torchrun) after another has exited."""
    if ctx is None:
        return check()
    refused = None
    try:
        check()
    except UsageError as error:
        refused = error
    every = distributed.gather(refused, ctx)
    first = next((error for error in every if error is not None), None)
    if first is not None:
        raise first


@contextlib.contextmanager
def main_first(ctx: Distributed | None) -> Iterator[None]:
    """Rank 0 runs the block before the other ranks do (it may download the data)."""
    if not is_main(ctx):
        distributed.barrier()
    yield
    if ctx is not None and ctx.is_main:
        distributed.barrier()


@contextlib.contextmanager
def silenced(quiet: bool, stderr: bool = True) -> Iterator[None]:
    """Within the block, nothing printed on stdout (nor on stderr) when ``quiet``: under
    torchrun, the ranks other than 0 leave the reporting to rank 0."""
    if not quiet:
        yield
        return
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
        with contextlib.redirect_stderr(null) if stderr else contextlib.nullcontext():
            yield


def lost_contact(error: BaseException, ctx: Distributed | None) -> bool:
    """Whether ``error`` is a collective that failed because another rank died or hung
    (NCCL raises a DistError; gloo a RuntimeError from its transport)."""
    if ctx is None:
        return False
    return isinstance(error, dist.DistError) or (
        isinstance(error, RuntimeError) and "gloo" in str(error)
    )


def share_work(config: RunConfig, ctx: Distributed) -> None:
    """Say once how the processes share the work and which learning rate they use."""
    if config.gpu_augment == "on":
        raise UsageError(
            "--gpu-augment on augments whole batches on one device and cannot be "
            "sharded between torchrun's processes: use --gpu-augment off"
        )
    n, batch = ctx.world_size, config.batch_size
    print(
        f"[INFO] Distributed: {n} processes ({ctx.backend} on {ctx.device.type}), "
        f"{batch} images each per step: a global batch of {n * batch}. The learning "
        f"rate {config.lr:g} is used as given, not scaled (the linear-scaling rule "
        f"would use {n} x {config.lr:g} = {n * config.lr:g} for this {n}x larger batch)."
    )


def _said(value: object) -> str:
    """An option's value as the command line gives it."""
    if isinstance(value, bool) or value is None:
        return "given" if value else "not given"
    return str(value)


def _where_each(values: list[object]) -> str:
    """Which rank has which value: "42 on rank 0 but 7 on ranks 1, 2"."""
    ranks_of: dict[object, list[str]] = {}
    for rank, value in enumerate(values):
        ranks_of.setdefault(value, []).append(str(rank))
    return " but ".join(
        f"{_said(value)} on rank{'s' * (len(ranks) > 1)} {', '.join(ranks)}"
        for value, ranks in ranks_of.items()
    )


def check_same_options(config: RunConfig, ctx: Distributed) -> None:
    """Refuse to start (UsageError on every rank) when the processes were not given the
    same options, e.g. a node whose command says another ``--lr`` or ``--seed``; only
    the options of :data:`~vitbook.cli.config.PER_PROCESS` may differ."""
    every = distributed.gather(config.shared(), ctx)
    differ = [
        f"{flag(key)} {_where_each([options[key] for options in every])}"
        for key in every[0]
        if any(options[key] != every[0][key] for options in every)
    ]
    if differ:
        raise UsageError(
            f"the {ctx.world_size} processes were started with different options: "
            f"{'; '.join(differ)}. Give every process the same options (only "
            f"{flags(PER_PROCESS)} may differ)"
        )
