"""The CCT recipes' hyper-parameters: the reference's schedules epoch by epoch, warmups of
any length, the optimiser's parameter groups, the losses, and the checks that refuse
nonsense (their transforms: tests/data/test_augment.py)."""

from __future__ import annotations

import math

import pytest
import torch

from going_modular.models import build_model
from vitbook.training.cct_recipes import CCT_CIFAR_200, CCT_CIFAR_300, CCTRecipe
from vitbook.training.recipe import learning_rates


def test_losses_smooth_once():
    run = CCT_CIFAR_300.training_recipe(3, num_classes=2)
    loss_fn, test_loss_fn = run.build_losses()
    assert loss_fn.label_smoothing == 0.0  # smoothing is in the mixed targets
    assert run.batch_transform.mix.label_smoothing == 0.1
    assert test_loss_fn.label_smoothing == 0.0
    run = CCT_CIFAR_200.training_recipe(3)
    assert run.build_losses()[0].label_smoothing == 0.1 and run.batch_transform is None


def test_recipe_exempts_biases_and_norms_from_weight_decay():
    model = build_model("cct_2_3x2")
    run = CCT_CIFAR_300.training_recipe(10, num_classes=10)
    optimizer = run.build_optimizer(model)
    run.build_schedule(optimizer, 10 * run.epochs)  # as fit does: lr at step 0
    assert isinstance(optimizer, torch.optim.AdamW)
    decay, no_decay = optimizer.param_groups
    assert decay["weight_decay"] == 6e-2 and no_decay["weight_decay"] == 0.0
    assert all(p.ndim > 1 for p in decay["params"]) and all(
        p.ndim <= 1 for p in no_decay["params"]
    )
    assert len(decay["params"]) + len(no_decay["params"]) == len(
        list(model.parameters())
    )
    assert decay["lr"] == no_decay["lr"] == pytest.approx(1e-5)  # warmup_lr
    # The 200-epoch reference script decays everything, in one group.
    (group,) = CCT_CIFAR_200.training_recipe(10).build_optimizer(model).param_groups
    assert group["weight_decay"] == 3e-2 and len(group["params"]) == len(
        decay["params"]
    ) + len(no_decay["params"])


def _lrs(
    recipe: CCTRecipe,
    steps_per_epoch: int,
    epochs: int | None = None,
    num_classes: int | None = None,
) -> list[float]:
    """The learning rate at each step of a run of ``recipe``, as fit steps it."""
    run = recipe.training_recipe(steps_per_epoch, epochs, num_classes=num_classes)
    return learning_rates(run, run.epochs * steps_per_epoch)


def test_200_recipe_warmup_is_the_reference_harmonic_staircase():
    """examples/main.py: lr / (5 - e) in epochs 0-4, then a per-epoch cosine to 0."""
    lrs = _lrs(CCT_CIFAR_200, steps_per_epoch=2)[::2]  # one value per epoch
    assert lrs[:6] == pytest.approx([1e-4, 1.25e-4, 5e-4 / 3, 2.5e-4, 5e-4, 5e-4])
    expected = 5e-4 * 0.5 * (1 + math.cos(math.pi * 95 / 195))
    assert lrs[100] == pytest.approx(expected) and 0 < lrs[-1] < 1e-6
    assert _lrs(CCT_CIFAR_200, 2)[2 * 7 + 1] == lrs[7]  # constant within an epoch


def test_300_recipe_schedule_is_timms_cosine_with_warmup_and_cooldown():
    lrs = _lrs(CCT_CIFAR_300, steps_per_epoch=3, num_classes=2)
    assert len(lrs) == 930
    per_epoch = lrs[::3]
    assert per_epoch[0] == pytest.approx(1e-5)
    assert per_epoch[5] == pytest.approx(1e-5 + 5 * (5.5e-4 - 1e-5) / 10)
    cosine_10 = 1e-5 + 0.5 * (5.5e-4 - 1e-5) * (1 + math.cos(math.pi * 10 / 300))
    assert per_epoch[10] == pytest.approx(cosine_10) and max(lrs) < 5.5e-4
    assert lrs[-30:] == pytest.approx([1e-5] * 30)  # 10 cooldown epochs at min_lr
    assert all(a == b == c for a, b, c in zip(lrs[::3], lrs[1::3], lrs[2::3]))
    run = CCT_CIFAR_300.training_recipe(3, num_classes=2)
    assert run.batch_transform.stop_after_steps == 175 * 3


def test_short_runs_compress_the_recipes_schedule():
    lrs = _lrs(CCT_CIFAR_200, steps_per_epoch=10, epochs=20)
    assert len(lrs) == 200
    assert lrs[:5] == pytest.approx([5e-4 / (5 - e) for e in range(5)])
    assert lrs[5] == pytest.approx(5e-4) and lrs[-1] < 1e-6
    with pytest.raises(ValueError, match="pass num_classes"):
        CCT_CIFAR_300.training_recipe(10)
    assert CCT_CIFAR_300.replace(label_smoothing=0.0).label_smoothing == 0.0


def _warmup_grid(recipe: CCTRecipe) -> list[float]:
    """Warmup lengths, integral and fractional, up to the epochs before the cooldown."""
    span = recipe.epochs - recipe.cooldown_epochs
    return [0, 0.01, 0.5, 1, 4, 4.01, 4.1, 4.5, span - 1, span - 0.5, span]


@pytest.mark.parametrize("recipe", [CCT_CIFAR_200, CCT_CIFAR_300], ids=["200", "300"])
def test_no_warmup_length_lifts_the_rate_above_the_peak(recipe):
    """FAIL 6: --recipe cct200 --warmup-epochs 0.01 (or 4.01) gave 100x the peak rate."""
    for warmup in _warmup_grid(recipe):
        changed = recipe.replace(warmup_epochs=warmup)
        factors = [changed.lr_factor(e) for e in range(recipe.epochs)]
        assert max(factors) <= 1.0, warmup
        # During the warmup the rate rises and falls below the peak again only after it.
        ramp = factors[: math.ceil(warmup)]
        assert ramp == sorted(ramp), warmup
        # The whole schedule as the engine steps it, on a short run (20 epochs).
        lrs = _lrs(changed, 3, epochs=20, num_classes=2)
        assert max(lrs) <= changed.lr * (1 + 1e-12), warmup


@pytest.mark.parametrize("recipe", [CCT_CIFAR_200, CCT_CIFAR_300], ids=["200", "300"])
def test_a_longer_warmup_never_raises_a_warmup_epoch(recipe):
    grid = _warmup_grid(recipe)
    for short, long in zip(grid, grid[1:]):
        a, b = recipe.replace(warmup_epochs=short), recipe.replace(warmup_epochs=long)
        for epoch in range(math.ceil(short)):  # in both warmups
            assert b.lr_factor(epoch) <= a.lr_factor(epoch), (short, long, epoch)


def test_the_harmonic_warmup_is_continuous_in_its_length():
    """No jump when the warmup crosses a whole number of epochs, or leaves 0."""
    for warmup in (0, 1, 4, 5, 199):
        below = CCT_CIFAR_200.replace(warmup_epochs=max(0, warmup - 1e-9))
        above = CCT_CIFAR_200.replace(warmup_epochs=warmup + 1e-9)
        for epoch in range(200):
            assert above.lr_factor(epoch) == pytest.approx(
                below.lr_factor(epoch), abs=1e-6
            ), (warmup, epoch)


def test_fractional_harmonic_warmup_caps_its_last_partial_epoch():
    recipe = CCT_CIFAR_200.replace(warmup_epochs=4.5)
    assert [recipe.lr_factor(e) for e in range(5)] == pytest.approx(
        [1 / 4.5, 1 / 3.5, 1 / 2.5, 1 / 1.5, 1.0]
    )
    assert recipe.replace(warmup_epochs=4.01).lr_factor(4) == 1.0  # was 100
    assert recipe.replace(warmup_epochs=0.01).lr_factor(0) == 1.0  # was 100
    assert CCT_CIFAR_200.lr_factor(4) == 1.0  # the reference's integral staircase


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"warmup_epochs": -1}, r"warmup_epochs must be a finite number in \[0, 200\]"),
        ({"warmup_epochs": 201}, "warmup_epochs"),
        ({"warmup_epochs": math.nan}, "warmup_epochs"),
        ({"warmup_epochs": math.inf}, "warmup_epochs"),
        ({"cooldown_epochs": -0.5}, "cooldown_epochs"),
        ({"warmup_epochs": 150, "cooldown_epochs": 60}, r"\+ cooldown_epochs"),
        ({"lr": 0.0}, r"lr must be a finite number in \(0, inf\]"),
        ({"lr": -1e-3}, "lr must"),
        ({"min_lr": 1.0}, "min_lr"),
        ({"warmup_lr": -1e-5}, "warmup_lr"),
        ({"weight_decay": -0.1}, "weight_decay"),
        ({"epochs": 0}, "epochs must be a positive integer"),
        ({"epochs": 2.5}, "epochs must be a positive integer"),
        ({"batch_size": 0}, "batch_size"),
        ({"label_smoothing": 1.0}, "label_smoothing"),
        ({"random_erasing": 1.5}, "random_erasing"),
        ({"mix_prob": -0.1}, "mix_prob"),
        ({"mix_switch_prob": 2}, "mix_switch_prob"),
        ({"mixup_alpha": -1}, "mixup_alpha"),
        ({"mix_off_epoch": -5}, "mix_off_epoch"),
        ({"warmup": "cubic"}, "Unknown warmup"),
    ],
)
def test_recipes_refuse_nonsense_naming_the_field(changes, message):
    with pytest.raises(ValueError, match=message):
        CCT_CIFAR_200.replace(**changes)
