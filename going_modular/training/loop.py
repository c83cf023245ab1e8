"""The training loop: :func:`fit` trains a model with a :class:`~going_modular.training.recipe.Recipe`.

``fit(model, train_data, test_data, recipe)`` builds the optimiser, schedule and losses the
recipe names, then runs the epochs: each one pass of training (the loop of
:func:`train_one_epoch`) and one of testing (:func:`evaluate`), then the callbacks. It
returns the per-epoch history.

A training pass, its NaN guard and the per-sample sums (losses and accuracies are averaged
per sample, not per batch) live in :mod:`going_modular.training.steps`; this module
decides, for the device, how the guard runs: on CUDA with a fused optimiser (which
:func:`fit` builds there) it is a flag kept on the device; with any other optimiser, on a
CPU and in a distributed run, the loss is read at every step.

The recipe: :func:`fit` builds the optimiser (or uses the one the recipe holds), the
schedule (stepped after every optimizer step) and the losses from it; ``recipe.amp``
trains and tests under autocast (float16 with gradient scaling on CUDA, bfloat16 on a
CPU); ``recipe.max_steps_per_epoch`` and ``recipe.max_eval_steps`` cap the training and
test passes.

Time budget: ``recipe.time_budget`` is in seconds for the whole run, resumed calls
included (see :mod:`going_modular.training.budget`).

Checkpoints: ``fit(..., checkpoint_dir=DIR)`` saves after each completed epoch everything
that decides the next step (see :mod:`going_modular.training.checkpoint`), atomically and
with a checksum, to ``DIR/checkpoint.pth``. Called again with that folder, training
continues after the last completed epoch and the returned results include the earlier
epochs; on a CPU with ``num_workers=0`` the losses are exactly those of an uninterrupted
run. A checkpoint of another model, or of a recipe with other ``epochs``, ``steps``,
``max_steps_per_epoch``, ``amp``, ``max_grad_norm``, ``lr``, ``weight_decay``,
``label_smoothing``, optimiser, scheduler or number of processes raises
:class:`~going_modular.training.checkpoint.CheckpointMismatchError`; a corrupt one,
:class:`~going_modular.training.checkpoint.CorruptCheckpointError`.

Divergence: both loaders are checked before training starts. A NaN or infinite training
or test loss raises :class:`~going_modular.training.divergence.NonFiniteLossError`; a
finite loss above :data:`~going_modular.training.divergence.LOSS_EXPLOSION_FACTOR` times
the first step's loss (or above that factor when the first loss was below 1) raises
:class:`~going_modular.training.divergence.LossExplodedError`, before the epoch is
recorded. Both are :class:`~going_modular.training.divergence.TrainingDiverged` and carry
``epoch`` and ``results``.

Several processes: ``fit(..., distributed=ctx)`` trains with DistributedDataParallel; see
:mod:`going_modular.training.distributed` for what changes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data.distributed import DistributedSampler

from going_modular.training import distributed as ddp
from going_modular.training.budget import TimeBudget, UntilDeadline, agree
from going_modular.training.checkpoint import (
    CHECKPOINT_NAME,
    TrainingState,
    training_config,
)
from going_modular.training.distributed import Distributed
from going_modular.training.divergence import (
    NonFiniteLossError,
    TrainingDiverged,
    check_not_exploded,
)
from going_modular.training.recipe import BatchTransform, Recipe
from going_modular.training.seeding import get_device
from going_modular.training.steps import (
    Stepper,
    Tally,
    autocast,
    batches,
    loader_length,
    unit_scaler,
)

__all__ = [
    "RESULT_KEYS",
    "Callback",
    "autocast",
    "evaluate",
    "fit",
    "train_one_epoch",
]

#: Called as ``callback(epoch, results)`` after each completed epoch; returning True stops
#: training there (early stopping).
Callback = Callable[[int, dict[str, list[float]]], bool | None]

#: What :func:`fit` returns, one value per epoch: losses and accuracies, the optimizer steps
#: taken, and the seconds spent training, testing and in the whole epoch.
RESULT_KEYS = (
    "train_loss",
    "train_acc",
    "test_loss",
    "test_acc",
    "steps",
    "train_seconds",
    "test_seconds",
    "epoch_seconds",
)
_SHOWN = RESULT_KEYS[:4]  # the values printed after each epoch
# Devices where reading a value waits for the queued work (a host sync).
_ASYNC_DEVICES = ("cuda",)


def _check_loaders(train_data: Iterable, test_data: Iterable | None) -> None:
    """Before training, refuse a loader that would yield no batch, saying why."""
    if train_data is None:
        raise ValueError("No training dataloader was given.")
    for name, loader in (("training", train_data), ("test", test_data)):
        if loader is None or loader_length(loader) != 0:
            continue  # no test data, batches, or no length to check
        dataset = getattr(loader, "dataset", None)
        size = len(dataset) if hasattr(dataset, "__len__") else 0
        if size and getattr(loader, "drop_last", False):
            raise ValueError(
                f"The {name} dataloader has 0 batches: its {size} samples are fewer than "
                f"batch_size={loader.batch_size} and drop_last=True drops them. Lower the "
                "batch size or set drop_last=False."
            )
        raise ValueError(
            f"The {name} dataloader has no batches: its dataset is empty. Check the "
            "data folder or the subset you selected."
        )


def _defer_loss_check(
    device: torch.device | str,
    optimizer: torch.optim.Optimizer,
    ctx: Distributed | None = None,
) -> bool:
    """Whether the NaN/inf check stays on the device: where reading the loss waits for the
    device (CUDA), and the optimiser is fused, so that a gradient scaler skips a bad step
    on the device too (a scaler with another optimiser reads its flag at every step). Never
    in a distributed run, whose processes agree at every step."""
    return (
        ctx is None
        and torch.device(device).type in _ASYNC_DEVICES
        and bool(optimizer.defaults.get("fused"))
    )


def train_one_epoch(
    model: nn.Module,
    dataloader: Iterable,
    loss_fn: nn.Module,
    optimizer: torch.optim.Optimizer,
    device: torch.device | str,
    *,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    max_grad_norm: float | None = None,
    amp: bool = False,
    scaler: torch.amp.GradScaler | None = None,
    batch_transform: BatchTransform | None = None,
    max_steps: int | None = None,
    progress: bool = True,
) -> tuple[float, float]:
    """Train ``model`` for one pass over ``dataloader``; return ``(loss, accuracy)`` per sample.

    The loop :func:`fit` runs each epoch. ``scheduler`` is stepped after every optimizer
    step; ``max_grad_norm`` clips the global gradient norm; ``batch_transform`` (e.g.
    MixUp) maps ``(X, y)`` to a mixed batch; ``max_steps`` caps the number of batches.
    A NaN or infinite loss raises
    :class:`~going_modular.training.divergence.NonFiniteLossError` (naming the step) and
    its step is not applied (see the module's docstring for how it is checked on a CPU and
    on CUDA). A model with BatchNorm skips a batch of a single image (BatchNorm cannot train
    on one), as ``drop_last`` would.
    """
    stepper = Stepper(
        loss_fn, optimizer, device, scheduler, max_grad_norm, amp, scaler,
        batch_transform, deferred=_defer_loss_check(device, optimizer),
    )  # fmt: skip
    passes = batches(dataloader, max_steps, "train", progress)
    return stepper.run(model, passes, epoch=None).result()


@torch.inference_mode()
def evaluate(
    model: nn.Module,
    dataloader: Iterable,
    loss_fn: nn.Module,
    device: torch.device | str,
    *,
    amp: bool = False,
    max_steps: int | None = None,
    progress: bool = True,
    distributed: Distributed | None = None,
) -> tuple[float, float]:
    """Evaluate ``model`` on ``dataloader``; return ``(loss, accuracy)`` averaged per sample.

    ``max_steps`` caps the number of batches. With ``distributed``, each process evaluates
    its share of the DataLoader's dataset (:func:`~going_modular.training.distributed.eval_shard`)
    and the sums are added across processes: every sample counts once, on every process.
    """
    if distributed is not None:
        # No DDP collectives: the shares may differ by a batch.
        model = ddp.unwrap(model)
        dataloader = ddp.eval_shard(dataloader, distributed)
    model.eval()
    tally = Tally("test")
    for X, y in batches(dataloader, max_steps, "test", progress):
        X, y = X.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with autocast(device, amp):
            logits = model(X)
            loss = loss_fn(logits, y)
        tally.add(loss, logits, y)
    return tally.result(distributed)


def _run_length(
    train_data: Iterable, recipe: Recipe
) -> tuple[int, int | None, int | None]:
    """The run's epochs, the steps of a full epoch and the total steps (None: unknown)."""
    per_epoch, length = recipe.max_steps_per_epoch, loader_length(train_data)
    if length is not None:
        per_epoch = length if per_epoch is None else min(per_epoch, length)
    if recipe.steps is None:
        total = None if per_epoch is None else recipe.epochs * per_epoch
        return recipe.epochs, per_epoch, total
    if per_epoch is None:
        raise ValueError(
            "A run of so many steps needs the steps of an epoch: give the training data "
            "a length (a DataLoader has one) or set max_steps_per_epoch."
        )
    return math.ceil(recipe.steps / per_epoch), per_epoch, recipe.steps


def _model_for(model: nn.Module, train_data: Iterable, ctx: Distributed) -> nn.Module:
    """``model`` wrapped in DDP for ``ctx``, after checking the loader is sharded."""
    if not isinstance(getattr(train_data, "sampler", None), DistributedSampler):
        raise ValueError(
            "In a distributed run each process trains on its own share of the data: "
            "pass going_modular.training.distributed.shard(train_loader, ctx, "
            "shuffle=True, seed=...) as the training data."
        )
    if isinstance(model, DistributedDataParallel):
        return model
    return ddp.wrap(model, ctx)


def _scaler(
    device: torch.device, recipe: Recipe, deferred: bool
) -> torch.amp.GradScaler | None:
    """float16's gradient scaler on CUDA; the unit scaler of a check kept on the device."""
    if recipe.amp and device.type == "cuda":
        return torch.amp.GradScaler("cuda")
    return unit_scaler(device) if deferred else None


class _Run:
    """One call of :func:`fit`: the parts built from the recipe, the history so far, and
    what a checkpoint saves of them."""

    def __init__(
        self, model, train_data, test_data, recipe: Recipe, device, ctx, progress
    ):
        if ctx is not None:
            model, device = _model_for(model, train_data, ctx), ctx.device
        self.device = get_device() if device is None else torch.device(device)
        self.model = model.to(self.device)
        self.train_data, self.test_data, self.recipe, self.ctx = (
            train_data, test_data, recipe, ctx,
        )  # fmt: skip
        self.main = ctx is None or ctx.is_main
        self.progress = progress and self.main
        self.epochs, self.per_epoch, total_steps = _run_length(train_data, recipe)
        optimizer = recipe.build_optimizer(
            model, fused=self.device.type in _ASYNC_DEVICES
        )
        scheduler = recipe.build_schedule(optimizer, total_steps)
        loss_fn, self.test_loss_fn = recipe.build_losses()
        deferred = _defer_loss_check(self.device, optimizer, ctx)
        self.stepper = Stepper(
            loss_fn, optimizer, self.device, scheduler, recipe.max_grad_norm, recipe.amp,
            _scaler(self.device, recipe, deferred), recipe.batch_transform, ctx, deferred,
        )  # fmt: skip
        world = 1 if ctx is None else ctx.world_size
        config = training_config(
            model, recipe, self.epochs, optimizer, scheduler, world
        )
        self.state = TrainingState(
            model, optimizer, scheduler, self.stepper.scaler, config,
            batch_transform=recipe.batch_transform,
            generator=getattr(train_data, "generator", None),
        )  # fmt: skip
        keys = [
            k for k in RESULT_KEYS if test_data is not None or not k.startswith("test")
        ]
        self.results: dict[str, list[float]] = {key: [] for key in keys}
        self.first_loss: float | None = None
        self.done, self.spent = 0, 0.0

    def resume(self, checkpoint_dir: Path) -> None:
        """Continue from the checkpoint in ``checkpoint_dir``, if there is one."""
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        rank = 0 if self.ctx is None else self.ctx.rank
        checkpoint = self.state.resume(checkpoint_dir, rank)
        if checkpoint is None:
            return
        self.done, self.first_loss = checkpoint["epoch"], checkpoint["first_loss"]
        self.spent = checkpoint["seconds"]
        self.results = {k: list(v) for k, v in checkpoint["results"].items()}
        rest = (
            f"continuing with epoch {self.done + 1}"
            if self.done < self.epochs
            else "nothing left to train"
        )
        if self.main:
            print(
                f"Resuming from {checkpoint_dir / CHECKPOINT_NAME}: {self.done} of "
                f"{self.epochs} epochs done; {rest}."
            )

    def _max_steps(self, epoch: int) -> int | None:
        if self.recipe.steps is None:
            return self.recipe.max_steps_per_epoch
        return min(self.per_epoch, self.recipe.steps - (epoch - 1) * self.per_epoch)

    def train_and_test(self, epoch: int, loader: Iterable) -> dict[str, float]:
        """Train ``epoch`` on ``loader``, test, and return the epoch's values."""
        sampler = getattr(self.train_data, "sampler", None)
        if isinstance(sampler, DistributedSampler):
            sampler.set_epoch(epoch)  # each epoch its own order, the same on every rank
        start = time.perf_counter()
        passes = batches(loader, self._max_steps(epoch), "train", self.progress)
        tally = self.stepper.run(self.model, passes, epoch)
        train_loss, train_acc = tally.result(self.ctx)
        trained = time.perf_counter()
        if self.first_loss is None:
            self.first_loss = self._first_step_loss(tally)
        values = {"train_loss": train_loss, "train_acc": train_acc}
        if self.test_data is not None:
            values["test_loss"], values["test_acc"] = self._test(epoch)
        losses = {"training": train_loss, "test": values.get("test_loss")}
        check_not_exploded(epoch, losses, self.first_loss, self.stepper.optimizer)
        end = time.perf_counter()
        return values | {
            "steps": tally.steps,
            "train_seconds": trained - start,
            "test_seconds": end - trained,
            "epoch_seconds": end - start,
        }

    def _first_step_loss(self, tally: Tally) -> float:
        """The first step's loss (its mean over the processes of a distributed run)."""
        if self.ctx is None:
            return float(tally.first)
        return ddp.all_sum([tally.first], self.ctx)[0] / self.ctx.world_size

    def _test(self, epoch: int) -> tuple[float, float]:
        """:func:`evaluate` after training ``epoch``; a NaN or infinite test loss is an error."""
        test_loss, test_acc = evaluate(
            self.model, self.test_data, self.test_loss_fn, self.device,
            amp=self.recipe.amp, max_steps=self.recipe.max_eval_steps,
            progress=self.progress, distributed=self.ctx,
        )  # fmt: skip
        if not math.isfinite(test_loss):
            raise NonFiniteLossError(
                f"The test loss is {test_loss} after epoch {epoch} (every training loss "
                "was finite). Likely causes: NaN/infinite values in the test inputs, or "
                "weights that overflowed in the last steps (lower the learning rate or "
                "clip gradients)."
            )
        return test_loss, test_acc

    def record(self, values: dict[str, float]) -> None:
        for key in self.results:
            self.results[key].append(values[key])

    def save(self, checkpoint_dir: Path, epoch: int, seconds: float) -> None:
        """Checkpoint ``epoch``: every rank's local states, written by rank 0."""
        local = self.state.local_state()
        local_states = [local] if self.ctx is None else ddp.gather(local, self.ctx)
        if self.main:
            progress = {"epoch": epoch, "results": self.results}
            progress |= {"first_loss": self.first_loss, "seconds": seconds}
            self.state.save(checkpoint_dir, progress, local_states)
        if self.ctx is not None:
            ddp.barrier()

    def call_back(self, callbacks: Sequence[Callback], epoch: int) -> bool:
        """Run the callbacks (on rank 0 only); whether one asks to stop (on every rank)."""
        stop = [bool(cb(epoch, self.results)) for cb in callbacks] if self.main else []
        return agree(any(stop), self.ctx)


def _epoch_line(epoch: int, epochs: int, values: dict[str, float]) -> str:
    shown = " | ".join(f"{k} {values[k]:.4f}" for k in _SHOWN if k in values)
    return f"Epoch {epoch:>3}/{epochs} | {shown} | {values['epoch_seconds']:.1f} s"


def fit(
    model: nn.Module,
    train_data: Iterable,
    test_data: Iterable | None,
    recipe: Recipe,
    *,
    device: torch.device | str | None = None,
    callbacks: Sequence[Callback] = (),
    checkpoint_dir: str | Path | None = None,
    progress: bool = True,
    distributed: Distributed | None = None,
) -> dict[str, list[float]]:
    """Train ``model`` on ``train_data`` with ``recipe``, testing on ``test_data`` after
    each epoch; return the per-epoch history (:data:`RESULT_KEYS`).

    ``train_data`` and ``test_data`` are DataLoaders, or any iterables of ``(X, y)``
    batches; ``test_data=None`` skips testing (no ``test_*`` values then). ``device``
    defaults to CUDA when there is a GPU. ``callbacks`` are called as
    ``callback(epoch, results)`` after each completed (and checkpointed) epoch; one that
    returns True stops training after that epoch. ``checkpoint_dir`` makes the run
    resumable, ``recipe.time_budget`` stops it early, ``distributed`` trains on several
    processes; a diverging loss raises
    :class:`~going_modular.training.divergence.TrainingDiverged` (see the module).
    """
    _check_loaders(train_data, test_data)
    run = _Run(model, train_data, test_data, recipe, device, distributed, progress)
    if checkpoint_dir is not None:
        checkpoint_dir = Path(checkpoint_dir)
        run.resume(checkpoint_dir)
    budget = TimeBudget(recipe.time_budget, run.spent)
    stopped, epoch = "", run.done
    try:
        for epoch in range(run.done + 1, run.epochs + 1):
            first = epoch == run.done + 1 and not budget.spent  # trains at least a step
            if agree(budget.over() and not first, distributed):
                stopped = budget.message
                break
            loader = train_data
            if budget.seconds is not None:
                loader = UntilDeadline(train_data, budget.deadline(), distributed)
            values = run.train_and_test(epoch, loader)
            run.record(values)
            if checkpoint_dir is not None:
                run.save(checkpoint_dir, epoch, budget.used())
            stop = run.call_back(callbacks, epoch)
            if run.progress:
                print(_epoch_line(epoch, run.epochs, values))
            if isinstance(loader, UntilDeadline) and loader.stopped:
                stopped = budget.message
                break
            if stop:
                stopped = "A callback stopped training"
                break
    except TrainingDiverged as error:
        error.epoch, error.results = epoch, run.results
        raise
    if run.progress and stopped:
        print(f"{stopped}: stopped in epoch {len(run.results['train_loss'])}.")
    return run.results
