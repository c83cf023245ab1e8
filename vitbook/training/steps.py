"""What :func:`~vitbook.training.loop.fit` feeds the course's loop: batches under a
progress bar, a loader's length, and the unit gradient scaler of a NaN check kept on the
device."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterable

import torch
from tqdm import tqdm

__all__ = ["batches", "loader_length", "unit_scaler"]


def loader_length(data: Iterable) -> int | None:
    """The number of batches of ``data``, or None when it has no length (a generator)."""
    try:
        return len(data)  # type: ignore[arg-type]
    except TypeError:
        return None


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


def unit_scaler(device: torch.device | str) -> torch.amp.GradScaler:
    """A gradient scaler that does not scale (float32): it only skips, on the device, a step
    whose gradients are not finite."""
    return torch.amp.GradScaler(
        torch.device(device).type, init_scale=1.0, growth_interval=2**30
    )
