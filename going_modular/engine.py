"""The training engine: :func:`fit` trains a model with a :class:`~going_modular.recipe.Recipe`.

``fit(model, train_data, test_data, recipe)`` builds the optimiser, schedule and losses the
recipe names, then runs the epochs: each one pass of training (the loop of
:func:`train_one_epoch`) and one of testing (:func:`evaluate`), then the callbacks. It
returns the per-epoch history.

Accuracy and loss are averaged per sample, not per batch, so a small last batch does not
count as much as a full one. Targets may be class indices or soft (mixed) distributions
of shape (batch, classes), as MixUp and CutMix produce. The sums stay on the device and
are read once per epoch.

A NaN or infinite loss stops training, and its step is not applied to the weights. On a
CPU the loss is checked at every step, before backward. On CUDA, reading a value waits for
the GPU, so with an optimiser that can skip a step on the device (a fused one, which
:func:`fit` builds there) the check is a flag kept on the GPU, read every
:data:`~going_modular.divergence.NONFINITE_CHECK_STEPS` steps, while a gradient scaler skips the bad step; with any
other optimiser the loss is read at every step there too.

``fit(..., checkpoint_dir=DIR)`` saves everything needed to continue after each epoch and,
called again with the same folder, continues where it stopped (see :func:`fit` and
:mod:`going_modular.checkpoint`).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import torch
from torch import nn
from tqdm import tqdm

from going_modular.book import settings
from going_modular.training.checkpoint import (
    CHECKPOINT_NAME,
    TrainingState,
    training_config,
)
from going_modular.training.divergence import (
    NONFINITE_CHECK_STEPS,
    DeviceLossCheck,
    NonFiniteLossError,
    TrainingDiverged,
    check_finite_loss,
    check_not_exploded,
)
from going_modular.training.recipe import BatchTransform, Recipe
from going_modular.utils import get_device

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


def _length(data: Iterable) -> int | None:
    """The number of batches of ``data``, or None when it has no length (a generator)."""
    try:
        return len(data)  # type: ignore[arg-type]
    except TypeError:
        return None


def _check_loaders(train_data: Iterable, test_data: Iterable | None) -> None:
    """Before training, refuse a loader that would yield no batch, saying why."""
    if train_data is None:
        raise ValueError("No training dataloader was given.")
    for name, loader in (("training", train_data), ("test", test_data)):
        if loader is None or _length(loader) != 0:
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


def autocast(device: torch.device | str, amp: bool):
    """float16 autocast on CUDA, bfloat16 on a CPU, nothing when ``amp`` is False."""
    if not amp:
        return contextlib.nullcontext()
    kind = torch.device(device).type
    return torch.autocast(
        kind, dtype=torch.float16 if kind == "cuda" else torch.bfloat16
    )


def _hard_labels(y: torch.Tensor) -> torch.Tensor:
    return y.argmax(dim=1) if y.is_floating_point() and y.ndim == 2 else y


def _batches(dataloader: Iterable, max_steps: int | None, desc: str, progress: bool):
    max_steps = settings.cap(max_steps)  # a dry run (BOOK_DRY_RUN=1) takes a few steps
    total = _length(dataloader)
    if max_steps is not None:
        total = max_steps if total is None else min(total, max_steps)
    batches = itertools.islice(dataloader, max_steps)
    return tqdm(
        batches,
        total=total,
        desc=desc,
        leave=False,
        file=sys.stdout,
        disable=not progress,
        mininterval=0.5,  # fewer redraws: in a notebook each one costs the training
    )


class _UntilDeadline:
    """Iterate over ``loader`` until ``time.perf_counter()`` passes ``deadline``.

    The first batch is always yielded, so an epoch that starts in time trains at least one step;
    ``len()`` is the loader's, for progress bars.
    """

    def __init__(self, loader: Iterable, deadline: float):
        self.loader, self.deadline, self.stopped = loader, deadline, False

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __iter__(self):
        for i, batch in enumerate(self.loader):
            if i > 0 and time.perf_counter() >= self.deadline:
                self.stopped = True
                return
            yield batch


class _Tally:
    """Per-sample sums of the loss and of the correct predictions, kept on the device:
    adding a batch never waits for a GPU; :meth:`result` syncs once, at the end. ``first``
    is the first batch's loss (a tensor), ``steps`` the number of batches."""

    def __init__(self) -> None:
        self.loss: torch.Tensor | float = 0.0
        self.correct: torch.Tensor | float = 0.0
        self.seen = self.steps = 0
        self.first: torch.Tensor | None = None

    def add(self, loss: torch.Tensor, logits: torch.Tensor, y: torch.Tensor) -> None:
        n = logits.shape[0]
        if self.first is None:
            self.first = loss.detach().float()
        self.loss = self.loss + loss.detach().float() * n
        self.correct = self.correct + (logits.argmax(dim=1) == _hard_labels(y)).sum()
        self.seen += n
        self.steps += 1

    def result(self) -> tuple[float, float]:
        return float(self.loss) / self.seen, float(self.correct) / self.seen


def _defer_loss_check(
    device: torch.device | str, optimizer: torch.optim.Optimizer
) -> bool:
    """Whether the NaN/inf check stays on the device: where reading the loss waits for the
    device (CUDA), and the optimiser is fused, so that a gradient scaler skips a bad step
    on the device too (a scaler with another optimiser reads its flag at every step)."""
    return torch.device(device).type in _ASYNC_DEVICES and bool(
        optimizer.defaults.get("fused")
    )


def _unit_scaler(device: torch.device | str) -> torch.amp.GradScaler:
    """A gradient scaler that does not scale (float32): it only skips, on the device, a step
    whose gradients are not finite."""
    return torch.amp.GradScaler(
        torch.device(device).type, init_scale=1.0, growth_interval=2**30
    )


def _has_batchnorm(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def _train_epoch(
    model: nn.Module,
    dataloader: Iterable,
    loss_fn: nn.Module,
    optimizer: torch.optim.Optimizer,
    device: torch.device | str,
    *,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None,
    max_grad_norm: float | None,
    amp: bool,
    scaler: torch.amp.GradScaler | None,
    batch_transform: BatchTransform | None,
    max_steps: int | None,
    progress: bool,
    epoch: int | None,
) -> _Tally:
    """One pass of training (see :func:`train_one_epoch`); returns its tally."""
    model.train()
    tally = _Tally()
    deferred = _defer_loss_check(device, optimizer)
    if deferred and scaler is None:
        scaler = _unit_scaler(device)
    device_check = DeviceLossCheck(device) if deferred else None
    single_batch_fails = _has_batchnorm(model)
    batches = _batches(dataloader, max_steps, "train", progress)
    for step, (X, y) in enumerate(batches, start=1):
        if single_batch_fails and X.shape[0] == 1:
            continue  # BatchNorm cannot train on one image: dropped, as drop_last would
        X, y = X.to(device, non_blocking=True), y.to(device, non_blocking=True)
        if batch_transform is not None:
            X, y = batch_transform(X, y)
        with autocast(device, amp):
            logits = model(X)
            loss = loss_fn(logits, y)
        if device_check is None:
            check_finite_loss(loss, X, optimizer, epoch, step)
        else:
            device_check.add(loss, step)
            if step % NONFINITE_CHECK_STEPS == 0:
                device_check.check(optimizer, epoch)
        optimizer.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
        else:
            loss.backward()
        if max_grad_norm is not None:
            nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        if scheduler is not None:
            scheduler.step()
        tally.add(loss, logits, y)
    if device_check is not None:
        device_check.check(optimizer, epoch)
    if tally.seen == 0:
        raise ValueError(
            "The training dataloader yielded no batches; is the dataset empty? (A model "
            "with BatchNorm skips batches of a single image: use a larger batch size.)"
            if single_batch_fails
            else "The training dataloader yielded no batches; is the dataset empty?"
        )
    return tally


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
    epoch: int | None = None,
) -> tuple[float, float]:
    """Train ``model`` for one pass over ``dataloader``; return ``(loss, accuracy)`` per sample.

    The loop :func:`fit` runs each epoch. ``scheduler`` is stepped after every optimizer
    step; ``max_grad_norm`` clips the global gradient norm; ``batch_transform`` (e.g.
    MixUp) maps ``(X, y)`` to a mixed batch; ``max_steps`` caps the number of batches.
    A NaN or infinite loss raises :class:`~going_modular.divergence.NonFiniteLossError` (naming ``epoch`` and the
    step) and its step is not applied (see the module's docstring for how it is checked
    on a CPU and on CUDA). A model with BatchNorm skips a batch of a single image
    (BatchNorm cannot train on one), as ``drop_last`` would.
    """
    return _train_epoch(
        model,
        dataloader,
        loss_fn,
        optimizer,
        device,
        scheduler=scheduler,
        max_grad_norm=max_grad_norm,
        amp=amp,
        scaler=scaler,
        batch_transform=batch_transform,
        max_steps=max_steps,
        progress=progress,
        epoch=epoch,
    ).result()


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
) -> tuple[float, float]:
    """Evaluate ``model`` on ``dataloader``; return ``(loss, accuracy)`` averaged per sample."""
    model.eval()
    tally = _Tally()
    for X, y in _batches(dataloader, max_steps, "test", progress):
        X, y = X.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with autocast(device, amp):
            logits = model(X)
            loss = loss_fn(logits, y)
        tally.add(loss, logits, y)
    if tally.seen == 0:
        raise ValueError(
            "The test dataloader yielded no batches; is the dataset empty?"
        )
    return tally.result()


def _run_length(
    train_data: Iterable, recipe: Recipe
) -> tuple[int, int | None, int | None]:
    """The run's epochs, the steps of a full epoch and the total steps (None: unknown)."""
    per_epoch, length = recipe.max_steps_per_epoch, _length(train_data)
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


def _test_epoch(
    model: nn.Module, test_data: Iterable, loss_fn: nn.Module, device, amp: bool,
    progress: bool, epoch: int,
) -> tuple[float, float]:  # fmt: skip
    """:func:`evaluate` after training ``epoch``; a NaN or infinite test loss is an error."""
    test_loss, test_acc = evaluate(
        model, test_data, loss_fn, device, amp=amp, progress=progress
    )
    if not math.isfinite(test_loss):
        raise NonFiniteLossError(
            f"The test loss is {test_loss} after epoch {epoch} (every training loss "
            "was finite). Likely causes: NaN/infinite values in the test inputs, or "
            "weights that overflowed in the last steps (lower the learning rate or "
            "clip gradients)."
        )
    return test_loss, test_acc


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
) -> dict[str, list[float]]:
    """Train ``model`` on ``train_data`` with ``recipe``, testing on ``test_data`` after
    each epoch; return the per-epoch history (:data:`RESULT_KEYS`).

    ``train_data`` and ``test_data`` are DataLoaders, or any iterables of ``(X, y)``
    batches (each epoch iterates again). ``test_data=None`` skips testing (the history has
    no ``test_*`` values then). ``device`` defaults to CUDA when there is a GPU. The
    optimiser, schedule and losses are built from ``recipe``; the schedule is stepped after
    every optimizer step. ``recipe.amp`` trains and tests under autocast: float16 with
    gradient scaling on CUDA, bfloat16 on a CPU.

    ``recipe.time_budget`` (seconds, counted from the call) stops training early: once it
    is spent, the current epoch's training ends after the step in progress, that epoch is
    tested and recorded as usual (its ``train_*`` values cover the steps it ran), and no
    further epoch starts. The last test pass runs after the budget.

    ``callbacks`` are called as ``callback(epoch, results)`` after each completed (and
    checkpointed) epoch; one that returns True stops training after that epoch.

    ``checkpoint_dir`` makes long runs resumable: after each completed epoch, the model,
    optimiser, scheduler, gradient scaler and random states, the epoch and the results so far
    are saved atomically to ``checkpoint_dir/checkpoint.pth``. Called again with that folder
    (after an interruption, a crash, a disconnected notebook), training continues after the
    last completed epoch and the returned results include the earlier epochs; on a CPU with
    ``num_workers=0`` the losses are exactly those of an uninterrupted run. A checkpoint of
    another model, or of a recipe with other ``epochs``, ``steps``,
    ``max_steps_per_epoch``, ``amp``, ``max_grad_norm``, ``lr``, ``weight_decay``,
    ``label_smoothing``, optimiser or scheduler raises
    :class:`~going_modular.checkpoint.CheckpointMismatchError`.

    Both loaders are checked before training starts. A NaN or infinite training or test loss
    raises :class:`~going_modular.divergence.NonFiniteLossError` (the bad step is not applied); a finite loss above
    :data:`~going_modular.divergence.LOSS_EXPLOSION_FACTOR` times the first step's loss (or above that factor when
    the first loss was below 1) raises :class:`~going_modular.divergence.LossExplodedError`, before the epoch is
    recorded. Both are :class:`~going_modular.divergence.TrainingDiverged` and carry ``epoch`` and ``results``.
    """
    _check_loaders(train_data, test_data)
    device = get_device() if device is None else torch.device(device)
    model.to(device)
    epochs, per_epoch, total_steps = _run_length(train_data, recipe)
    optimizer = recipe.build_optimizer(model, fused=device.type in _ASYNC_DEVICES)
    scheduler = recipe.build_schedule(optimizer, total_steps)
    loss_fn, test_loss_fn = recipe.build_losses()
    scaler = None
    if recipe.amp and device.type == "cuda":
        scaler = torch.amp.GradScaler("cuda")
    elif _defer_loss_check(device, optimizer):
        scaler = _unit_scaler(device)
    state = TrainingState(
        model,
        optimizer,
        scheduler,
        scaler,
        training_config(model, recipe, epochs, optimizer, scheduler),
    )
    keys = [k for k in RESULT_KEYS if test_data is not None or not k.startswith("test")]
    results: dict[str, list[float]] = {key: [] for key in keys}
    first_loss: float | None = None
    done = 0
    if checkpoint_dir is not None:
        checkpoint_dir = Path(checkpoint_dir)
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        checkpoint = state.resume(checkpoint_dir)
        if checkpoint is not None:
            done, first_loss = checkpoint["epoch"], checkpoint["first_loss"]
            results = {k: list(v) for k, v in checkpoint["results"].items()}
            rest = (
                f"continuing with epoch {done + 1}"
                if done < epochs
                else "nothing left to train"
            )
            print(
                f"Resuming from {checkpoint_dir / CHECKPOINT_NAME}: {done} of {epochs} "
                f"epochs done; {rest}."
            )
    deadline = (
        None if recipe.time_budget is None else time.perf_counter() + recipe.time_budget
    )
    stopped = ""
    epoch = done
    try:
        for epoch in range(done + 1, epochs + 1):
            start = time.perf_counter()
            if deadline is not None and epoch > done + 1 and start >= deadline:
                stopped = f"Time budget of {recipe.time_budget:.0f} s spent"
                break
            loader = train_data
            if deadline is not None:
                loader = _UntilDeadline(train_data, deadline)
            max_steps = recipe.max_steps_per_epoch
            if recipe.steps is not None:
                max_steps = min(per_epoch, recipe.steps - (epoch - 1) * per_epoch)
            tally = _train_epoch(
                model,
                loader,
                loss_fn,
                optimizer,
                device,
                scheduler=scheduler,
                max_grad_norm=recipe.max_grad_norm,
                amp=recipe.amp,
                scaler=scaler,
                batch_transform=recipe.batch_transform,
                max_steps=max_steps,
                progress=progress,
                epoch=epoch,
            )
            train_loss, train_acc = tally.result()
            trained = time.perf_counter()
            if first_loss is None:
                first_loss = float(tally.first)
            values = {"train_loss": train_loss, "train_acc": train_acc}
            if test_data is not None:
                values["test_loss"], values["test_acc"] = _test_epoch(
                    model, test_data, test_loss_fn, device, recipe.amp, progress, epoch
                )
            losses = {"training": train_loss, "test": values.get("test_loss")}
            check_not_exploded(epoch, losses, first_loss, optimizer)
            end = time.perf_counter()
            values |= {
                "steps": tally.steps,
                "train_seconds": trained - start,
                "test_seconds": end - trained,
                "epoch_seconds": end - start,
            }
            for key in results:
                results[key].append(values[key])
            if checkpoint_dir is not None:
                state.save(checkpoint_dir, epoch, results, first_loss)
            stop = [bool(callback(epoch, results)) for callback in callbacks]
            if progress:
                print(
                    f"Epoch {epoch:>3}/{epochs} | "
                    + " | ".join(f"{k} {values[k]:.4f}" for k in _SHOWN if k in values)
                    + f" | {values['epoch_seconds']:.1f} s"
                )
            if deadline is not None and loader.stopped:
                stopped = f"Time budget of {recipe.time_budget:.0f} s spent"
                break
            if any(stop):
                stopped = "A callback stopped training"
                break
    except TrainingDiverged as error:
        error.epoch, error.results = epoch, results
        raise
    if progress and stopped:
        print(f"{stopped}: stopped in epoch {len(results['train_loss'])}.")
    return results
