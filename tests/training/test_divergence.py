"""vitbook.training.divergence: the checks that stop a diverging run, and what they say."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vitbook.training import divergence


def _adamw(lr: float, weight_decay: float) -> torch.optim.Optimizer:
    return torch.optim.AdamW(
        nn.Linear(2, 2).parameters(), lr=lr, weight_decay=weight_decay
    )


def test_likely_causes_name_the_learning_rate_and_a_too_high_weight_decay():
    assert "0.001" in divergence.likely_causes(_adamw(1e-3, 0.05))[0]
    causes = divergence.likely_causes(_adamw(0.1, 20.0))
    assert len(causes) == 2 and "weight decay too high (20" in causes[0]


def test_a_finite_loss_passes_and_a_nan_names_step_and_inputs():
    optimizer = _adamw(1e-3, 0.0)
    x = torch.ones(2, 3)
    divergence.check_finite_loss(torch.tensor(0.5), x, optimizer, epoch=1, step=4)
    x[0, 0] = float("nan")
    with pytest.raises(divergence.NonFiniteLossError, match="epoch 1, step 4") as info:
        divergence.check_finite_loss(torch.tensor(float("nan")), x, optimizer, 1, 4)
    assert "1 NaN/infinite value(s) in this batch's inputs" in str(info.value)


def test_the_device_check_keeps_the_first_bad_step():
    check = divergence.DeviceLossCheck("cpu")
    for step, loss in enumerate([1.0, float("inf"), float("nan")], start=1):
        check.add(torch.tensor(loss), step)
    with pytest.raises(divergence.NonFiniteLossError, match="epoch 3, step 2"):
        check.check(_adamw(1e-3, 0.0), epoch=3)


def test_an_explosion_is_measured_from_the_first_loss_or_from_one():
    optimizer = _adamw(1e-3, 0.0)
    limit = divergence.LOSS_EXPLOSION_FACTOR
    divergence.check_not_exploded(2, {"training": limit * 0.99}, 0.01, optimizer)
    with pytest.raises(divergence.LossExplodedError, match="test loss of epoch 2"):
        divergence.check_not_exploded(2, {"test": limit * 2.1}, 2.0, optimizer)
    assert issubclass(divergence.LossExplodedError, divergence.TrainingDiverged)
