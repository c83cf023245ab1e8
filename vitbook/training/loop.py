"""Training with a :class:`~vitbook.training.recipe.Recipe`: :func:`fit`, the course's loop
(:func:`going_modular.engine.train`) with the book's extras plugged in as its hooks.

``fit(model, train_data, test_data, recipe)`` builds the optimiser, schedule and losses the
recipe names, then runs :func:`going_modular.engine.train` with :class:`_Run` as its hooks:
each epoch one pass of training and one of testing, then the checkpoint and the callbacks.
It returns the per-epoch history.

The NaN guard runs, for the device, as :class:`_Run.check_loss` decides: on CUDA with a
fused optimiser (which :func:`fit` builds there) it is a flag kept on the device; with any
other optimiser, on a CPU and in a distributed run, the loss is read at every step.

The recipe: :func:`fit` builds the optimiser (or uses the one the recipe holds), the
schedule (stepped after every optimizer step) and the losses from it; ``recipe.amp``
trains and tests under autocast (float16 with gradient scaling on CUDA, bfloat16 on a
CPU); ``recipe.max_steps_per_epoch`` and ``recipe.max_eval_steps`` cap the training and
test passes.

Time budget: ``recipe.time_budget`` is in seconds for the whole run, resumed calls
included (see :mod:`vitbook.training.budget`).

Checkpoints: ``fit(..., checkpoint_dir=DIR)`` saves after each completed epoch everything
that decides the next step (see :mod:`vitbook.training.checkpoint`), atomically and
with a checksum, to ``DIR/checkpoint.pth``. Called again with that folder, training
continues after the last completed epoch and the returned results include the earlier
epochs; on a CPU with ``num_workers=0`` the losses are exactly those of an uninterrupted
run. A checkpoint of another model, or of a recipe with other ``epochs``, ``steps``,
``max_steps_per_epoch``, ``amp``, ``max_grad_norm``, ``lr``, ``weight_decay``,
``label_smoothing``, optimiser, scheduler or number of processes raises
:class:`~vitbook.training.checkpoint.CheckpointMismatchError`; a corrupt one,
:class:`~vitbook.training.checkpoint.CorruptCheckpointError`.

Divergence: both loaders are checked before training starts. A NaN or infinite training
or test loss raises :class:`~vitbook.training.divergence.NonFiniteLossError`; a
finite loss above :data:`~vitbook.training.divergence.LOSS_EXPLOSION_FACTOR` times
the first step's loss (or above that factor when the first loss was below 1) raises
:class:`~vitbook.training.divergence.LossExplodedError`, before the epoch is
recorded. Both are :class:`~vitbook.training.divergence.TrainingDiverged` and carry
``epoch`` and ``results``.

Several processes: ``fit(..., distributed=ctx)`` trains with DistributedDataParallel; see
:mod:`vitbook.training.distributed` for what changes.
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

from going_modular import engine
from going_modular.engine import autocast
from going_modular.utils import get_device
from vitbook.training import distributed as ddp
from vitbook.training.budget import TimeBudget, UntilDeadline, agree
from vitbook.training.checkpoint import (
    CHECKPOINT_NAME,
    TrainingState,
    training_config,
)
from vitbook.training.distributed import Distributed
from vitbook.training.divergence import (
    NONFINITE_CHECK_STEPS,
    DeviceLossCheck,
    NonFiniteLossError,
    TrainingDiverged,
    check_finite_loss,
    check_not_exploded,
    non_finite_elsewhere,
)
from vitbook.training.recipe import Recipe
from vitbook.training.steps import batches, loader_length, unit_scaler

__all__ = ["RESULT_KEYS", "Callback", "autocast", "evaluate", "fit"]

#: Called as ``callback(epoch, results)`` after each completed epoch; returning True stops
#: training there (early stopping).
Callback = Callable[[int, dict[str, list[float]]], bool | None]

#: What :func:`fit` returns, one value per epoch: losses and accuracies, the optimizer steps
#: taken, and the seconds spent training, testing and in the whole epoch.
RESULT_KEYS = (
    *engine.COURSE_KEYS,
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


class _Added(engine.Hooks):
    """Hooks that add each pass's sums over the processes of a distributed run."""

    def __init__(self, ctx: Distributed | None) -> None:
        self.ctx = ctx

    def end_pass(self, name: str, sums: list) -> list:
        return sums if self.ctx is None else ddp.all_sum(sums, self.ctx)


class _TestBatches:
    """The test batches of every pass: this process's share in a distributed run, at most
    ``max_steps`` of them, under a progress bar."""

    def __init__(self, loader, max_steps, progress, ctx) -> None:
        self.loader = loader if ctx is None else ddp.eval_shard(loader, ctx)
        self.max_steps, self.progress = max_steps, progress

    def __iter__(self):
        return iter(batches(self.loader, self.max_steps, "test", self.progress))


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

    :func:`going_modular.engine.test_step` with a cap of ``max_steps`` batches and a
    progress bar. With ``distributed``, each process evaluates its share of the
    DataLoader's dataset (:func:`~vitbook.training.distributed.eval_shard`) and the sums
    are added across processes: every sample counts once, on every process.
    """
    data = _TestBatches(dataloader, max_steps, progress, distributed)
    hooks = _Added(distributed)
    return engine.test_step(model, data, loss_fn, device, amp=amp, hooks=hooks)


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
            "pass vitbook.training.distributed.shard(train_loader, ctx, "
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


def _has_batchnorm(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def _epoch_line(epoch: int, epochs: int, values: dict[str, float]) -> str:
    shown = " | ".join(f"{k} {values[k]:.4f}" for k in _SHOWN if k in values)
    return f"Epoch {epoch:>3}/{epochs} | {shown} | {values['epoch_seconds']:.1f} s"


class _Run(_Added):
    """One call of :func:`fit`: the parts built from the recipe, and the extras it plugs
    into :func:`going_modular.engine.train` (resuming, the time budget, the NaN guard, the
    sums over processes, the explosion check, checkpoints and callbacks)."""

    def __init__(
        self, model, train_data, test_data, recipe: Recipe, device, ctx, progress,
        checkpoint_dir: Path | None, callbacks: Sequence[Callback],
        identity: dict | None = None,
    ):  # fmt: skip
        super().__init__(ctx)
        if ctx is not None:
            model, device = _model_for(model, train_data, ctx), ctx.device
        self.device = get_device() if device is None else torch.device(device)
        self.model = model.to(self.device)
        self.train_data, self.recipe = train_data, recipe
        self.checkpoint_dir, self.callbacks = checkpoint_dir, callbacks
        self.main = ctx is None or ctx.is_main
        self.progress = progress and self.main
        self.epochs, self.per_epoch, total_steps = _run_length(train_data, recipe)
        self.optimizer = recipe.build_optimizer(
            model, fused=self.device.type in _ASYNC_DEVICES
        )
        self.scheduler = recipe.build_schedule(self.optimizer, total_steps)
        self.loss_fn, self.test_loss_fn = recipe.build_losses()
        deferred = _defer_loss_check(self.device, self.optimizer, ctx)
        self.device_check = DeviceLossCheck(self.device) if deferred else None
        self.scaler = _scaler(self.device, recipe, deferred)
        world = 1 if ctx is None else ctx.world_size
        config = training_config(
            model, recipe, self.epochs, self.optimizer, self.scheduler, world, identity
        )
        self.state = TrainingState(
            model, self.optimizer, self.scheduler, self.scaler, config,
            batch_transform=recipe.batch_transform,
            generator=getattr(train_data, "generator", None),
        )  # fmt: skip
        self.keys = [
            k for k in RESULT_KEYS if test_data is not None or not k.startswith("test")
        ]
        self.single_batch_fails = _has_batchnorm(model)
        self.first_loss: float | torch.Tensor | None = None
        self.epoch, self.steps, self.stopped, self.spent = 0, 0, "", 0.0
        self.loader: Iterable | None = None
        self.results: dict[str, list[float]] = {}

    # -- the hooks, in the order the loop calls them --
    def start(self, results: dict[str, list[float]]) -> int:
        """The history so far: empty, or a checkpoint's, whose epochs are then done."""
        self.results = results
        results.clear()
        results.update({key: [] for key in self.keys})
        done = 0
        if self.checkpoint_dir is not None:
            done = self._resume(self.checkpoint_dir)
        self.budget = TimeBudget(self.recipe.time_budget, self.spent)
        self.done = done
        return done

    def epoch_batches(self, epoch: int, dataloader: Iterable) -> Iterable | None:
        """``epoch``'s batches: shuffled for it, capped, cut short by the time budget (None
        when the budget is spent before it); a single image skipped for BatchNorm."""
        first = (
            epoch == self.done + 1 and not self.budget.spent
        )  # trains at least a step
        if agree(self.budget.over() and not first, self.ctx):
            self.stopped = self.budget.message
            return None
        self.epoch, self.steps, self.start_time = epoch, 0, time.perf_counter()
        sampler = getattr(self.train_data, "sampler", None)
        if isinstance(sampler, DistributedSampler):
            sampler.set_epoch(epoch)  # each epoch its own order, the same on every rank
        self.loader = dataloader
        if self.budget.seconds is not None:
            self.loader = UntilDeadline(dataloader, self.budget.deadline(), self.ctx)
        passes = batches(self.loader, self._max_steps(epoch), "train", self.progress)
        if self.single_batch_fails:  # BatchNorm cannot train on one image: drop_last
            return (batch for batch in passes if batch[0].shape[0] != 1)
        return passes

    def check_loss(self, loss: torch.Tensor, X: torch.Tensor, step: int) -> None:
        """Raise before backward when the loss is NaN or infinite (here or, in a
        distributed run, in any process); or note it on the device (see the module)."""
        self.steps = step
        if self.first_loss is None:
            self.first_loss = loss.detach().float()
        if self.device_check is not None:
            self.device_check.add(loss, step)
            if step % NONFINITE_CHECK_STEPS == 0:
                self.device_check.check(self.optimizer, self.epoch)
        elif self.ctx is None:
            check_finite_loss(loss, X, self.optimizer, self.epoch, step)
        elif ddp.any_rank(~torch.isfinite(loss.detach()).all(), self.ctx):
            check_finite_loss(loss, X, self.optimizer, self.epoch, step)  # if ours
            raise non_finite_elsewhere(self.optimizer, self.epoch, step)

    def end_pass(self, name: str, sums: list) -> list:
        if name == "training":
            if self.device_check is not None:
                self.device_check.check(self.optimizer, self.epoch)
            if sums[2] == 0 and self.single_batch_fails:
                raise ValueError(
                    "The training dataloader yielded no batches; is the dataset empty? "
                    "(A model with BatchNorm skips batches of a single image: use a "
                    "larger batch size.)"
                )
            if isinstance(self.first_loss, torch.Tensor):
                self.first_loss = self._first_step_loss(self.first_loss)
        return super().end_pass(name, sums)

    def check_epoch(self, epoch: int, values: dict[str, float]) -> None:
        """Refuse a non-finite test loss or an exploded loss; add the steps and times."""
        test_loss = values.get("test_loss")
        if test_loss is not None and not math.isfinite(test_loss):
            raise NonFiniteLossError(
                f"The test loss is {test_loss} after epoch {epoch} (every training loss "
                "was finite). Likely causes: NaN/infinite values in the test inputs, or "
                "weights that overflowed in the last steps (lower the learning rate or "
                "clip gradients)."
            )
        losses = {"training": values["train_loss"], "test": test_loss}
        check_not_exploded(epoch, losses, self.first_loss, self.optimizer)
        values["steps"] = self.steps
        values["epoch_seconds"] = time.perf_counter() - self.start_time

    def end_epoch(self, epoch: int, results: dict[str, list[float]]) -> bool:
        """Checkpoint, call back, print the epoch's line; whether to stop."""
        if self.checkpoint_dir is not None:
            self._save(self.checkpoint_dir, epoch, self.budget.used())
        stop = self._call_back(epoch)
        if self.progress:
            values = {key: results[key][-1] for key in results}
            print(_epoch_line(epoch, self.epochs, values))
        if isinstance(self.loader, UntilDeadline) and self.loader.stopped:
            self.stopped = self.budget.message
            return True
        if stop:
            self.stopped = "A callback stopped training"
        return stop

    # -- what the hooks use --
    def _resume(self, checkpoint_dir: Path) -> int:
        """Continue from the checkpoint in ``checkpoint_dir``, if there is one."""
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        rank = 0 if self.ctx is None else self.ctx.rank
        checkpoint = self.state.resume(checkpoint_dir, rank)
        if checkpoint is None:
            return 0
        done, self.first_loss = checkpoint["epoch"], checkpoint["first_loss"]
        self.spent = checkpoint["seconds"]
        self.results.update({k: list(v) for k, v in checkpoint["results"].items()})
        rest = (
            f"continuing with epoch {done + 1}"
            if done < self.epochs
            else "nothing left to train"
        )
        if self.main:
            print(
                f"Resuming from {checkpoint_dir / CHECKPOINT_NAME}: {done} of "
                f"{self.epochs} epochs done; {rest}."
            )
        return done

    def _max_steps(self, epoch: int) -> int | None:
        if self.recipe.steps is None:
            return self.recipe.max_steps_per_epoch
        return min(self.per_epoch, self.recipe.steps - (epoch - 1) * self.per_epoch)

    def _first_step_loss(self, first: torch.Tensor) -> float:
        """The first step's loss (its mean over the processes of a distributed run)."""
        if self.ctx is None:
            return float(first)
        return ddp.all_sum([first], self.ctx)[0] / self.ctx.world_size

    def _save(self, checkpoint_dir: Path, epoch: int, seconds: float) -> None:
        """Checkpoint ``epoch``: every rank's local states, written by rank 0."""
        local = self.state.local_state()
        local_states = [local] if self.ctx is None else ddp.gather(local, self.ctx)
        if self.main:
            progress = {"epoch": epoch, "results": self.results}
            progress |= {"first_loss": self.first_loss, "seconds": seconds}
            self.state.save(checkpoint_dir, progress, local_states)
        if self.ctx is not None:
            ddp.barrier()

    def _call_back(self, epoch: int) -> bool:
        """Run the callbacks (on rank 0 only); whether one asks to stop (on every rank)."""
        stop = (
            [bool(cb(epoch, self.results)) for cb in self.callbacks]
            if self.main
            else []
        )
        return agree(any(stop), self.ctx)


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
    identity: dict | None = None,
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
    :class:`~vitbook.training.divergence.TrainingDiverged` (see the module).
    ``identity`` (plain values naming the run, e.g. its id and seed) is saved in each
    checkpoint, and a checkpoint of another identity is not resumed.
    """
    _check_loaders(train_data, test_data)
    checkpoint_dir = None if checkpoint_dir is None else Path(checkpoint_dir)
    run = _Run(
        model, train_data, test_data, recipe, device, distributed, progress,
        checkpoint_dir, callbacks, identity,
    )  # fmt: skip
    tests = None
    if test_data is not None:
        tests = _TestBatches(
            test_data, recipe.max_eval_steps, run.progress, distributed
        )
    try:
        engine.train(
            run.model, train_data, tests, run.optimizer, run.loss_fn, run.epochs,
            run.device, test_loss_fn=run.test_loss_fn, hooks=run, verbose=False,
            scheduler=run.scheduler, max_grad_norm=recipe.max_grad_norm,
            amp=recipe.amp, scaler=run.scaler, batch_transform=recipe.batch_transform,
        )  # fmt: skip
    except TrainingDiverged as error:
        error.epoch, error.results = run.epoch, run.results
        raise
    if run.progress and run.stopped:
        print(f"{run.stopped}: stopped in epoch {len(run.results['train_loss'])}.")
    return run.results
