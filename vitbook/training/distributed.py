"""Training on several processes at once: PyTorch's DistributedDataParallel, set up for :func:`fit`.

Each process (a *rank*) holds a copy of the model and trains on its own shard of every
global batch; DDP averages the gradients across ranks during ``backward``, so every copy
takes the same optimizer step. Launch the script with ``torchrun``, which starts the
processes and sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and
``MASTER_PORT``::

    torchrun --standalone --nproc_per_node=2 -m vitbook.train ...

and, in the script::

    ctx = distributed.from_environment()          # None when not under torchrun
    if ctx is not None:
        train_loader = distributed.shard(train_loader, ctx, shuffle=True, seed=42)
    results = fit(model, train_loader, test_loader, recipe, distributed=ctx)
    distributed.shutdown()

What :func:`~vitbook.training.loop.fit` does with a context ``ctx``:

* the model is wrapped in DDP (:func:`wrap`) unless it already is; the device is
  ``ctx.device`` (``cuda:LOCAL_RANK`` with NCCL, or the CPU with gloo);
* the training loader must come from :func:`shard` (a ``DistributedSampler``); each epoch
  calls ``sampler.set_epoch(epoch)``, so every epoch has its own order, the same on all
  ranks (and a resumed run's next epoch has the order it would have had). A global batch
  is ``world_size`` times the loader's ``batch_size``;
* the test set is split without padding, sample ``i`` going to rank ``i % world_size``
  (:func:`eval_shard`), and the per-sample sums of loss and correct predictions are added
  across ranks (:func:`all_sum`): every test sample is counted exactly once;
* the training loss and accuracy reported are likewise the sums over all ranks;
* a NaN or infinite loss on any rank stops every rank at the same step (:func:`any_rank`,
  one small all-reduce per step), and so does a time budget spent on any rank;
* only rank 0 prints, shows progress bars, writes the checkpoint and runs the callbacks
  (which may write files or log); their stop decision is sent to every rank. The
  checkpoint holds every rank's random and batch-transform states (:func:`gather`), so a
  resumed run restores each rank exactly.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Subset
from torch.utils.data.distributed import DistributedSampler

__all__ = [
    "Distributed",
    "NeverJoined",
    "NotLaunched",
    "all_sum",
    "any_rank",
    "barrier",
    "broadcast",
    "eval_shard",
    "from_environment",
    "gather",
    "shard",
    "shutdown",
    "unwrap",
    "wrap",
]


@dataclasses.dataclass(frozen=True)
class Distributed:
    """This process's place in a distributed run."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0, the one that prints and writes files."""
        return self.rank == 0


class NotLaunched(ValueError):
    """``RANK`` and ``WORLD_SIZE`` are set, but not where the processes meet."""


class NeverJoined(TimeoutError):
    """The other processes did not join the process group within the timeout."""


def from_environment(timeout_s: float = 1800.0) -> Distributed | None:
    """Join the process group torchrun describes; None when not launched by torchrun.

    Uses NCCL on CUDA (one GPU per process, ``cuda:LOCAL_RANK``) and gloo on a CPU. A
    collective that waits longer than ``timeout_s`` seconds (a rank that died) raises.
    Raises :class:`NotLaunched` when ``MASTER_ADDR`` or ``MASTER_PORT`` is missing, and
    :class:`NeverJoined` when the other processes do not join within ``timeout_s``.
    """
    if "WORLD_SIZE" not in os.environ or "RANK" not in os.environ:
        return None
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    missing = [
        name for name in ("MASTER_ADDR", "MASTER_PORT") if name not in os.environ
    ]
    if missing and not dist.is_initialized():
        raise NotLaunched(
            f"RANK and WORLD_SIZE are set but {' and '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not: start the command with "
            "torchrun (torchrun --nproc_per_node=N ...), or set MASTER_ADDR and "
            "MASTER_PORT"
        )
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        device, backend = torch.device("cuda", local_rank), "nccl"
        torch.cuda.set_device(device)
    else:
        device, backend = torch.device("cpu"), "gloo"
    if not dist.is_initialized():
        try:
            dist.init_process_group(
                backend,
                rank=rank,
                world_size=world_size,
                timeout=datetime.timedelta(seconds=timeout_s),
            )
        except dist.DistError as error:
            if "timed out" not in str(error).lower():  # e.g. the port is taken
                raise
            raise NeverJoined(
                f"the other {world_size - 1} process(es) never joined rank {rank} "
                f"within {timeout_s:g} s (WORLD_SIZE={world_size}): start all "
                f"{world_size} of them (torchrun starts --nproc_per_node on each node)"
            ) from error
    return Distributed(rank, world_size, local_rank, device, backend)


def shutdown() -> None:
    """Leave the process group (nothing to do when there is none)."""
    if dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    """Wait until every rank gets here (nothing to do outside a distributed run)."""
    if dist.is_initialized():
        dist.barrier()


def wrap(model: nn.Module, ctx: Distributed) -> DistributedDataParallel:
    """``model`` on ``ctx.device`` inside DDP (``device_ids`` only on CUDA)."""
    model.to(ctx.device)
    device_ids = [ctx.device] if ctx.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)


def unwrap(model: nn.Module) -> nn.Module:
    """The module inside a DDP wrapper (``model`` itself when it is not wrapped)."""
    return model.module if isinstance(model, DistributedDataParallel) else model


def _like(loader: DataLoader, dataset: Any, sampler: Any) -> DataLoader:
    """A DataLoader like ``loader`` (batch size, collate, workers) over ``dataset``."""
    return DataLoader(
        dataset,
        batch_size=loader.batch_size,
        sampler=sampler,
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        drop_last=loader.drop_last,
        worker_init_fn=loader.worker_init_fn,
        persistent_workers=loader.persistent_workers,
    )


def shard(
    loader: DataLoader, ctx: Distributed, *, shuffle: bool, seed: int = 0
) -> DataLoader:
    """This rank's share of ``loader``'s dataset, through a ``DistributedSampler``.

    Same dataset, per-process batch size and collate function. With ``shuffle``, epoch
    ``e`` uses the permutation seeded by ``seed + e`` on every rank and rank ``r`` takes
    its positions ``r, r + world_size, ...``; without, the dataset's order. When the
    dataset's size is not a multiple of ``world_size``, the sampler repeats the first few
    samples so that every rank has as many (as PyTorch's ``DistributedSampler`` does).
    """
    sampler = DistributedSampler(
        loader.dataset,
        num_replicas=ctx.world_size,
        rank=ctx.rank,
        shuffle=shuffle,
        seed=seed,
    )
    return _like(loader, loader.dataset, sampler)


def eval_shard(loader: DataLoader, ctx: Distributed) -> DataLoader:
    """This rank's test samples: those at positions ``rank, rank + world_size, ...``, in
    order and without padding, so that the ranks together see every sample once."""
    if not isinstance(loader, DataLoader):
        raise TypeError(
            "A distributed evaluation splits a DataLoader's dataset between the ranks; "
            f"got a {type(loader).__name__}."
        )
    indices = range(ctx.rank, len(loader.dataset), ctx.world_size)
    return _like(loader, Subset(loader.dataset, indices), None)


def all_sum(values: list[float | torch.Tensor], ctx: Distributed) -> list[float]:
    """The sums over all ranks of each of ``values`` (numbers or 0-d tensors)."""
    local = torch.stack(
        [torch.as_tensor(v, dtype=torch.float64).to(ctx.device) for v in values]
    )
    dist.all_reduce(local, op=dist.ReduceOp.SUM)
    return local.tolist()


def any_rank(flag: bool | torch.Tensor, ctx: Distributed) -> bool:
    """Whether ``flag`` is true on at least one rank (every rank gets the same answer)."""
    return all_sum([torch.as_tensor(flag, dtype=torch.float64)], ctx)[0] > 0


def gather(obj: Any, ctx: Distributed) -> list[Any]:
    """Every rank's ``obj`` (picklable), in rank order, on every rank."""
    objects: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(objects, obj)
    return objects


def broadcast(obj: Any, ctx: Distributed) -> Any:
    """Rank 0's ``obj`` (picklable), on every rank."""
    objects = [obj if ctx.is_main else None]
    dist.broadcast_object_list(objects, src=0)
    return objects[0]
