"""The fastest-step measurement and the step plan for a time budget."""

import pytest
import torch
from torch import nn

from going_modular.models import build_model
from vitbook.training import speed
from vitbook.training.recipe import Recipe
from vitbook.training.speed import (
    CANDIDATES,
    StepOptions,
    fastest_step,
    plan_for_budget,
    steps_for_budget,
)


class Batches:
    """A loader of ``n`` batches, all the same one."""

    def __init__(self, batch, n):
        self.batch, self.n = batch, n

    def __len__(self):
        return self.n

    def __iter__(self):
        return (self.batch for _ in range(self.n))


def test_math_attention_switches_the_fused_kernels_off_only_inside_the_block():
    assert torch.backends.cuda.flash_sdp_enabled()
    with StepOptions(math_attention=True).attention(nn.Identity()):
        assert not torch.backends.cuda.flash_sdp_enabled()
        assert torch.backends.cuda.math_sdp_enabled()
    assert torch.backends.cuda.flash_sdp_enabled()
    with StepOptions().attention(nn.Identity()):
        assert torch.backends.cuda.flash_sdp_enabled()


def test_both_attention_kernels_give_the_same_logits():
    torch.manual_seed(0)
    model = build_model("cct_2_3x2", num_classes=10, img_size=28, in_channels=1).eval()
    x = torch.randn(4, 1, 28, 28)
    with StepOptions(math_attention=True).attention(model):
        math = model(x)
    torch.testing.assert_close(model(x), math, rtol=1e-5, atol=1e-5)


def test_explicit_attention_skips_sdpa_inside_the_block_with_the_same_logits(
    monkeypatch,
):
    torch.manual_seed(0)
    model = build_model("cct_2_3x2", num_classes=10, img_size=28, in_channels=1).eval()
    x = torch.randn(4, 1, 28, 28)
    fused = model(x)
    options = StepOptions(amp=True, explicit_attention=True)
    assert str(options) == "bf16 autocast, explicit attention"

    def refuse(*args, **kwargs):
        raise AssertionError("SDPA called inside explicit_attention")

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", refuse)
    with StepOptions(explicit_attention=True).attention(model):
        explicit = model(x)
    torch.testing.assert_close(explicit, fused, rtol=1e-5, atol=1e-5)
    with pytest.raises(AssertionError, match="SDPA called"):
        model(x)  # outside the block: SDPA again
    with pytest.raises(ValueError, match="Pick one way"):
        StepOptions(math_attention=True, explicit_attention=True)


def test_fastest_step_times_every_candidate_and_leaves_the_model_alone():
    torch.manual_seed(0)
    model = build_model("cct_2_3x2", num_classes=10, img_size=28, in_channels=1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    images, labels = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
    best, rates = fastest_step(model, images, labels, steps=1, repeats=1)
    assert set(rates) == set(CANDIDATES)
    assert all(rate > 0 for rate in rates.values())
    assert rates[best] == max(rates.values())
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key
    with pytest.raises(ValueError, match="at least one candidate"):
        fastest_step(model, images, labels, candidates=())
    for bad in (dict(steps=0), dict(repeats=0), dict(hopeless=0.5)):
        with pytest.raises(ValueError, match="hopeless >= 1"):
            fastest_step(model, images, labels, **bad)


def test_a_hopeless_candidate_is_timed_once_and_keeps_its_rate(monkeypatch):
    timed = []

    def fake_rate(model, images, labels, *, steps, amp):
        timed.append(amp)
        return 100.0 if amp else 1000.0  # bf16 emulated: 10x slower

    monkeypatch.setattr(speed, "images_per_second", fake_rate)
    model = nn.Linear(4, 2)
    images, labels = torch.randn(8, 4), torch.randint(0, 2, (8,))
    candidates = [StepOptions(), StepOptions(amp=True)]
    best, rates = fastest_step(model, images, labels, candidates, repeats=3)
    assert best == StepOptions()
    assert rates == {StepOptions(): 1000.0, StepOptions(amp=True): 100.0}
    assert timed == [False, True, False, False]  # bf16 dropped after the first round
    timed.clear()
    fastest_step(model, images, labels, candidates, repeats=3, hopeless=20)
    assert timed == [False, True, True, False, False, True]  # every round, alternating


def test_steps_for_budget_plans_whole_steps_in_the_seconds_left():
    assert steps_for_budget(100, 1280, 256) == 500
    assert steps_for_budget(100, 1280, 256, reserve=10) == 450  # 90 s * 1280 / 256
    assert steps_for_budget(1, 10, 256) == 1  # at least one step
    assert str(StepOptions(amp=True, math_attention=True)) == (
        "bf16 autocast, math attention"
    )
    for bad in (dict(seconds=5, reserve=5), dict(images_per_s=0), dict(batch_size=0)):
        args = dict(seconds=10, images_per_s=100, batch_size=8) | bad
        with pytest.raises(ValueError, match="seconds > reserve"):
            steps_for_budget(
                args["seconds"],
                args["images_per_s"],
                args["batch_size"],
                reserve=args.get("reserve", 0),
            )


def test_plan_for_budget_fits_measuring_training_and_tests_in_the_seconds():
    torch.manual_seed(0)
    model = build_model("tinyvgg", num_classes=10, img_size=28, in_channels=1)
    batch = (torch.randn(16, 1, 28, 28), torch.randint(0, 10, (16,)))
    base = Recipe(lr=2e-3, schedule="warmup_cosine", label_smoothing=0.1)
    plan = plan_for_budget(
        model, Batches(batch, 10**9), 1000, base, tests=4, test_images=10_000
    )
    rate = 0.9 * plan.rates[plan.options]
    one_test = 10_000 / (3 * rate)
    recipe = plan.recipe
    # the time budget leaves one test pass for the end, and measuring took some time
    left = recipe.time_budget + one_test
    assert 1000 - 120 < left < 1000
    # the steps that fit in what is left after 4 test passes, at 90% of the best speed
    assert recipe.steps == int((left - 4 * one_test) * rate / 16)
    assert recipe.max_steps_per_epoch * 4 >= recipe.steps
    assert recipe.max_steps_per_epoch * 3 < recipe.steps
    assert recipe.warmup_steps == round(0.05 * recipe.steps)
    assert recipe.amp == plan.options.amp and recipe.lr == 2e-3
    assert recipe.label_smoothing == 0.1 and recipe.schedule == "warmup_cosine"
    with pytest.raises(ValueError, match="margin"):
        plan_for_budget(model, [batch], 10, base, margin=0)


def test_a_loader_shorter_than_the_steps_between_tests_is_counted_in_the_plan():
    # fit tests after every pass; with a one-batch loader that is after every step, and
    # the plan sets a test pass aside for each of them, whatever this machine's speed
    torch.manual_seed(0)
    model = build_model("tinyvgg", num_classes=10, img_size=28, in_channels=1)
    batch = (torch.randn(16, 1, 28, 28), torch.randint(0, 10, (16,)))
    base = Recipe(lr=2e-3, schedule="warmup_cosine")
    plan = plan_for_budget(
        model, Batches(batch, 1), 120, base, tests=2, test_images=1_000, repeats=1
    )
    rate = 0.9 * plan.rates[plan.options]
    one_test = 1_000 / (3 * rate)
    recipe = plan.recipe
    left = recipe.time_budget + one_test
    assert recipe.max_steps_per_epoch == 1  # one pass of the loader
    # every step and its test pass fit in what is left; one more step would not
    assert recipe.steps * (16 / rate + one_test) <= left
    assert (recipe.steps + 2) * (16 / rate + one_test) > left


def test_a_budget_shorter_than_its_measurement_is_refused_plainly():
    model = build_model("tinyvgg", num_classes=10, img_size=28, in_channels=1)
    batch = (torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,)))
    with pytest.raises(ValueError, match="too short here: measuring the step took"):
        plan_for_budget(
            model, [batch], 1e-3, Recipe(), repeats=1, candidates=CANDIDATES[:1]
        )
