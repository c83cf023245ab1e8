"""A CPU's fastest training step, measured, and a run planned in steps for a time budget.

    options, rates = fastest_step(model, images, labels)
    steps = steps_for_budget(110, rates[options], batch_size=256)
    with options.attention():
        fit(model, train, test, Recipe(..., amp=options.amp, steps=steps))

Whether bfloat16 autocast helps, and whether ``F.scaled_dot_product_attention`` is faster with
its fused CPU kernel or with its plain "math" one, depends on the model and the processor:
with 49 tokens of 16-dimensional heads the fused kernel can be several times slower in
bfloat16 than the math kernel (benchmarks/README.md). So nothing is assumed:
:func:`fastest_step` times each option on the model and batch at hand, side by side.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from going_modular.training.timing import images_per_second

__all__ = ["CANDIDATES", "StepOptions", "fastest_step", "steps_for_budget"]


@dataclass(frozen=True)
class StepOptions:
    """How a training step runs: ``amp`` (bfloat16 autocast on a CPU, float16 on CUDA) and
    ``math_attention`` (SDPA's math kernel instead of the fused one it would pick)."""

    amp: bool = False
    math_attention: bool = False

    @contextlib.contextmanager
    def attention(self) -> Iterator[None]:
        """The attention kernel for the ``with`` block (the default one unless
        ``math_attention``); wrap the training call in it."""
        if not self.math_attention:
            yield
            return
        with sdpa_kernel(SDPBackend.MATH):
            yield

    def __str__(self) -> str:
        precision = "bf16 autocast" if self.amp else "fp32"
        return precision + (", math attention" if self.math_attention else "")


CANDIDATES = (
    StepOptions(),
    StepOptions(math_attention=True),
    StepOptions(amp=True),
    StepOptions(amp=True, math_attention=True),
)


def fastest_step(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    candidates: Sequence[StepOptions] = CANDIDATES,
    *,
    steps: int = 4,
    repeats: int = 3,
) -> tuple[StepOptions, dict[StepOptions, float]]:
    """The fastest of ``candidates`` for training ``model`` on batches like ``images``, and
    every candidate's images per second.

    Each candidate is timed ``repeats`` times, in alternating order (so a change in the
    machine's load falls on all of them), ``steps`` training steps each after one untimed
    step, on a copy of ``model``: the model's own weights do not change. A candidate's rate
    is its best repeat.
    """
    if not candidates:
        raise ValueError("fastest_step needs at least one candidate.")
    trial = copy.deepcopy(model)
    rates = dict.fromkeys(candidates, 0.0)
    for repeat in range(repeats):
        for options in candidates if repeat % 2 == 0 else candidates[::-1]:
            with options.attention():
                rate = images_per_second(
                    trial, images, labels, steps=steps, amp=options.amp
                )
            rates[options] = max(rates[options], rate)
    return max(rates, key=rates.__getitem__), rates


def steps_for_budget(
    seconds: float, images_per_s: float, batch_size: int, *, reserve: float = 0.0
) -> int:
    """Optimizer steps that fit in ``seconds`` at ``images_per_s``, less ``reserve``
    seconds (for test passes): a schedule planned in steps, not rounded to whole epochs."""
    if not (seconds > reserve >= 0 and images_per_s > 0 and batch_size > 0):
        raise ValueError(
            f"Need seconds > reserve >= 0, images_per_s > 0 and batch_size > 0; got "
            f"seconds={seconds}, reserve={reserve}, images_per_s={images_per_s}, "
            f"batch_size={batch_size}."
        )
    return max(1, math.floor((seconds - reserve) * images_per_s / batch_size))
