"""images_per_second: the steps it runs, training or inference, and the rate it reports."""

from __future__ import annotations

import itertools

import torch
from torch import nn

from vitbook.training.timing import images_per_second


def _counted():
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 3))
    calls = []
    model.register_forward_hook(
        lambda module, inputs, out: calls.append((module.training, out.dtype))
    )
    return model, calls


def test_training_steps_warm_up_then_keep_the_best_of_the_repeats():
    model, calls = _counted()
    x, y = torch.randn(8, 3, 2, 2), torch.randint(0, 3, (8,))
    before = model[1].weight.detach().clone()
    ticks = itertools.count()  # a clock that advances one second per reading
    rate = images_per_second(
        model, x, y, steps=4, warmup=2, repeats=3, clock=lambda: next(ticks)
    )
    assert len(calls) == 2 + 3 * 4 and all(training for training, _ in calls)
    assert rate == 4 * 8 / 1  # 4 steps of 8 images between two readings
    assert not torch.equal(before, model[1].weight)  # the optimizer stepped


def test_the_given_optimizer_is_stepped_and_amp_is_bfloat16_on_a_cpu():
    model, calls = _counted()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = []
    optimizer.register_step_post_hook(lambda *args: steps.append(1))
    x, y = torch.randn(8, 3, 2, 2), torch.randint(0, 3, (8,))
    assert images_per_second(model, x, y, steps=2, optimizer=optimizer, amp=True) > 0
    assert len(steps) == 3 and {dtype for _, dtype in calls} == {torch.bfloat16}


def test_without_labels_it_times_inference():
    model, calls = _counted()
    before = model[1].weight.detach().clone()
    rate = images_per_second(model, torch.randn(8, 3, 2, 2), steps=3)
    assert rate > 0 and len(calls) == 4 and not any(t for t, _ in calls)
    assert torch.equal(before, model[1].weight)
