"""Training and testing: the course's ``train_step``, ``test_step`` and ``train``.

The calls of the course's "PyTorch Going Modular" chapter work unchanged::

    results = engine.train(model, train_dataloader, test_dataloader, optimizer, loss_fn,
                           epochs=5, device=device)

Losses and accuracies are averaged per sample (the course averages per batch, which
weighs a small last batch as much as a full one), and targets may be class indices or
soft (mixed) distributions of shape (batch, classes), as MixUp and CutMix produce.

Options the course leaves out are keywords: ``amp`` (mixed precision), ``scaler`` (a
``torch.amp.GradScaler``), ``max_grad_norm`` (gradient clipping), ``scheduler`` (stepped
after every optimizer step) and ``batch_transform`` (e.g. MixUp). Anything more, such as
checkpoints, a time budget or several processes, plugs in through :class:`Hooks`
(``vitbook.training.loop.fit`` is built that way); it never needs a second loop.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable, Iterable

import torch
from torch import nn
from tqdm.auto import tqdm

from going_modular.utils import check_device

__all__ = ["COURSE_KEYS", "Hooks", "autocast", "test_step", "train", "train_step"]

#: What :func:`train` returns, one value per epoch (hooks may add more).
COURSE_KEYS = ("train_loss", "train_acc", "test_loss", "test_acc")
BatchTransform = Callable[
    [torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]
]


class Hooks:
    """Where a caller adds to the loop; every method here does nothing.

    * ``start(results)`` before the first epoch: fill ``results`` (a resumed run) and
      return how many epochs are already done.
    * ``epoch_batches(epoch, dataloader)`` the batches to train ``epoch`` on (a time
      budget cuts them short, several processes shuffle per epoch); None stops training.
    * ``check_loss(loss, X, step)`` before each backward: raise to stop (a NaN guard).
    * ``end_pass(name, sums)`` after a ``"training"`` or ``"test"`` pass, with its
      ``[loss_sum, correct, seen]``: return the sums to use (several processes add theirs).
    * ``check_epoch(epoch, values)`` before an epoch is recorded: raise to refuse it, or add
      values to record.
    * ``end_epoch(epoch, results)`` after it is recorded: return True to stop.
    """

    def start(self, results: dict[str, list[float]]) -> int:
        return 0

    def epoch_batches(self, epoch: int, dataloader: Iterable) -> Iterable | None:
        return dataloader

    def check_loss(self, loss: torch.Tensor, X: torch.Tensor, step: int) -> None:
        pass

    def end_pass(self, name: str, sums: list) -> list:
        return sums

    def check_epoch(self, epoch: int, values: dict[str, float]) -> None:
        pass

    def end_epoch(self, epoch: int, results: dict[str, list[float]]) -> bool:
        return False


def autocast(device: torch.device | str, amp: bool):
    """float16 autocast on CUDA, bfloat16 on a CPU, nothing when ``amp`` is False."""
    if not amp:
        return contextlib.nullcontext()
    kind = torch.device(device).type
    return torch.autocast(
        kind, dtype=torch.float16 if kind == "cuda" else torch.bfloat16
    )


@contextlib.contextmanager
def _explained(X: torch.Tensor, y: torch.Tensor):
    """Re-raise a failing forward pass or loss with what the batch held: usually images of
    another size or channels than the model's, or labels beyond its classes."""
    try:
        yield
    except torch.cuda.OutOfMemoryError:
        raise
    except (RuntimeError, IndexError) as error:
        labels = (
            f"labels {int(y.min())}..{int(y.max())}" if y.ndim == 1 else "soft labels"
        )
        raise type(error)(
            f"{error}\n(The batch held images of shape {tuple(X.shape[1:])} and {labels}: "
            "check the image size and channels the model was built for, and that its "
            "number of classes covers every label.)"
        ) from error


def _check_run(train_dataloader: Iterable | None, epochs: int) -> None:
    """Refuse a missing training loader or a number of epochs that is not 1, 2, ..."""
    if train_dataloader is None:
        raise ValueError("train_dataloader is None: pass the training DataLoader.")
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(
            f"epochs must be a whole number of at least 1, got {epochs!r}."
        )


def _check_loss_and_optimizer(loss_fn: Callable, optimizer: object) -> None:
    """Refuse a loss class instead of a loss, and an optimizer that is not one (most
    often the loss and the optimizer passed in each other's place)."""
    if isinstance(loss_fn, type):
        raise TypeError(
            f"loss_fn is the class {loss_fn.__name__}, not a loss: pass an instance, "
            f"e.g. nn.{loss_fn.__name__}()."
        )
    if not callable(loss_fn) or not hasattr(optimizer, "param_groups"):
        raise TypeError(
            f"optimizer is a {type(optimizer).__name__} and loss_fn a "
            f"{type(loss_fn).__name__}: pass an optimizer (e.g. torch.optim.Adam("
            "model.parameters())) and a loss (e.g. nn.CrossEntropyLoss()), in the order "
            "model, train_dataloader, test_dataloader, optimizer, loss_fn."
        )


def _check_parts(
    model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: Callable, device
) -> None:
    """Refuse, before any work, a device that is not there, a loss or optimizer that is
    not one, or an optimiser built over another model's parameters."""
    check_device(device)
    _check_loss_and_optimizer(loss_fn, optimizer)
    ours = {id(p) for p in model.parameters()}
    if not any(id(p) in ours for g in optimizer.param_groups for p in g["params"]):
        raise ValueError(
            "The optimizer holds none of this model's parameters: build it over this "
            "model, e.g. torch.optim.Adam(model.parameters(), lr=1e-3)."
        )


def _warn_if_not_finite(epoch: int, train_loss: float) -> bool:
    """Print one line when ``epoch``'s training loss is NaN or infinite; whether it is."""
    if math.isfinite(train_loss):
        return False
    print(
        f"Warning: the training loss of epoch {epoch} is {train_loss}: the learning "
        "rate may be too high (try 10 times lower).",
        file=sys.stderr,
    )
    return True


def _correct(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """How many predictions are right; soft targets (batch, classes) count their top class."""
    labels = y.argmax(dim=1) if y.is_floating_point() and y.ndim == 2 else y
    return (logits.argmax(dim=1) == labels).sum()


def _means(name: str, sums: list, hooks: Hooks) -> tuple[float, float]:
    """The per-sample loss and accuracy from a pass's sums (read once, at the end)."""
    loss_sum, correct, seen = hooks.end_pass(name, sums)
    if seen == 0:
        raise ValueError(f"The {name} dataloader yielded no batches; is it empty?")
    return float(loss_sum) / seen, float(correct) / seen


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
    hooks: Hooks | None = None,
) -> tuple[float, float]:
    """Train ``model`` for one pass over ``dataloader``; return ``(train_loss, train_acc)``."""
    _check_parts(model, optimizer, loss_fn, device)
    hooks = hooks or Hooks()
    model.train()
    loss_sum, correct, seen = 0.0, 0.0, 0  # kept on the device until the end
    for step, (X, y) in enumerate(dataloader, start=1):
        X, y = X.to(device, non_blocking=True), y.to(device, non_blocking=True)
        if batch_transform is not None:
            X, y = batch_transform(X, y)
        # 1. forward pass, 2. the loss
        with autocast(device, amp), _explained(X, y):
            y_pred = model(X)
            loss = loss_fn(y_pred, y)
        hooks.check_loss(loss, X, step)
        # 3. zero the gradients, 4. backward, 5. step the optimiser
        optimizer.zero_grad(set_to_none=True)
        if scaler is None:
            loss.backward()
        else:  # float16: scale the loss up, then the gradients back down
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
        if max_grad_norm is not None:
            nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        if scaler is None:
            optimizer.step()
        else:
            scaler.step(optimizer)  # skipped when the gradients are not finite
            scaler.update()
        if scheduler is not None:
            scheduler.step()
        loss_sum = loss_sum + loss.detach().float() * len(y_pred)
        correct = correct + _correct(y_pred, y)
        seen += len(y_pred)
    return _means("training", [loss_sum, correct, seen], hooks)


def test_step(
    model: nn.Module,
    dataloader: Iterable,
    loss_fn: nn.Module,
    device: torch.device | str,
    *,
    amp: bool = False,
    hooks: Hooks | None = None,
) -> tuple[float, float]:
    """Test ``model`` on ``dataloader``; return ``(test_loss, test_acc)``."""
    if isinstance(model, nn.parallel.DistributedDataParallel):
        model = model.module  # each process tests its own share: no collectives
    model.eval()
    loss_sum, correct, seen = 0.0, 0.0, 0
    with torch.inference_mode():
        for X, y in dataloader:
            X, y = X.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with autocast(device, amp), _explained(X, y):
                y_pred = model(X)
                loss = loss_fn(y_pred, y)
            loss_sum = loss_sum + loss.detach().float() * len(y_pred)
            correct = correct + _correct(y_pred, y)
            seen += len(y_pred)
    return _means("test", [loss_sum, correct, seen], hooks or Hooks())


def train(
    model: nn.Module,
    train_dataloader: Iterable,
    test_dataloader: Iterable | None,
    optimizer: torch.optim.Optimizer,
    loss_fn: nn.Module,
    epochs: int,
    device: torch.device | str,
    *,
    test_loss_fn: nn.Module | None = None,
    hooks: Hooks | None = None,
    verbose: bool = True,
    **options,
) -> dict[str, list[float]]:
    """Train and test ``model`` for ``epochs`` epochs; return the results per epoch.

    ``options`` go to :func:`train_step` (``scheduler``, ``max_grad_norm``, ``amp``,
    ``scaler``, ``batch_transform``); ``amp`` applies to testing too. ``test_loss_fn``
    (default ``loss_fn``) scores the test set, e.g. without a training loss's smoothing.
    ``test_dataloader=None`` only trains. Prints one line per epoch unless ``verbose``
    is False, and returns ``{"train_loss": [...], "train_acc": [...], "test_loss": [...],
    "test_acc": [...]}``. The first epoch whose training loss is not finite prints a
    warning (training goes on, as the course's loop does).
    """
    _check_run(train_dataloader, epochs)
    _check_parts(model, optimizer, loss_fn, device)
    hooks = hooks or Hooks()
    keys = COURSE_KEYS if test_dataloader is not None else COURSE_KEYS[:2]
    results: dict[str, list[float]] = {key: [] for key in keys}
    done = hooks.start(results)
    model.to(device)
    warned = False  # about a training loss that is not finite: once
    for epoch in tqdm(range(done + 1, epochs + 1), disable=not verbose):
        batches = hooks.epoch_batches(epoch, train_dataloader)
        if batches is None:
            break
        start = time.perf_counter()
        train_loss, train_acc = train_step(
            model, batches, loss_fn, optimizer, device, hooks=hooks, **options
        )
        warned = warned or _warn_if_not_finite(epoch, train_loss)
        values = {"train_loss": train_loss, "train_acc": train_acc}
        trained = time.perf_counter()
        if test_dataloader is not None:
            values["test_loss"], values["test_acc"] = test_step(
                model, test_dataloader, test_loss_fn or loss_fn, device,
                amp=options.get("amp", False), hooks=hooks,
            )  # fmt: skip
        values |= {
            "train_seconds": trained - start,
            "test_seconds": time.perf_counter() - trained,
        }
        hooks.check_epoch(epoch, values)
        for key in results:
            results[key].append(values[key])
        if verbose:
            tqdm.write(
                f"Epoch: {epoch} | "
                + " | ".join(f"{key}: {results[key][-1]:.4f}" for key in keys)
            )
        if hooks.end_epoch(epoch, results):
            break
    return results
