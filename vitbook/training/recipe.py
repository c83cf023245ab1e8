"""What a training run needs besides the model and the data: a :class:`Recipe`.

A recipe names the optimiser and its learning rate, the weight decay (sparing biases and
norms), the learning-rate schedule, the loss, a batch transform such as MixUp, and the
run's length and safety limits. :func:`vitbook.training.loop.fit` builds the parts from it
and trains::

    recipe = Recipe(lr=1e-3, weight_decay=0.05, schedule="warmup_cosine",
                    warmup_steps=100, label_smoothing=0.1, epochs=10)
    results = fit(model, train_loader, test_loader, recipe)

:func:`learning_rates` lists a recipe's learning rate at every step, for plots and tests.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from going_modular.data.checks import (
    check_non_negative,
    check_positive,
    check_range,
    check_sizes,
)
from vitbook.training.optim import (
    param_groups_weight_decay,
    warmup_cosine_schedule,
)

__all__ = ["SCHEDULES", "BatchTransform", "Recipe", "Schedule", "learning_rates"]

BatchTransform = Callable[
    [torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]
]
#: A schedule builder: ``schedule(optimizer, total_steps)`` (``total_steps`` is None when
#: the run's length is unknown) returns a scheduler stepped once per optimizer step.
Schedule = Callable[
    [torch.optim.Optimizer, int | None], torch.optim.lr_scheduler.LRScheduler
]
SCHEDULES = ("constant", "warmup_cosine")


def _given(**values: Any) -> dict[str, Any]:
    """The optional ``values`` that are set (not None), for the checks."""
    return {name: value for name, value in values.items() if value is not None}


@dataclasses.dataclass(frozen=True)
class Recipe:
    """The hyper-parameters of a training run; :func:`vitbook.training.loop.fit` applies them.

    * ``optimizer`` is called as ``optimizer(param_groups, lr=lr)``: an optimiser class
      (``torch.optim.AdamW``, ``torch.optim.Adam``) or a ``functools.partial`` of one
      (``partial(torch.optim.SGD, momentum=0.9)``). ``weight_decay`` is set per group:
      with ``exempt_1d_params`` biases and norm scales (1-D tensors) get none, as timm
      and DeiT do (:func:`~vitbook.training.optim.param_groups_weight_decay`). Frozen
      parameters (``requires_grad=False``) are left out. An optimiser already built
      (``torch.optim.SGD(model.parameters(), lr=0.1)``, as the course passes one) is used
      as it is: its own learning rate and weight decay apply, and ``lr`` only names the
      run in its checkpoint.
    * ``schedule``: ``"constant"``; ``"warmup_cosine"`` (linear warmup over
      ``warmup_steps`` optimizer steps, then a cosine to 0 at the run's last step,
      :func:`~vitbook.training.optim.warmup_cosine_schedule`); or a :data:`Schedule` that
      builds any scheduler from the optimiser and the run's number of steps.
    * ``loss_fn`` defaults to cross-entropy with ``label_smoothing``; ``test_loss_fn`` to
      plain cross-entropy (or ``loss_fn`` when one is given), so that a smoothed run still
      reports the usual test loss. ``batch_transform`` maps each training batch ``(X, y)``
      (e.g. MixUp/CutMix, which return soft targets); it may keep state, such as a count
      of the batches it mixed, so give each run its own.
    * Length: ``epochs`` passes over the training data, each at most
      ``max_steps_per_epoch`` batches; or ``steps`` optimizer steps in all (then as many
      passes as needed, the last one cut short). ``time_budget`` (seconds) stops earlier.
      ``max_eval_steps`` caps each test pass at so many batches (None: the whole test set).
    * ``max_grad_norm`` clips the global gradient norm; ``amp`` trains and tests under
      autocast (float16 with gradient scaling on CUDA, bfloat16 on a CPU).
    """

    lr: float = 1e-3
    optimizer: Callable[..., torch.optim.Optimizer] | torch.optim.Optimizer = (
        torch.optim.AdamW
    )
    weight_decay: float = 0.0
    exempt_1d_params: bool = True
    schedule: str | Schedule = "constant"
    warmup_steps: float = 0
    label_smoothing: float = 0.0
    loss_fn: nn.Module | None = None
    test_loss_fn: nn.Module | None = None
    batch_transform: BatchTransform | None = None
    epochs: int = 1
    steps: int | None = None
    max_steps_per_epoch: int | None = None
    max_eval_steps: int | None = None
    time_budget: float | None = None
    max_grad_norm: float | None = None
    amp: bool = False

    def __post_init__(self) -> None:
        """Refuse values that make no sense, naming the field."""
        check_positive(lr=self.lr)
        check_sizes(epochs=self.epochs)
        check_sizes(
            **_given(
                steps=self.steps,
                max_steps_per_epoch=self.max_steps_per_epoch,
                max_eval_steps=self.max_eval_steps,
            )
        )
        check_positive(
            **_given(time_budget=self.time_budget, max_grad_norm=self.max_grad_norm)
        )
        if self.steps is not None and self.epochs != 1:
            raise ValueError(
                f"Give the run's length as epochs or as steps, not both (epochs="
                f"{self.epochs}, steps={self.steps})."
            )
        check_non_negative(weight_decay=self.weight_decay)
        if self.weight_decay and isinstance(self.optimizer, torch.optim.Optimizer):
            raise ValueError(
                "weight_decay applies to the optimiser the recipe builds: an optimiser "
                "already built keeps its own (set weight_decay when you build it)."
            )
        check_range("label_smoothing", self.label_smoothing, 0, 1, high_open=True)
        if self.label_smoothing and self.loss_fn is not None:
            raise ValueError(
                "label_smoothing applies to the default cross-entropy: with your own "
                "loss_fn, put the smoothing in it."
            )
        if not callable(self.schedule) and self.schedule not in SCHEDULES:
            raise ValueError(
                f"Unknown schedule {self.schedule!r}: choose one of {SCHEDULES} or pass "
                "a function (optimizer, total_steps) -> scheduler."
            )
        check_non_negative(warmup_steps=self.warmup_steps)
        if self.warmup_steps and self.schedule != "warmup_cosine":
            raise ValueError(
                f"warmup_steps={self.warmup_steps:g} needs schedule='warmup_cosine' "
                f"(the schedule is {self.schedule!r})."
            )

    def replace(self, **changes: Any) -> Recipe:
        """A copy with some fields changed, e.g. ``recipe.replace(amp=True)``."""
        return dataclasses.replace(self, **changes)

    def build_optimizer(
        self, model: nn.Module, fused: bool = False
    ) -> torch.optim.Optimizer:
        """The optimiser over ``model``'s trainable parameters, with the weight-decay groups.

        ``fused`` asks for a fused optimiser (one kernel per step) when the optimiser
        accepts it: on CUDA it lets a gradient scaler skip a bad step without a sync.
        An optimiser already built is returned as it is.
        """
        if isinstance(self.optimizer, torch.optim.Optimizer):
            return self.optimizer
        if self.weight_decay and self.exempt_1d_params:
            groups = param_groups_weight_decay(model, self.weight_decay)
        else:
            trainable = [p for p in model.parameters() if p.requires_grad]
            groups = [{"params": trainable, "weight_decay": self.weight_decay}]
        options = {"fused": True} if fused and _accepts(self.optimizer, "fused") else {}
        return self.optimizer(groups, lr=self.lr, **options)

    def build_schedule(
        self, optimizer: torch.optim.Optimizer, total_steps: int | None
    ) -> torch.optim.lr_scheduler.LRScheduler | None:
        """The scheduler for a run of ``total_steps`` optimizer steps (None if constant)."""
        if callable(self.schedule):
            return self.schedule(optimizer, total_steps)
        if self.schedule == "constant":
            return None
        if total_steps is None:
            raise ValueError(
                "The warmup_cosine schedule needs the run's number of steps: give the "
                "training data a length (a DataLoader has one), or set "
                "max_steps_per_epoch or steps."
            )
        return warmup_cosine_schedule(optimizer, self.warmup_steps, total_steps)

    def build_losses(self) -> tuple[nn.Module, nn.Module]:
        """The training loss and the test loss."""
        loss_fn = self.loss_fn or nn.CrossEntropyLoss(
            label_smoothing=self.label_smoothing
        )
        return loss_fn, self.test_loss_fn or self.loss_fn or nn.CrossEntropyLoss()


def _accepts(factory: Callable[..., Any], name: str) -> bool:
    """Whether ``factory`` (a class or a partial of one) takes the keyword ``name``."""
    try:
        return name in inspect.signature(factory).parameters
    except (TypeError, ValueError):  # no signature to read: do not guess
        return False


def learning_rates(recipe: Recipe, total_steps: int) -> list[float]:
    """The learning rate of each of the ``total_steps`` steps of a run with ``recipe``."""
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(()))], lr=recipe.lr)
    scheduler = recipe.build_schedule(optimizer, total_steps)
    rates = []
    for _ in range(total_steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()  # no gradient, no change: keeps the scheduler's order check quiet
        if scheduler is not None:
            scheduler.step()
    return rates
