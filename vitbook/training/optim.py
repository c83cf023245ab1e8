"""Optimiser helpers: weight decay that spares biases and norms, and warmup + cosine decay."""

from __future__ import annotations

import math

import torch
from torch import nn

from going_modular.data.checks import check_range, check_sizes

__all__ = ["param_groups_weight_decay", "warmup_cosine_schedule"]


def param_groups_weight_decay(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two parameter groups: weights decayed, biases and norm/embedding scales (1-D) not."""
    decay, no_decay = [], []
    for param in model.parameters():
        if param.requires_grad:
            (no_decay if param.ndim <= 1 else decay).append(param)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def warmup_cosine_schedule(
    optimizer: torch.optim.Optimizer,
    warmup_steps: float,
    total_steps: int,
    min_factor: float = 0.0,
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup from 0 over ``warmup_steps``, then cosine decay to ``min_factor`` x LR.

    Step it once per optimizer step (``fit`` does, for ``Recipe(schedule="warmup_cosine")``).
    Step ``s`` of the warmup gets ``min(1, (s + 1) / warmup_steps)`` of the LR, so a
    fractional ``warmup_steps`` never overshoots the peak.
    """
    check_sizes(total_steps=total_steps)
    check_range("warmup_steps", warmup_steps, 0, total_steps)
    check_range("min_factor", min_factor, 0, 1)

    def factor(step: int) -> float:
        if step < warmup_steps:
            return min(1.0, (step + 1) / warmup_steps)
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return min_factor + (1 - min_factor) * 0.5 * (
            1 + math.cos(math.pi * min(progress, 1.0))
        )

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
