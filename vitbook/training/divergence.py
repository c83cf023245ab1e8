"""When training has diverged: a NaN or infinite loss, or one that exploded.

:func:`vitbook.training.loop.fit` stops a run with :class:`NonFiniteLossError` or
:class:`LossExplodedError` (both :class:`TrainingDiverged`) and a message that names the
step and the likely causes with their values (the learning rate, the weight decay, the
inputs). On a CPU the loss is checked at every step, before backward
(:func:`check_finite_loss`); on CUDA a :class:`DeviceLossCheck` keeps the number of the
first bad step on the GPU and is read every :data:`NONFINITE_CHECK_STEPS` steps.
"""

from __future__ import annotations

import torch

__all__ = [
    "LOSS_EXPLOSION_FACTOR",
    "NONFINITE_CHECK_STEPS",
    "DeviceLossCheck",
    "LossExplodedError",
    "NonFiniteLossError",
    "TrainingDiverged",
    "check_finite_loss",
    "check_not_exploded",
    "likely_causes",
    "non_finite_elsewhere",
    "non_finite_loss",
]

# A training or test loss above this many times the first training step's loss (or above
# this many when that loss was below 1) means training exploded: the run stops.
LOSS_EXPLOSION_FACTOR = 1000.0
# On CUDA the non-finite-loss flag stays on the GPU and is read every this many steps (a
# read waits for the GPU); the gradient scaler skips a bad step meanwhile.
NONFINITE_CHECK_STEPS = 32


class TrainingDiverged(FloatingPointError):
    """Training diverged: the loss became NaN, infinite, or exploded.

    Raised by :func:`fit` with ``epoch`` (the epoch it happened in) and ``results`` (the
    history of the epochs completed before it).
    """

    epoch: int | None = None
    results: dict[str, list[float]] | None = None


class NonFiniteLossError(TrainingDiverged):
    """The loss became NaN or infinite; the message names the epoch, the step and likely causes."""


class LossExplodedError(TrainingDiverged):
    """The loss stayed finite but grew beyond :data:`LOSS_EXPLOSION_FACTOR` x its start."""


def likely_causes(optimizer: torch.optim.Optimizer) -> list[str]:
    """The optimiser settings that can make a loss diverge, named with their values."""
    lrs = sorted({group["lr"] for group in optimizer.param_groups})
    causes = [
        f"a learning rate too high (now {', '.join(f'{lr:g}' for lr in lrs)}): "
        "lower it, add warmup or clip gradients"
    ]
    decays = sorted(
        {
            group["weight_decay"]
            for group in optimizer.param_groups
            if group.get("weight_decay", 0) * group["lr"] >= 1
        }
    )
    if decays:
        causes.insert(
            0,
            f"a weight decay too high ({', '.join(f'{wd:g}' for wd in decays)}: learning "
            "rate x weight decay is 1 or more, so each step flips or blows up the weights; "
            "0.05 is usual)",
        )
    return causes


def non_finite_loss(
    value: float | str, where: str, optimizer: torch.optim.Optimizer, inputs: str
) -> NonFiniteLossError:
    return NonFiniteLossError(
        f"The training loss became {value} at {where}, so training stopped; this step was "
        "not applied to the weights. Likely causes: "
        + "; ".join([inputs, *likely_causes(optimizer)])
        + "."
    )


def _where(epoch: int | None, step: int) -> str:
    return f"epoch {epoch}, step {step}" if epoch is not None else f"step {step}"


def check_finite_loss(
    loss: torch.Tensor,
    X: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    epoch: int | None,
    step: int,
) -> None:
    """Raise :class:`NonFiniteLossError` when ``loss`` is NaN or infinite (before backward)."""
    if bool(torch.isfinite(loss.detach()).all()):
        return
    bad_inputs = int((~torch.isfinite(X)).sum()) if X.is_floating_point() else 0
    inputs = (
        f"{bad_inputs} NaN/infinite value(s) in this batch's inputs: clean the data"
        if bad_inputs
        else "the inputs of this batch are finite"
    )
    value = loss.detach().float().mean().item()
    raise non_finite_loss(value, _where(epoch, step), optimizer, inputs)


def non_finite_elsewhere(
    optimizer: torch.optim.Optimizer, epoch: int | None, step: int
) -> NonFiniteLossError:
    """The error every process of a distributed run raises when another one's loss at
    ``step`` was NaN or infinite (this one's was finite)."""
    return non_finite_loss(
        "NaN or infinite in another process",
        _where(epoch, step),
        optimizer,
        "NaN/infinite values in that process's share of the batch (clean the data)",
    )


class DeviceLossCheck:
    """The NaN/inf check on a GPU without waiting for it at every step: the number of the
    first bad step is kept on the device and read every :data:`NONFINITE_CHECK_STEPS` steps
    (the gradient scaler has skipped that step's update meanwhile)."""

    def __init__(self, device: torch.device | str):
        self.first_bad = torch.zeros((), dtype=torch.long, device=device)

    def add(self, loss: torch.Tensor, step: int) -> None:
        bad = ~torch.isfinite(loss.detach()).all()
        self.first_bad = torch.where(bad & (self.first_bad == 0), step, self.first_bad)

    def check(self, optimizer: torch.optim.Optimizer, epoch: int | None) -> None:
        step = int(self.first_bad)
        if step:
            raise non_finite_loss(
                "NaN or infinite",
                _where(epoch, step),
                optimizer,
                "NaN/infinite values in that batch's inputs (clean the data)",
            )


def check_not_exploded(
    epoch: int,
    losses: dict[str, float | None],
    first_loss: float,
    optimizer: torch.optim.Optimizer,
) -> None:
    """Raise :class:`LossExplodedError` when a loss of ``epoch`` is beyond the limit."""
    limit = LOSS_EXPLOSION_FACTOR * max(first_loss, 1.0)
    for name, value in losses.items():
        if value is not None and value > limit:
            raise LossExplodedError(
                f"The {name} loss of epoch {epoch} is {value:.3g}, more than "
                f"{LOSS_EXPLOSION_FACTOR:g} times the first step's loss ({first_loss:.3g}): "
                "training exploded, so it stopped and this epoch was not recorded. Likely "
                "causes: " + "; ".join(likely_causes(optimizer)) + "."
            )
