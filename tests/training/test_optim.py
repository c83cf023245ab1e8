"""Weight-decay groups and the warmup + cosine schedule."""

import math

import pytest
import torch
from torch import nn

from vitbook.training.optim import (
    param_groups_weight_decay,
    warmup_cosine_schedule,
)


def test_biases_and_norms_are_not_decayed():
    model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 2))
    decay, no_decay = param_groups_weight_decay(model, 0.05)
    assert decay["weight_decay"] == 0.05 and no_decay["weight_decay"] == 0.0
    assert [p.shape for p in decay["params"]] == [(8, 4), (2, 8)]
    assert len(no_decay["params"]) == 4  # two biases, LayerNorm weight and bias


def test_warmup_then_cosine():
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    schedule = warmup_cosine_schedule(optimizer, warmup_steps=4, total_steps=12)
    lrs = []
    for _ in range(12):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    assert lrs[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert lrs[4] == pytest.approx(1.0)
    assert lrs[8] == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.5)))
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:]))


def test_bad_schedule_lengths():
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(
        ValueError, match=r"warmup_steps must be a finite number in \[0, 3\], got 5"
    ):
        warmup_cosine_schedule(optimizer, warmup_steps=5, total_steps=3)


def _factors(warmup_steps, total_steps=12) -> list[float]:
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    schedule = warmup_cosine_schedule(optimizer, warmup_steps, total_steps)
    return [schedule.lr_lambdas[0](step) for step in range(total_steps)]


GRID = [0, 0.01, 0.5, 1, 4, 4.01, 4.1, 4.5, 11, 11.5, 12]


@pytest.mark.parametrize("warmup", GRID)
def test_fractional_warmups_never_exceed_the_peak(warmup):
    factors = _factors(warmup)
    assert max(factors) <= 1.0  # 0.5 steps gave 2x before
    ramp = factors[: math.ceil(warmup)]
    assert ramp == sorted(ramp) and all(f > 0 for f in factors[:-1])


def test_schedule_is_continuous_and_monotone_in_the_warmup_length():
    for short, long in zip(GRID, GRID[1:]):
        for step in range(math.ceil(short)):
            assert _factors(long)[step] <= _factors(short)[step]
    for warmup in (0, 1, 4, 11):
        below, above = _factors(max(0, warmup - 1e-9)), _factors(warmup + 1e-9)
        assert above == pytest.approx(below, abs=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"warmup_steps": -1, "total_steps": 10}, "warmup_steps"),
        ({"warmup_steps": math.nan, "total_steps": 10}, "warmup_steps"),
        ({"warmup_steps": 0, "total_steps": 0}, "total_steps must be a positive"),
        ({"warmup_steps": 0, "total_steps": 2.5}, "total_steps must be a positive"),
        ({"warmup_steps": 1, "total_steps": 10, "min_factor": 1.5}, "min_factor"),
        ({"warmup_steps": 1, "total_steps": 10, "min_factor": -0.1}, "min_factor"),
    ],
)
def test_nonsense_schedule_values_are_named(kwargs, message):
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ValueError, match=message):
        warmup_cosine_schedule(optimizer, **kwargs)
