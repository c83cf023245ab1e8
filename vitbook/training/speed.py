"""A CPU's fastest training step, measured, and a run planned in steps for a time budget.

    options, rates = fastest_step(model, images, labels)
    steps = steps_for_budget(110, rates[options], batch_size=256)
    with options.attention(model):
        fit(model, train, test, Recipe(..., amp=options.amp, steps=steps))

or, the same planned for a budget that counts everything (measuring, training, testing):

    plan = plan_for_budget(model, train, 150, Recipe(lr=2e-3, ...), tests=3,
                           test_images=10_000)
    with plan.options.attention(model):
        fit(model, train, test, plan.recipe)

Whether bfloat16 autocast helps, and whether ``F.scaled_dot_product_attention`` is faster with
its fused CPU kernel, with its plain "math" one (which computes in float32) or not used at all
(the model's own matmuls, in bfloat16 under autocast), depends on the model and the processor:
with 49 tokens of 16-dimensional heads the fused kernel can be several times slower in
bfloat16 than the math kernel (benchmarks/README.md). So nothing is assumed:
:func:`fastest_step` times each option on the model and batch at hand, side by side.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from collections.abc import Iterable, Iterator, Sequence, Sized
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from going_modular.models.layers import explicit_attention
from vitbook.training.recipe import Recipe
from vitbook.training.timing import images_per_second

__all__ = [
    "CANDIDATES",
    "BudgetPlan",
    "StepOptions",
    "fastest_step",
    "plan_for_budget",
    "prefer_channels_last",
    "steps_for_budget",
]


@dataclass(frozen=True)
class StepOptions:
    """How a training step runs: ``amp`` (bfloat16 autocast on a CPU, float16 on CUDA), and
    the attention computed by SDPA's math kernel instead of the fused one it would pick
    (``math_attention``) or as the model's own matmuls and softmax (``explicit_attention``,
    :func:`going_modular.models.layers.explicit_attention`)."""

    amp: bool = False
    math_attention: bool = False
    explicit_attention: bool = False

    def __post_init__(self) -> None:
        if self.math_attention and self.explicit_attention:
            raise ValueError(
                "Pick one way to compute attention: math_attention (SDPA's math kernel) "
                "or explicit_attention (the model's own matmuls), not both."
            )

    @contextlib.contextmanager
    def attention(self, model: nn.Module) -> Iterator[None]:
        """The attention kernel of ``model`` for the ``with`` block (SDPA's default one
        unless ``math_attention`` or ``explicit_attention``); wrap the training call in it."""
        if self.explicit_attention:
            with explicit_attention(model):
                yield
        elif self.math_attention:
            with sdpa_kernel(SDPBackend.MATH):
                yield
        else:
            yield

    def __str__(self) -> str:
        precision = "bf16 autocast" if self.amp else "fp32"
        if self.math_attention:
            return precision + ", math attention"
        return precision + (", explicit attention" if self.explicit_attention else "")


CANDIDATES = (
    StepOptions(),
    StepOptions(math_attention=True),
    StepOptions(amp=True),
    StepOptions(amp=True, math_attention=True),
    StepOptions(amp=True, explicit_attention=True),
)


def fastest_step(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    candidates: Sequence[StepOptions] = CANDIDATES,
    *,
    steps: int = 4,
    repeats: int = 3,
    hopeless: float = 5.0,
) -> tuple[StepOptions, dict[StepOptions, float]]:
    """The fastest of ``candidates`` for training ``model`` on batches like ``images``, and
    every candidate's images per second.

    Each candidate is timed up to ``repeats`` times, in alternating order (so a change in
    the machine's load falls on all of them), ``steps`` training steps each after one
    untimed step, on a copy of ``model``: the model's own weights do not change. A
    candidate's rate is its best repeat. A candidate more than ``hopeless`` times slower
    than the best after a round is not timed again: no change in load would make it the
    fastest, and where a CPU emulates bfloat16 (10-17x slower than float32 on an AMD EPYC)
    its repeats would take most of the time.
    """
    if not candidates:
        raise ValueError("fastest_step needs at least one candidate.")
    if not (steps >= 1 and repeats >= 1 and hopeless >= 1):
        raise ValueError(
            f"fastest_step needs steps >= 1, repeats >= 1 and hopeless >= 1 (a ratio to "
            f"the fastest); got steps={steps}, repeats={repeats}, hopeless={hopeless}."
        )
    trial = copy.deepcopy(model)
    rates = dict.fromkeys(candidates, 0.0)
    timed = list(candidates)
    for repeat in range(repeats):
        for options in timed if repeat % 2 == 0 else timed[::-1]:
            with options.attention(trial):
                rate = images_per_second(
                    trial, images, labels, steps=steps, amp=options.amp
                )
            rates[options] = max(rates[options], rate)
        best = max(rates.values())
        timed = [options for options in timed if hopeless * rates[options] >= best]
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


@dataclass(frozen=True)
class BudgetPlan:
    """A run planned for a time budget: the step ``options`` and every candidate's
    measured ``rates`` (images/s), and the ``recipe`` to train with (its ``steps``,
    ``max_steps_per_epoch`` = steps between tests, ``amp`` and ``time_budget`` set)."""

    options: StepOptions
    rates: dict[StepOptions, float]
    recipe: Recipe


def plan_for_budget(
    model: nn.Module,
    train_loader: Iterable,
    seconds: float,
    recipe: Recipe,
    *,
    tests: int = 1,
    test_images: int = 0,
    warmup: float = 0.05,
    margin: float = 0.9,
    candidates: Sequence[StepOptions] = CANDIDATES,
    repeats: int = 3,
) -> BudgetPlan:
    """Plan ``recipe`` so that measuring, training and ``tests`` test passes of
    ``test_images`` each fit in ``seconds``, counted from this call.

    Times ``candidates`` with :func:`fastest_step` (best of ``repeats``) on the loader's
    first batch (one draw of the loader), assumes a whole run reaches ``margin`` of the best measured speed and
    a test pass three times a training step's images/s (a forward pass is about a third
    of a step), and plans that many steps with a warmup over their first ``warmup``
    fraction (for ``schedule="warmup_cosine"``). The recipe's ``time_budget`` is what is
    left after measuring, less one test pass: if the run is slower than planned, training
    stops in time for the last test, with the schedule not fully decayed.

    An epoch of :func:`~vitbook.training.loop.fit` is at most one pass of the loader, so a
    loader shorter than ``steps / tests`` batches is tested after every pass: the plan
    counts those extra test passes and trains for correspondingly fewer steps. Give a
    longer loader (``DeviceLoader(..., passes=...)``) to test only ``tests`` times.
    """
    if not (0 < margin <= 1 and tests >= 1 and test_images >= 0 and 0 <= warmup < 1):
        raise ValueError(
            f"Need 0 < margin <= 1, tests >= 1, test_images >= 0 and 0 <= warmup < 1; "
            f"got margin={margin}, tests={tests}, test_images={test_images}, "
            f"warmup={warmup}."
        )
    start = time.perf_counter()
    images, labels = next(iter(train_loader))
    options, rates = fastest_step(
        model, images, labels, candidates=candidates, repeats=repeats
    )
    rate = margin * rates[options]
    one_test = test_images / (3 * rate)
    measuring = time.perf_counter() - start
    left = seconds - measuring
    if left <= tests * one_test:
        raise ValueError(
            f"A budget of {seconds:g} s is too short here: measuring the step took "
            f"{measuring:.0f} s and {tests} test pass(es) of {test_images} images need "
            f"about {tests * one_test:.0f} s more (at {rates[options]:.0f} images/s). "
            "Give more seconds, fewer candidates or repeats, or fewer tests."
        )
    steps = steps_for_budget(left, rate, len(images), reserve=tests * one_test)
    per_pass = len(train_loader) if isinstance(train_loader, Sized) else math.inf
    if math.ceil(steps / tests) > per_pass:  # fit also tests after every pass
        per_step = len(images) / rate + one_test / per_pass  # a step and its share
        steps = max(1, math.floor((left - one_test) / per_step))
    per_epoch = min(math.ceil(steps / tests), per_pass)
    planned = recipe.replace(
        amp=options.amp,
        epochs=1,
        steps=steps,
        max_steps_per_epoch=per_epoch,
        warmup_steps=round(warmup * steps),
        time_budget=left - one_test,
    )
    return BudgetPlan(options, rates, planned)


def prefer_channels_last(model: nn.Module) -> nn.Module:
    """Store ``model``'s 4-D weights channels-last when it has an overlapping convolution.

    A convolution whose kernel is larger than its stride (a CCT tokenizer, a CNN) runs
    faster on channels-last data on CPUs and GPUs alike (CCT-2/3x2 1.25x in float32 and
    1.47x in bfloat16, TinyVGG 1.40x and 2.15x, on the book's 2-core CPU; see
    benchmarks/README.md). A patchifying convolution (kernel = stride, as in ViT and
    ViT-Lite) gains nothing, so those models are left as they are. Works in place; returns
    ``model``.
    """
    overlapping = any(
        isinstance(m, nn.Conv2d) and any(k > s for k, s in zip(m.kernel_size, m.stride))
        for m in model.modules()
    )
    if overlapping:
        model.to(memory_format=torch.channels_last)
    return model
