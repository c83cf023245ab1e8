"""How fast a model runs here: images per second of training steps or of inference.

    speed = images_per_second(model, images, labels, steps=5, amp=True)   # training
    speed = images_per_second(model, images)                              # inference

The chapters time their models with it before choosing a precision or a run length, and the
benchmarks compare models and options with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from vitbook.training.loop import autocast

__all__ = ["images_per_second"]


def _sync(device: torch.device) -> None:
    """Wait for the GPU's queued work, so that a clock reading covers it (no-op on a CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def images_per_second(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor | None = None,
    *,
    steps: int = 5,
    warmup: int = 1,
    repeats: int = 1,
    amp: bool = False,
    optimizer: torch.optim.Optimizer | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Images per second of ``model`` on the batch ``images``, on the batch's device.

    With ``labels``: training steps (forward, cross-entropy, backward, optimizer step) in
    training mode, with ``optimizer`` (default: a new AdamW with lr 1e-3 over the model's
    parameters); the model's weights change. Without: forward passes in inference mode.
    ``warmup`` untimed steps come first, then the best of ``repeats`` timings of ``steps``
    steps each. ``amp`` runs under the engine's autocast (float16 on CUDA, bfloat16 on a
    CPU). ``clock`` reads seconds (default: wall-clock time); on CUDA the GPU is
    synchronised before each reading.
    """
    device = images.device
    model.to(device).train(labels is not None)
    if labels is not None and optimizer is None:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step() -> None:
        if labels is None:
            with torch.inference_mode(), autocast(device, amp):
                model(images)
            return
        with autocast(device, amp):
            loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for _ in range(warmup):
        step()
    best = 0.0
    for _ in range(repeats):
        _sync(device)
        start = clock()
        for _ in range(steps):
            step()
        _sync(device)
        best = max(best, steps * len(images) / (clock() - start))
    return best
