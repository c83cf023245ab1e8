"""The training engine: one epoch of training, one of testing, and the loop around them.

Accuracy and loss are averaged per sample, not per batch, so a small last batch does not
count as much as a full one. Targets may be class indices or soft (mixed) distributions
of shape (batch, classes), as MixUp and CutMix produce.

``train(..., checkpoint_dir=DIR)`` saves everything needed to continue after each epoch and,
called again with the same folder, continues where it stopped (see :func:`train`).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import random
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from . import runs, settings

BatchTransform = Callable[
    [torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]
]
EpochCallback = Callable[[int, dict[str, list[float]]], None]

RESULT_KEYS = ("train_loss", "train_acc", "test_loss", "test_acc", "epoch_seconds")
CHECKPOINT_NAME = "checkpoint.pth"
CHECKPOINT_FORMAT = 1
# A training or test loss above this many times the first training step's loss (or above
# this many when that loss was below 1) means training exploded: the run stops.
LOSS_EXPLOSION_FACTOR = 1000.0
# On CUDA the non-finite-loss flag stays on the GPU and is read every this many steps (a
# read waits for the GPU); the gradient scaler skips a bad step meanwhile.
NONFINITE_CHECK_STEPS = 32


class TrainingDiverged(FloatingPointError):
    """Training diverged: the loss became NaN, infinite, or exploded."""


class NonFiniteLossError(TrainingDiverged):
    """The loss became NaN or infinite; the message names the epoch, the step and likely causes."""


class LossExplodedError(TrainingDiverged):
    """The loss stayed finite but grew beyond :data:`LOSS_EXPLOSION_FACTOR` x its start."""


class CheckpointMismatchError(ValueError):
    """``checkpoint_dir`` holds a checkpoint of another model or other training arguments."""


def _likely_causes(optimizer: torch.optim.Optimizer) -> list[str]:
    """The optimiser settings that can make a loss diverge, named with their values."""
    lrs = sorted({group["lr"] for group in optimizer.param_groups})
    causes = [
        f"a learning rate too high (now {', '.join(f'{lr:g}' for lr in lrs)}): "
        "lower it, add warmup or clip gradients"
    ]
    decays = sorted(
        {
            group["weight_decay"]
            for group in optimizer.param_groups
            if group.get("weight_decay", 0) * group["lr"] >= 1
        }
    )
    if decays:
        causes.insert(
            0,
            f"a weight decay too high ({', '.join(f'{wd:g}' for wd in decays)}: learning "
            "rate x weight decay is 1 or more, so each step flips or blows up the weights; "
            "0.05 is usual)",
        )
    return causes


def _non_finite_loss(
    value: float | str, where: str, optimizer: torch.optim.Optimizer, inputs: str
) -> NonFiniteLossError:
    return NonFiniteLossError(
        f"The training loss became {value} at {where}, so training stopped; this step was "
        "not applied to the weights. Likely causes: "
        + "; ".join([inputs, *_likely_causes(optimizer)])
        + "."
    )


def _where(epoch: int | None, step: int) -> str:
    return f"epoch {epoch}, step {step}" if epoch is not None else f"step {step}"


def _check_finite_loss(
    loss: torch.Tensor,
    X: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    epoch: int | None,
    step: int,
) -> None:
    """Raise :class:`NonFiniteLossError` when ``loss`` is NaN or infinite (before backward)."""
    if bool(torch.isfinite(loss.detach()).all()):
        return
    bad_inputs = int((~torch.isfinite(X)).sum()) if X.is_floating_point() else 0
    inputs = (
        f"{bad_inputs} NaN/infinite value(s) in this batch's inputs: clean the data"
        if bad_inputs
        else "the inputs of this batch are finite"
    )
    value = loss.detach().float().mean().item()
    raise _non_finite_loss(value, _where(epoch, step), optimizer, inputs)


class _DeviceLossCheck:
    """The NaN/inf check on a GPU without waiting for it at every step: the number of the
    first bad step is kept on the device and read every :data:`NONFINITE_CHECK_STEPS` steps
    (the gradient scaler has skipped that step's update meanwhile)."""

    def __init__(self, device: torch.device | str):
        self.first_bad = torch.zeros((), dtype=torch.long, device=device)

    def add(self, loss: torch.Tensor, step: int) -> None:
        bad = ~torch.isfinite(loss.detach()).all()
        self.first_bad = torch.where(bad & (self.first_bad == 0), step, self.first_bad)

    def check(self, optimizer: torch.optim.Optimizer, epoch: int | None) -> None:
        step = int(self.first_bad)
        if step:
            raise _non_finite_loss(
                "NaN or infinite",
                _where(epoch, step),
                optimizer,
                "NaN/infinite values in that batch's inputs (clean the data)",
            )


def _check_loaders(train_dataloader: Iterable, test_dataloader: Iterable) -> None:
    """Before training, refuse a loader that would yield no batch, saying why."""
    for name, loader in (("training", train_dataloader), ("test", test_dataloader)):
        if loader is None:
            raise ValueError(f"No {name} dataloader was given.")
        try:
            if len(loader) > 0:  # type: ignore[arg-type]
                continue
        except TypeError:  # no length (a generator, an IterableDataset): not checkable
            continue
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


def _autocast(device: torch.device | str, amp: bool):
    """float16 autocast on CUDA, bfloat16 on CPU, nothing when ``amp`` is False."""
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
    total = len(dataloader) if hasattr(dataloader, "__len__") else None
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
    is the first batch's loss (a tensor)."""

    def __init__(self) -> None:
        self.loss: torch.Tensor | float = 0.0
        self.correct: torch.Tensor | float = 0.0
        self.seen = 0
        self.first: torch.Tensor | None = None

    def add(self, loss: torch.Tensor, logits: torch.Tensor, y: torch.Tensor) -> None:
        n = logits.shape[0]
        if self.first is None:
            self.first = loss.detach().float()
        self.loss = self.loss + loss.detach().float() * n
        self.correct = self.correct + (logits.argmax(dim=1) == _hard_labels(y)).sum()
        self.seen += n

    def result(self) -> tuple[float, float]:
        return float(self.loss) / self.seen, float(self.correct) / self.seen


def _defer_loss_check(device: torch.device | str) -> bool:
    """Whether the NaN/inf check stays on the device (CUDA: reading a loss waits for it)."""
    return torch.device(device).type == "cuda"


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
    """One pass of training (see :func:`train_step`); returns its tally."""
    model.train()
    tally = _Tally()
    deferred = _defer_loss_check(device)
    if deferred and scaler is None:
        scaler = _unit_scaler(device)
    device_check = _DeviceLossCheck(device) if deferred else None
    single_batch_fails = _has_batchnorm(model)
    batches = _batches(dataloader, max_steps, "train", progress)
    for step, (X, y) in enumerate(batches, start=1):
        if single_batch_fails and X.shape[0] == 1:
            continue  # BatchNorm cannot train on one image: dropped, as drop_last would
        X, y = X.to(device, non_blocking=True), y.to(device, non_blocking=True)
        if batch_transform is not None:
            X, y = batch_transform(X, y)
        with _autocast(device, amp):
            logits = model(X)
            loss = loss_fn(logits, y)
        if device_check is None:
            _check_finite_loss(loss, X, optimizer, epoch, step)
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


def train_step(
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

    ``scheduler`` is stepped after every optimizer step; ``max_grad_norm`` clips the global
    gradient norm; ``batch_transform`` (e.g. torchvision's MixUp) maps ``(X, y)`` to a mixed
    batch; ``max_steps`` caps the number of batches for quick runs. A NaN or infinite loss
    raises :class:`NonFiniteLossError` (naming ``epoch`` and the step) and its step is not
    applied: on a CPU the loss is checked before backward at every step; on CUDA a flag kept
    on the GPU is read every :data:`NONFINITE_CHECK_STEPS` steps (reading waits for the GPU)
    and a gradient scaler skips the bad step's update. A model with BatchNorm skips a batch
    of a single image (BatchNorm cannot train on one), as ``drop_last`` would.
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
def test_step(
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
        with _autocast(device, amp):
            logits = model(X)
            loss = loss_fn(logits, y)
        tally.add(loss, logits, y)
    if tally.seen == 0:
        raise ValueError(
            "The test dataloader yielded no batches; is the dataset empty?"
        )
    return tally.result()


def _module(model: nn.Module) -> nn.Module:
    """The module whose weights a checkpoint holds (the original of a compiled model)."""
    return getattr(model, "_orig_mod", model)


def _rng_state() -> dict[str, Any]:
    """Python's, NumPy's and PyTorch's random states, as tensors and numbers only (so that
    ``torch.load(weights_only=True)`` reads them)."""
    _, key, pos, has_gauss, gauss = np.random.get_state()
    version, internal, python_gauss = random.getstate()
    return {
        "python": [version, list(internal), python_gauss],
        "numpy": [torch.from_numpy(key.astype(np.int64)), pos, has_gauss, gauss],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def _set_rng_state(state: dict[str, Any]) -> None:
    version, internal, python_gauss = state["python"]
    random.setstate((version, tuple(internal), python_gauss))
    key, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state(
        ("MT19937", key.numpy().astype(np.uint32), pos, has_gauss, gauss)
    )
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _training_config(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None,
    **arguments: Any,
) -> dict[str, Any]:
    """What a checkpoint must share with the call that continues it."""
    return arguments | {
        "optimizer": type(optimizer).__name__,
        "scheduler": type(scheduler).__name__ if scheduler is not None else None,
        "weights": {k: list(v.shape) for k, v in _module(model).state_dict().items()},
    }


def read_checkpoint(checkpoint_dir: str | Path) -> dict[str, Any] | None:
    """The training checkpoint :func:`train` saved in ``checkpoint_dir``, or None if there is
    none: ``epoch`` (completed), ``results`` so far, ``model``, ``optimizer``, ``scheduler``
    and ``scaler`` states, random states and the ``config`` it was trained with."""
    path = Path(checkpoint_dir) / CHECKPOINT_NAME
    if not path.exists():
        return None
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001  (torch.load raises many kinds)
        raise CheckpointMismatchError(
            f"Cannot read the training checkpoint {path}: {error}. Move it away to start "
            "afresh."
        ) from error
    if (
        not isinstance(checkpoint, dict)
        or checkpoint.get("format") != CHECKPOINT_FORMAT
    ):
        found = checkpoint.get("format") if isinstance(checkpoint, dict) else None
        raise CheckpointMismatchError(
            f"{path} is not a training checkpoint this version reads (format {found!r}, "
            f"expected {CHECKPOINT_FORMAT}). Move it away to start afresh."
        )
    return checkpoint


def _check_matches(saved: dict[str, Any], current: dict[str, Any], path: Path) -> None:
    """Raise :class:`CheckpointMismatchError` listing what differs between two configs."""
    problems = [
        f"{key}={saved.get(key)!r} there but {value!r} here"
        for key, value in current.items()
        if key != "weights" and saved.get(key) != value
    ]
    weights, ours = saved.get("weights", {}), current["weights"]
    differ = [
        f"{k}: {weights.get(k, 'missing')} there but {ours.get(k, 'missing')} here"
        for k in sorted(set(weights) | set(ours))
        if weights.get(k) != ours.get(k)
    ]
    if differ:
        problems.append(
            f"another model ({len(differ)} weight(s) differ, e.g. {differ[0]})"
        )
    if problems:
        raise CheckpointMismatchError(
            f"{path} was saved by another training: {'; '.join(problems)}. Call train() "
            "with the same model and arguments to continue it, or give another "
            "checkpoint_dir to start afresh."
        )


def _resume(
    checkpoint_dir: Path,
    config: dict[str, Any],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None,
    scaler: torch.amp.GradScaler | None,
) -> dict[str, Any] | None:
    """Load the checkpoint in ``checkpoint_dir`` into the training state, if there is one."""
    checkpoint = read_checkpoint(checkpoint_dir)
    if checkpoint is None:
        return None
    _check_matches(checkpoint["config"], config, checkpoint_dir / CHECKPOINT_NAME)
    _module(model).load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    if scheduler is not None:
        scheduler.load_state_dict(checkpoint["scheduler"])
    if scaler is not None and checkpoint["scaler"]:
        scaler.load_state_dict(checkpoint["scaler"])
    _set_rng_state(checkpoint["rng"])
    return checkpoint


def _save_checkpoint(
    checkpoint_dir: Path,
    epoch: int,
    config: dict[str, Any],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None,
    scaler: torch.amp.GradScaler | None,
    results: dict[str, list[float]],
    first_loss: float,
) -> None:
    state = {
        "format": CHECKPOINT_FORMAT,
        "epoch": epoch,
        "config": config,
        "model": _module(model).state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "scaler": scaler.state_dict() if scaler is not None else None,
        "rng": _rng_state(),
        "results": results,
        "first_loss": first_loss,
    }
    runs.atomic_write(checkpoint_dir / CHECKPOINT_NAME, lambda f: torch.save(state, f))


def _check_not_exploded(
    epoch: int,
    losses: dict[str, float],
    first_loss: float,
    optimizer: torch.optim.Optimizer,
) -> None:
    """Raise :class:`LossExplodedError` when a loss of ``epoch`` is beyond the limit."""
    limit = LOSS_EXPLOSION_FACTOR * max(first_loss, 1.0)
    for name, value in losses.items():
        if value > limit:
            raise LossExplodedError(
                f"The {name} loss of epoch {epoch} is {value:.3g}, more than "
                f"{LOSS_EXPLOSION_FACTOR:g} times the first step's loss ({first_loss:.3g}): "
                "training exploded, so it stopped and this epoch was not recorded. Likely "
                "causes: " + "; ".join(_likely_causes(optimizer)) + "."
            )


def train(
    model: nn.Module,
    train_dataloader: Iterable,
    test_dataloader: Iterable,
    optimizer: torch.optim.Optimizer,
    loss_fn: nn.Module,
    epochs: int,
    device: torch.device | str,
    *,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    max_grad_norm: float | None = None,
    amp: bool = False,
    batch_transform: BatchTransform | None = None,
    max_steps_per_epoch: int | None = None,
    test_loss_fn: nn.Module | None = None,
    progress: bool = True,
    time_budget: float | None = None,
    on_epoch_end: EpochCallback | None = None,
    checkpoint_dir: str | Path | None = None,
) -> dict[str, list[float]]:
    """Train and test ``model`` for ``epochs`` epochs.

    Returns a dict of per-epoch lists: ``train_loss``, ``train_acc``, ``test_loss``,
    ``test_acc`` and ``epoch_seconds``. ``amp`` uses float16 autocast with gradient scaling
    on CUDA and bfloat16 autocast on CPU. ``test_loss_fn`` defaults to ``loss_fn`` (pass a
    plain cross-entropy when training with label smoothing, to report the usual test loss).

    ``time_budget`` (seconds, counted from the call) stops training early: once it is spent,
    the current epoch's training ends after the step in progress, that epoch is tested and
    recorded as usual (its ``train_*`` values cover the steps it ran), and no further epoch
    starts. The final test pass runs after the budget, so the call takes a little longer.

    ``checkpoint_dir`` makes long runs resumable: after each completed epoch, the model,
    optimiser, scheduler, gradient scaler and random states, the epoch and the results so far
    are saved atomically to ``checkpoint_dir/checkpoint.pth``. Called again with that folder
    (after an interruption, a crash, a disconnected notebook), training continues after the
    last completed epoch and the returned results include the earlier epochs; on a CPU with
    ``num_workers=0`` the losses are exactly those of an uninterrupted run. A checkpoint of
    another model or other ``epochs``, ``max_steps_per_epoch``, ``amp``, ``max_grad_norm``,
    optimiser or scheduler raises :class:`CheckpointMismatchError`.

    Both loaders are checked before training starts. A NaN or infinite training or test loss
    raises :class:`NonFiniteLossError`; a finite loss above :data:`LOSS_EXPLOSION_FACTOR`
    times the first step's loss (or above that factor when the first loss was below 1)
    raises :class:`LossExplodedError`, before the epoch is recorded. ``on_epoch_end(epoch,
    results)`` is called after each completed (and checkpointed) epoch.
    """
    if time_budget is not None and not time_budget > 0:
        raise ValueError(
            f"time_budget must be a positive number of seconds, got {time_budget}."
        )
    if epochs <= 0:
        raise ValueError(f"epochs must be a positive integer, got {epochs}.")
    _check_loaders(train_dataloader, test_dataloader)
    model.to(device)
    scaler = None
    if amp and torch.device(device).type == "cuda":
        scaler = torch.amp.GradScaler("cuda")
    elif _defer_loss_check(device):
        scaler = _unit_scaler(device)
    results: dict[str, list[float]] = {key: [] for key in RESULT_KEYS}
    first_loss: float | None = None
    done = 0
    if checkpoint_dir is not None:
        checkpoint_dir = Path(checkpoint_dir)
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        config = _training_config(
            model,
            optimizer,
            scheduler,
            epochs=epochs,
            max_steps_per_epoch=max_steps_per_epoch,
            amp=amp,
            max_grad_norm=max_grad_norm,
        )
        checkpoint = _resume(
            checkpoint_dir, config, model, optimizer, scheduler, scaler
        )
        if checkpoint is not None:
            done, first_loss = checkpoint["epoch"], checkpoint["first_loss"]
            results = {k: list(checkpoint["results"][k]) for k in RESULT_KEYS}
            rest = (
                f"continuing with epoch {done + 1}"
                if done < epochs
                else "nothing left to train"
            )
            print(
                f"Resuming from {checkpoint_dir / CHECKPOINT_NAME}: {done} of {epochs} "
                f"epochs done; {rest}."
            )
    deadline = None if time_budget is None else time.perf_counter() + time_budget
    out_of_time = False
    for epoch in range(done + 1, epochs + 1):
        start = time.perf_counter()
        if deadline is not None and epoch > done + 1 and start >= deadline:
            out_of_time = True
            break
        loader = train_dataloader
        if deadline is not None:
            loader = _UntilDeadline(train_dataloader, deadline)
        tally = _train_epoch(
            model,
            loader,
            loss_fn,
            optimizer,
            device,
            scheduler=scheduler,
            max_grad_norm=max_grad_norm,
            amp=amp,
            scaler=scaler,
            batch_transform=batch_transform,
            max_steps=max_steps_per_epoch,
            progress=progress,
            epoch=epoch,
        )
        train_loss, train_acc = tally.result()
        if first_loss is None:
            first_loss = float(tally.first)
        test_loss, test_acc = test_step(
            model,
            test_dataloader,
            test_loss_fn or loss_fn,
            device,
            amp=amp,
            progress=progress,
        )
        if not math.isfinite(test_loss):
            raise NonFiniteLossError(
                f"The test loss is {test_loss} after epoch {epoch} (every training loss "
                "was finite). Likely causes: NaN/infinite values in the test inputs, or "
                "weights that overflowed in the last steps (lower the learning rate or "
                "clip gradients)."
            )
        _check_not_exploded(
            epoch, {"training": train_loss, "test": test_loss}, first_loss, optimizer
        )
        seconds = time.perf_counter() - start
        for key, value in zip(
            results, (train_loss, train_acc, test_loss, test_acc, seconds)
        ):
            results[key].append(value)
        if checkpoint_dir is not None:
            _save_checkpoint(
                checkpoint_dir,
                epoch,
                config,
                model,
                optimizer,
                scheduler,
                scaler,
                results,
                first_loss,
            )
        if on_epoch_end is not None:
            on_epoch_end(epoch, results)
        if progress:
            print(
                f"Epoch {epoch:>3}/{epochs} | train_loss {train_loss:.4f} | train_acc "
                f"{train_acc:.4f} | test_loss {test_loss:.4f} | test_acc {test_acc:.4f} | "
                f"{seconds:.1f} s"
            )
        if deadline is not None and loader.stopped:
            out_of_time = True
            break
    if progress and out_of_time:
        print(
            f"Time budget of {time_budget:.0f} s spent: stopped in epoch {len(results['test_acc'])}."
        )
    return results
