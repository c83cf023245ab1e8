"""Weight-decay groups and the warmup + cosine schedule."""

import math

import pytest
import torch
from torch import nn

from going_modular.optim import param_groups_weight_decay, warmup_cosine_schedule


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
    with pytest.raises(ValueError, match="warmup_steps <= total_steps"):
        warmup_cosine_schedule(optimizer, warmup_steps=5, total_steps=3)
