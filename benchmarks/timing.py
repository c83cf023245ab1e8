"""Timing helpers shared by the benchmarks: training steps, and interleaved repeats.

On a shared machine the load changes from second to second, so things compared are timed in
alternating order (forward, then backward, repeat after repeat) and summarised by their
median (and best) run; ratios of those are what a benchmark reports.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


def autocast(bf16: bool, device: str = "cpu"):
    """bfloat16 autocast on ``device`` when ``bf16``, else nothing."""
    if not bf16:
        return contextlib.nullcontext()
    return torch.autocast(device, dtype=torch.bfloat16)


def train_steps(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    images: torch.Tensor,
    labels: torch.Tensor,
    steps: int,
    bf16: bool = False,
) -> float:
    """Run ``steps`` bare training steps (forward, cross-entropy, backward, optimizer step)
    on one batch; return images per second."""
    sync = torch.cuda.synchronize if images.is_cuda else (lambda: None)
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        with autocast(bf16, images.device.type):
            loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
    sync()
    return images.shape[0] * steps / (time.perf_counter() - start)


def interleave(
    runs: dict[str, Callable[[], float]],
    repeats: int,
    *,
    verbose: bool = True,
) -> dict[str, list[float]]:
    """Call each of ``runs`` (each returns a rate) once per repeat, in alternating order;
    return every rate per name."""
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for repeat in range(repeats):
        order = list(runs) if repeat % 2 == 0 else list(reversed(runs))
        for name in order:
            rates[name].append(runs[name]())
        if verbose:
            print(
                f"  repeat {repeat}: "
                + "  ".join(f"{n} {rates[n][-1]:.1f}" for n in runs),
                flush=True,
            )
    return rates


def median(rates: list[float]) -> float:
    """The median of ``rates``."""
    return statistics.median(rates)
