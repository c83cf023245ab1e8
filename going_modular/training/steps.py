"""One pass over the data: the training steps (with their NaN guard) and what a pass counts.

:class:`Stepper` trains a model on a sequence of batches: forward under :func:`autocast`,
the loss, a check that the loss is finite, backward, gradient clipping, the optimiser and
the schedule. It and the test pass (:func:`~going_modular.training.loop.evaluate`) add
each batch to a :class:`Tally`, whose sums stay on the device and are read once, at the end
of the pass.

Accuracy and loss are averaged per sample, not per batch, so a small last batch does not
count as much as a full one. Targets may be class indices or soft (mixed) distributions
of shape (batch, classes), as MixUp and CutMix produce.

The NaN guard: a NaN or infinite loss stops training, and its step is not applied to the
weights. By default the loss is checked at every step, before backward. With ``deferred``
(chosen by :func:`~going_modular.training.loop.fit` on CUDA, with a fused optimiser) the
check is a flag kept on the device, read every
:data:`~going_modular.training.divergence.NONFINITE_CHECK_STEPS` steps, while a gradient
scaler skips the bad step on the device. In a distributed run the processes agree at
every step, so that all of them stop at the same one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import sys
from collections.abc import Iterable

import torch
from torch import nn
from tqdm import tqdm

from going_modular.training import distributed as ddp
from going_modular.training.distributed import Distributed
from going_modular.training.divergence import (
    NONFINITE_CHECK_STEPS,
    DeviceLossCheck,
    check_finite_loss,
    non_finite_elsewhere,
)
from going_modular.training.recipe import BatchTransform

__all__ = [
    "Stepper",
    "Tally",
    "autocast",
    "batches",
    "loader_length",
    "unit_scaler",
]


def loader_length(data: Iterable) -> int | None:
    """The number of batches of ``data``, or None when it has no length (a generator)."""
    try:
        return len(data)  # type: ignore[arg-type]
    except TypeError:
        return None


def autocast(device: torch.device | str, amp: bool):
    """float16 autocast on CUDA, bfloat16 on a CPU, nothing when ``amp`` is False."""
    if not amp:
        return contextlib.nullcontext()
    kind = torch.device(device).type
    return torch.autocast(
        kind, dtype=torch.float16 if kind == "cuda" else torch.bfloat16
    )


def batches(dataloader: Iterable, max_steps: int | None, desc: str, progress: bool):
    """At most ``max_steps`` batches of ``dataloader``, under a progress bar."""
    total = loader_length(dataloader)
    if max_steps is not None:
        total = max_steps if total is None else min(total, max_steps)
    return tqdm(
        itertools.islice(dataloader, max_steps),
        total=total,
        desc=desc,
        leave=False,
        file=sys.stdout,
        disable=not progress,
        mininterval=0.5,  # fewer redraws: in a notebook each one costs the training
    )


def _hard_labels(y: torch.Tensor) -> torch.Tensor:
    """Class indices: soft targets (batch, classes) give their most likely class."""
    return y.argmax(dim=1) if y.is_floating_point() and y.ndim == 2 else y


class Tally:
    """Per-sample sums of the loss and of the correct predictions, kept on the device:
    adding a batch never waits for a GPU; :meth:`result` syncs once, at the end. ``first``
    is the first batch's loss (a tensor), ``steps`` the number of batches."""

    def __init__(self, name: str) -> None:
        self.name = name
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

    def result(self, ctx: Distributed | None = None) -> tuple[float, float]:
        """The mean loss and the accuracy per sample (over every process's samples)."""
        sums = [self.loss, self.correct, self.seen]
        loss, correct, seen = sums if ctx is None else ddp.all_sum(sums, ctx)
        if seen == 0:
            raise ValueError(
                f"The {self.name} dataloader yielded no batches; is the dataset empty?"
            )
        return float(loss) / seen, float(correct) / seen


def unit_scaler(device: torch.device | str) -> torch.amp.GradScaler:
    """A gradient scaler that does not scale (float32): it only skips, on the device, a step
    whose gradients are not finite."""
    return torch.amp.GradScaler(
        torch.device(device).type, init_scale=1.0, growth_interval=2**30
    )


def _has_batchnorm(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


@dataclasses.dataclass
class Stepper:
    """How a batch trains the model: the loss, the optimiser and what goes with it.

    ``deferred`` keeps the NaN check on the device (see the module); it needs a scaler to
    skip a bad step there, so one that does not scale is added when none is given.
    """

    loss_fn: nn.Module
    optimizer: torch.optim.Optimizer
    device: torch.device | str
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None
    max_grad_norm: float | None = None
    amp: bool = False
    scaler: torch.amp.GradScaler | None = None
    batch_transform: BatchTransform | None = None
    ctx: Distributed | None = None
    deferred: bool = False

    def __post_init__(self) -> None:
        if self.deferred and self.scaler is None:
            self.scaler = unit_scaler(self.device)

    def run(self, model: nn.Module, batches: Iterable, epoch: int | None) -> Tally:
        """One pass of training over ``batches``; a NaN or infinite loss raises
        :class:`~going_modular.training.divergence.NonFiniteLossError` naming ``epoch``
        and the step. A model with BatchNorm skips a batch of a single image."""
        model.train()
        tally = Tally("training")
        device_check = DeviceLossCheck(self.device) if self.deferred else None
        single_batch_fails = _has_batchnorm(model)
        for step, (X, y) in enumerate(batches, start=1):
            if single_batch_fails and X.shape[0] == 1:
                continue  # BatchNorm cannot train on one image: dropped, as drop_last would
            X, y = (
                X.to(self.device, non_blocking=True),
                y.to(self.device, non_blocking=True),
            )
            if self.batch_transform is not None:
                X, y = self.batch_transform(X, y)
            with autocast(self.device, self.amp):
                logits = model(X)
                loss = self.loss_fn(logits, y)
            self._check(loss, X, device_check, epoch, step)
            self._update(model, loss)
            tally.add(loss, logits, y)
        if device_check is not None:
            device_check.check(self.optimizer, epoch)
        if tally.seen == 0 and single_batch_fails:
            raise ValueError(
                "The training dataloader yielded no batches; is the dataset empty? (A "
                "model with BatchNorm skips batches of a single image: use a larger batch "
                "size.)"
            )
        return tally

    def _check(self, loss, X, device_check, epoch: int | None, step: int) -> None:
        """Raise before backward when the loss is NaN or infinite (here or, in a
        distributed run, in any process); or note it on the device (see the module)."""
        if device_check is not None:
            device_check.add(loss, step)
            if step % NONFINITE_CHECK_STEPS == 0:
                device_check.check(self.optimizer, epoch)
        elif self.ctx is None:
            check_finite_loss(loss, X, self.optimizer, epoch, step)
        elif ddp.any_rank(~torch.isfinite(loss.detach()).all(), self.ctx):
            check_finite_loss(loss, X, self.optimizer, epoch, step)  # if it was ours
            raise non_finite_elsewhere(self.optimizer, epoch, step)

    def _update(self, model: nn.Module, loss: torch.Tensor) -> None:
        """Backward, clip, step the optimiser (through the scaler) and the schedule."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.optimizer)
        else:
            loss.backward()
        if self.max_grad_norm is not None:
            nn.utils.clip_grad_norm_(model.parameters(), self.max_grad_norm)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
