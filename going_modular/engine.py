"""The training engine: one epoch of training, one of testing, and the loop around them.

Accuracy and loss are averaged per sample, not per batch, so a small last batch does not
count as much as a full one. Targets may be class indices or soft (mixed) distributions
of shape (batch, classes), as MixUp and CutMix produce.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import sys
import time
from collections.abc import Callable, Iterable

import torch
from torch import nn
from tqdm import tqdm

BatchTransform = Callable[
    [torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]
]
EpochCallback = Callable[[int, dict[str, list[float]]], None]


class NonFiniteLossError(FloatingPointError):
    """The loss became NaN or infinite; the message names the epoch, the step and likely causes."""


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
    where = f"epoch {epoch}, step {step}" if epoch is not None else f"step {step}"
    bad_inputs = int((~torch.isfinite(X)).sum()) if X.is_floating_point() else 0
    lrs = sorted({group["lr"] for group in optimizer.param_groups})
    causes = [
        f"{bad_inputs} NaN/infinite value(s) in this batch's inputs: clean the data"
        if bad_inputs
        else "the inputs of this batch are finite",
        f"a learning rate too high (now {', '.join(f'{lr:g}' for lr in lrs)}): "
        "lower it, add warmup or clip gradients",
    ]
    raise NonFiniteLossError(
        f"The training loss became {loss.detach().float().mean().item()} at {where}, "
        "so training stopped; this step was not applied and nothing was saved. "
        "Likely causes: " + "; ".join(causes) + "."
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
    adding a batch never waits for a GPU; :meth:`result` syncs once, at the end."""

    def __init__(self) -> None:
        self.loss: torch.Tensor | float = 0.0
        self.correct: torch.Tensor | float = 0.0
        self.seen = 0

    def add(self, loss: torch.Tensor, logits: torch.Tensor, y: torch.Tensor) -> None:
        n = logits.shape[0]
        self.loss = self.loss + loss.detach().float() * n
        self.correct = self.correct + (logits.argmax(dim=1) == _hard_labels(y)).sum()
        self.seen += n

    def result(self) -> tuple[float, float]:
        return float(self.loss) / self.seen, float(self.correct) / self.seen


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
    raises :class:`NonFiniteLossError` (naming ``epoch`` and the step) before it is applied.
    """
    model.train()
    tally = _Tally()
    batches = _batches(dataloader, max_steps, "train", progress)
    for step, (X, y) in enumerate(batches, start=1):
        X, y = X.to(device, non_blocking=True), y.to(device, non_blocking=True)
        if batch_transform is not None:
            X, y = batch_transform(X, y)
        with _autocast(device, amp):
            logits = model(X)
            loss = loss_fn(logits, y)
        _check_finite_loss(loss, X, optimizer, epoch, step)
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
    if tally.seen == 0:
        raise ValueError(
            "The training dataloader yielded no batches; is the dataset empty?"
        )
    return tally.result()


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

    Both loaders are checked before training starts. A NaN or infinite training or test loss
    raises :class:`NonFiniteLossError`. ``on_epoch_end(epoch, results)`` is called after each
    completed epoch (the CLI keeps that epoch's weights, to save them if interrupted).
    """
    if time_budget is not None and not time_budget > 0:
        raise ValueError(
            f"time_budget must be a positive number of seconds, got {time_budget}."
        )
    if epochs <= 0:
        raise ValueError(f"epochs must be a positive integer, got {epochs}.")
    _check_loaders(train_dataloader, test_dataloader)
    model.to(device)
    use_scaler = amp and torch.device(device).type == "cuda"
    scaler = torch.amp.GradScaler("cuda") if use_scaler else None
    results: dict[str, list[float]] = {
        "train_loss": [],
        "train_acc": [],
        "test_loss": [],
        "test_acc": [],
        "epoch_seconds": [],
    }
    deadline = None if time_budget is None else time.perf_counter() + time_budget
    out_of_time = False
    for epoch in range(1, epochs + 1):
        start = time.perf_counter()
        if deadline is not None and epoch > 1 and start >= deadline:
            out_of_time = True
            break
        loader = train_dataloader
        if deadline is not None:
            loader = _UntilDeadline(train_dataloader, deadline)
        train_loss, train_acc = train_step(
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
                "clip gradients). Nothing was saved."
            )
        seconds = time.perf_counter() - start
        for key, value in zip(
            results, (train_loss, train_acc, test_loss, test_acc, seconds)
        ):
            results[key].append(value)
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
