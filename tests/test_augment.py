"""The CCT recipes: timm's transforms and Mixup, the reference's order and schedules, the
optimiser's parameter groups, the engine's time budget and the CLI's ``--recipe``."""

from __future__ import annotations

import json
import math
import random
import time

import numpy as np
import pytest
import torch
from PIL import Image
from timm.data import (
    Mixup,
    RandomResizedCropAndInterpolation,
    create_transform,
    rand_augment_transform,
)
from timm.data.random_erasing import RandomErasing
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torchvision.transforms import v2

from going_modular import augment, engine, standins, train
from going_modular.augment import (
    CCT_CIFAR_200,
    CCT_CIFAR_300,
    CIFAR10_MEAN,
    CIFAR10_STD,
    RAND_AUGMENT,
    TransformedDataset,
    cifar_test_transform,
    cifar_train_transform,
    mixup_cutmix,
)
from going_modular.models import build_model


def _pil(size: int = 32, seed: int = 0, channels: int = 3) -> Image.Image:
    rng = np.random.default_rng(seed)
    shape = (size, size, channels) if channels > 1 else (size, size)
    return Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8))


def _seeded(transform, image, seed: int) -> torch.Tensor:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return transform(image)


@pytest.mark.parametrize("policy", ["autoaugment", "randaugment", None])
@pytest.mark.parametrize("crop", ["pad", "resized", None])
def test_train_transform_gives_normalised_float_tensors(policy, crop):
    transform = cifar_train_transform(32, policy=policy, random_erasing=0.5, crop=crop)
    for image in (_pil(), torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8)):
        x = transform(image)
        assert type(x) is torch.Tensor  # a plain tensor, not a tv_tensors.Image
        assert x.shape == (3, 32, 32) and x.dtype == torch.float32
        assert torch.isfinite(x).all()


@pytest.mark.parametrize("recipe", [CCT_CIFAR_200, CCT_CIFAR_300])
def test_recipes_take_grey_images_with_one_channel_statistics(recipe):
    transform = recipe.train_transform(32, mean=(0.29,), std=(0.35,))
    outs = [transform(_pil(channels=1)) for _ in range(8)]
    assert all(x.shape == (1, 32, 32) and torch.isfinite(x).all() for x in outs)
    assert any(not torch.equal(outs[0], o) for o in outs[1:])


def test_300_recipe_transform_is_timms_training_transform():
    """Same ops, magnitudes and order as timm's create_transform with the reference config."""
    reference = create_transform(
        32,
        is_training=True,
        scale=(0.8, 1.0),
        interpolation="random",
        auto_augment=RAND_AUGMENT,
        re_prob=0.25,
        re_mode="pixel",
        mean=CIFAR10_MEAN,
        std=CIFAR10_STD,
    )
    ours = CCT_CIFAR_300.train_transform()
    for seed in range(30):
        image = _pil(seed=seed)
        torch.testing.assert_close(
            _seeded(ours, image, seed), _seeded(reference, image, seed)
        )


def test_300_recipe_uses_timms_randaugment_crop_and_erasing():
    steps = CCT_CIFAR_300.train_transform().transforms
    (crop,) = [t for t in steps if isinstance(t, RandomResizedCropAndInterpolation)]
    assert crop.scale == (0.8, 1.0) and len(crop.interpolation) == 2  # "random"
    (erasing,) = [t for t in steps if isinstance(t, RandomErasing)]
    assert erasing.probability == 0.25 and erasing.mode == "pixel"
    (ours,) = [t for t in steps if type(t).__name__ == "RandAugment"]
    timms = rand_augment_transform(
        RAND_AUGMENT, {"translate_const": 14, "img_mean": (125, 123, 114)}
    )
    assert ours.num_layers == timms.num_layers == 2
    assert [(op.name, op.magnitude, op.magnitude_std, op.prob) for op in ours.ops] == [
        (op.name, op.magnitude, op.magnitude_std, op.prob) for op in timms.ops
    ]
    assert {op.magnitude for op in ours.ops} == {
        9
    }  # of timm's 10, not torchvision's 30
    assert all(op.hparams == timms.ops[0].hparams for op in ours.ops)


def test_200_recipe_runs_autoaugment_before_crop_and_flip():
    """The order of the reference examples/main.py: CIFAR10Policy, RandomCrop, flip."""
    steps = [type(t) for t in CCT_CIFAR_200.train_transform().transforms]
    names = [t.__name__ for t in steps]
    assert names[1:4] == ["AutoAugment", "RandomCrop", "RandomHorizontalFlip"]
    assert "RandomErasing" not in names
    (policy,) = [
        t
        for t in CCT_CIFAR_200.train_transform().transforms
        if isinstance(t, v2.AutoAugment)
    ]
    assert policy.policy == v2.AutoAugmentPolicy.CIFAR10 and policy.fill == 128
    crop = CCT_CIFAR_200.train_transform().transforms[2]
    assert crop.size == (32, 32) and crop.padding == [4, 4, 4, 4]
    # RandAugment (timm's order) goes after the geometric steps instead.
    names = [
        type(t).__name__ for t in cifar_train_transform(policy="randaugment").transforms
    ]
    assert names.index("RandAugment") > names.index("RandomHorizontalFlip")


def test_test_transform_is_deterministic_normalisation():
    image = _pil()
    x = cifar_test_transform()(image)
    expected = torch.from_numpy(np.array(image)).permute(2, 0, 1).float() / 255
    mean = torch.tensor(CIFAR10_MEAN)[:, None, None]
    std = torch.tensor(CIFAR10_STD)[:, None, None]
    torch.testing.assert_close(x, (expected - mean) / std)
    assert torch.equal(x, cifar_test_transform()(image))


def test_random_erasing_is_optional_and_bad_names_are_explained():
    names = [
        type(t).__name__ for t in cifar_train_transform(random_erasing=0).transforms
    ]
    assert "RandomErasing" not in names and "AutoAugment" in names
    assert "RandomErasing" in [
        type(t).__name__ for t in cifar_train_transform().transforms
    ]
    with pytest.raises(ValueError, match="Unknown policy"):
        cifar_train_transform(policy="trivial")
    with pytest.raises(ValueError, match="Unknown crop"):
        cifar_train_transform(crop="centre")
    with pytest.raises(ValueError, match="Unknown warmup"):
        CCT_CIFAR_200.replace(warmup="cubic")


def test_transformed_dataset_shares_one_base():
    base = [(_pil(), 3), (_pil(), 7)]
    view = TransformedDataset(base, cifar_test_transform())
    x, y = view[1]
    assert len(view) == 2 and y == 7 and x.shape == (3, 32, 32)
    assert TransformedDataset(base)[0][0] is base[0][0]


def test_mixup_cutmix_is_timms_mixup_with_the_same_draws():
    X, y = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))
    ours = mixup_cutmix(10, label_smoothing=0.1)
    timms = Mixup(
        mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1, num_classes=10
    )
    for seed in range(6):
        a = _seeded(lambda b: ours(*b), (X, y), seed)
        b = _seeded(lambda b: timms(b[0].clone(), b[1]), (X, y), seed)
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize(("mixup", "cutmix"), [(0.8, 1.0), (0.8, 0.0), (0.0, 1.0)])
def test_mixed_batches_have_soft_targets_summing_to_one(mixup, cutmix):
    mix = mixup_cutmix(10, mixup_alpha=mixup, cutmix_alpha=cutmix)
    X, y = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))
    Xm, ym = mix(X, y)
    assert Xm.shape == X.shape and ym.shape == (16, 10) and ym.dtype == torch.float32
    torch.testing.assert_close(ym.sum(dim=1), torch.ones(16))
    assert (ym >= 0).all()
    # each row mixes at most two classes: its own and its partner's in the reversed batch
    assert ((ym > 0).sum(dim=1) <= 2).all()
    assert (ym[torch.arange(16), y] > 0).all()
    assert (ym[torch.arange(16), y.flip(0)] > 0).all()


def test_smoothing_is_in_the_targets_and_mixing_can_stop():
    X, y = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))
    smoothed = nn.functional.one_hot(y, 10).float() * 0.9 + 0.01
    never = mixup_cutmix(10, prob=0.0, label_smoothing=0.1)
    Xm, ym = never(X, y)
    assert torch.equal(Xm, X)
    torch.testing.assert_close(ym, smoothed)
    stopping = mixup_cutmix(10, stop_after_steps=2)
    assert not torch.equal(stopping(X, y)[0], X)
    stopping(X, y)
    Xm, ym = stopping(X, y)  # third call: mixing is off for good
    assert torch.equal(Xm, X) and torch.equal(ym, nn.functional.one_hot(y, 10).float())
    with pytest.raises(ValueError, match="mixup_alpha > 0 or cutmix_alpha > 0"):
        mixup_cutmix(10, mixup_alpha=0, cutmix_alpha=0)
    with pytest.raises(ValueError, match="even batch size"):
        stopping(X[:7], y[:7])


def test_losses_smooth_once():
    parts = CCT_CIFAR_300.build(nn.Linear(4, 2), 3, num_classes=2)
    assert parts.loss_fn.label_smoothing == 0.0  # smoothing is in the mixed targets
    assert parts.batch_transform.mix.label_smoothing == 0.1
    parts = CCT_CIFAR_200.build(nn.Linear(4, 2), 3)
    assert parts.loss_fn.label_smoothing == 0.1 and parts.batch_transform is None


def _tiny_loader(n: int = 32, batch_size: int = 16) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (n,), generator=g)
    return DataLoader(TensorDataset(x, y), batch_size=batch_size)


def test_engine_trains_a_cct_on_mixed_batches_with_the_recipe():
    torch.manual_seed(0)
    model = build_model("cct_2_3x2", num_classes=10, img_size=32)
    loader = _tiny_loader()
    parts = CCT_CIFAR_300.build(
        model, steps_per_epoch=len(loader), epochs=2, num_classes=10
    )
    before = [p.detach().clone() for p in model.parameters()]
    results = engine.train(
        model,
        loader,
        loader,
        parts.optimizer,
        parts.loss_fn,
        2,
        "cpu",
        scheduler=parts.scheduler,
        batch_transform=parts.batch_transform,
        test_loss_fn=parts.test_loss_fn,
        progress=False,
    )
    losses = results["train_loss"] + results["test_loss"]
    assert all(math.isfinite(v) and 0 < v < 10 for v in losses)
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))
    assert parts.scheduler.last_epoch == 4 and parts.batch_transform.steps == 4


def test_recipe_exempts_biases_and_norms_from_weight_decay():
    model = build_model("cct_2_3x2")
    decay, no_decay = CCT_CIFAR_300.build(
        model, 10, num_classes=10
    ).optimizer.param_groups
    assert decay["weight_decay"] == 6e-2 and no_decay["weight_decay"] == 0.0
    assert all(p.ndim > 1 for p in decay["params"]) and all(
        p.ndim <= 1 for p in no_decay["params"]
    )
    assert len(decay["params"]) + len(no_decay["params"]) == len(
        list(model.parameters())
    )
    assert decay["lr"] == no_decay["lr"] == pytest.approx(1e-5)  # warmup_lr
    # The 200-epoch reference script decays everything, in one group.
    (group,) = CCT_CIFAR_200.build(model, 10).optimizer.param_groups
    assert group["weight_decay"] == 3e-2 and len(group["params"]) == len(
        decay["params"]
    ) + len(no_decay["params"])


def _lrs(parts: augment.TrainingParts) -> list[float]:
    lrs = []
    for _ in range(parts.total_steps):
        lrs.append(parts.optimizer.param_groups[0]["lr"])
        parts.optimizer.step()
        parts.scheduler.step()
    return lrs


def test_200_recipe_warmup_is_the_reference_harmonic_staircase():
    """examples/main.py: lr / (5 - e) in epochs 0-4, then a per-epoch cosine to 0."""
    parts = CCT_CIFAR_200.build(nn.Linear(4, 2), steps_per_epoch=2)
    lrs = _lrs(parts)[::2]  # one value per epoch (constant within an epoch)
    assert lrs[:6] == pytest.approx([1e-4, 1.25e-4, 5e-4 / 3, 2.5e-4, 5e-4, 5e-4])
    expected = 5e-4 * 0.5 * (1 + math.cos(math.pi * 95 / 195))
    assert lrs[100] == pytest.approx(expected) and 0 < lrs[-1] < 1e-6
    assert _lrs(CCT_CIFAR_200.build(nn.Linear(4, 2), 2))[2 * 7 + 1] == lrs[7]


def test_300_recipe_schedule_is_timms_cosine_with_warmup_and_cooldown():
    parts = CCT_CIFAR_300.build(nn.Linear(4, 2), steps_per_epoch=3, num_classes=2)
    assert (parts.warmup_steps, parts.total_steps) == (30, 930)
    lrs = _lrs(parts)
    per_epoch = lrs[::3]
    assert per_epoch[0] == pytest.approx(1e-5)
    assert per_epoch[5] == pytest.approx(1e-5 + 5 * (5.5e-4 - 1e-5) / 10)
    cosine_10 = 1e-5 + 0.5 * (5.5e-4 - 1e-5) * (1 + math.cos(math.pi * 10 / 300))
    assert per_epoch[10] == pytest.approx(cosine_10) and max(lrs) < 5.5e-4
    assert lrs[-30:] == pytest.approx([1e-5] * 30)  # 10 cooldown epochs at min_lr
    assert all(a == b == c for a, b, c in zip(lrs[::3], lrs[1::3], lrs[2::3]))
    assert parts.batch_transform.stop_after_steps == 175 * 3


def test_short_runs_compress_the_recipes_schedule():
    model = nn.Linear(4, 2)
    parts = CCT_CIFAR_200.build(model, steps_per_epoch=10, epochs=20)
    assert (parts.warmup_steps, parts.total_steps) == (5, 200)  # 5/200 of the run
    lrs = _lrs(parts)
    assert lrs[:5] == pytest.approx([5e-4 / (5 - e) for e in range(5)])
    assert lrs[5] == pytest.approx(5e-4) and lrs[-1] < 1e-6
    with pytest.raises(ValueError, match="pass num_classes"):
        CCT_CIFAR_300.build(model, 10)
    assert CCT_CIFAR_300.replace(label_smoothing=0.0).label_smoothing == 0.0


def _warmup_grid(recipe: augment.CCTRecipe) -> list[float]:
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
        parts = changed.build(nn.Linear(4, 2), 3, epochs=20, num_classes=2)
        assert max(_lrs(parts)) <= changed.lr * (1 + 1e-12), warmup


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
    ],
)
def test_recipes_refuse_nonsense_naming_the_field(changes, message):
    with pytest.raises(ValueError, match=message):
        CCT_CIFAR_200.replace(**changes)


class _Slow(nn.Module):
    """A linear classifier that takes ``delay`` seconds per training forward pass."""

    def __init__(self, delay: float):
        super().__init__()
        self.delay, self.fc, self.calls = delay, nn.Linear(3 * 32 * 32, 10), 0

    def forward(self, x):
        if self.training:
            self.calls += 1
            time.sleep(self.delay)
        return self.fc(x.flatten(1))


def test_time_budget_stops_mid_epoch_and_tests_that_epoch():
    model = _Slow(0.05)
    loader = _tiny_loader(n=320)  # 20 batches: 1 s per epoch
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    results = engine.train(
        model,
        loader,
        loader,
        optimizer,
        nn.CrossEntropyLoss(),
        3,
        "cpu",
        time_budget=0.2,
        progress=False,
    )
    assert all(len(v) == 1 for v in results.values())
    assert 1 <= model.calls < 20  # stopped inside the first epoch (20 batches)
    with pytest.raises(ValueError, match="time_budget must be a positive"):
        engine.train(
            model,
            loader,
            loader,
            optimizer,
            nn.CrossEntropyLoss(),
            1,
            "cpu",
            time_budget=0,
        )


def test_time_budget_large_enough_changes_nothing():
    model = _Slow(0.0)
    loader = _tiny_loader()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    results = engine.train(
        model,
        loader,
        loader,
        optimizer,
        nn.CrossEntropyLoss(),
        2,
        "cpu",
        time_budget=60,
        progress=False,
    )
    assert all(len(v) == 2 for v in results.values()) and model.calls == 4


def test_cli_recipe_fills_defaults_and_keeps_explicit_options():
    args = train.build_parser().parse_args(
        ["--recipe", "cct", "--lr", "1e-3", "--epochs", "3"]
    )
    recipe = train._resolve_recipe(args)
    assert (args.batch_size, args.weight_decay, args.label_smoothing) == (
        128,
        6e-2,
        0.1,
    )
    assert args.lr == recipe.lr == 1e-3 and args.epochs == 3 and recipe.epochs == 310
    plain = train.build_parser().parse_args([])
    assert train._resolve_recipe(plain) is None
    assert (plain.epochs, plain.batch_size, plain.lr, plain.weight_decay) == (
        5,
        32,
        1e-3,
        0.0,
    )


class _SmallPhotoDigits(standins.PhotoDigits):
    """One copy of each digit: the same stand-in, built four times faster."""

    def __init__(self, train: bool = True, transform=None):
        super().__init__(train=train, transform=transform, copies=1)


def test_cli_trains_a_cct_with_the_recipe_and_a_time_budget(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(standins, "PhotoDigits", _SmallPhotoDigits)
    out = tmp_path / "run"
    train.main(
        [
            "--model",
            "cct_2_3x2",
            "--dataset",
            "cifar10",
            "--recipe",
            "cct",
            "--epochs",
            "3",
            "--max-steps",
            "2",
            "--batch-size",
            "16",
            "--time-budget",
            "0.0001",
            "--output-dir",
            str(out),
        ]
    )
    run = (out / "latest").resolve()  # each run in its own folder (issue 20)
    assert sorted(p.name for p in out.iterdir()) == [run.name, "latest"]
    assert {"loss_curves.png", "model.pth", "results.json"} <= {
        p.name for p in run.iterdir()
    }
    results = json.loads((run / "results.json").read_text())
    assert len(results["train_loss"]) == 1  # the budget stopped it during epoch 1
    assert math.isfinite(results["test_loss"][0])
    printed = capsys.readouterr().out
    assert "[STAND-IN] CIFAR-10" in printed and "[INFO] Recipe cct-cifar-300" in printed


def test_random_flip_batch_flips_some_images_and_keeps_labels():
    torch.manual_seed(0)
    X, y = torch.randn(64, 1, 8, 8), torch.arange(64)
    Xf, yf = augment.random_flip_batch(X, y)
    flipped = [torch.equal(a, b.flip(-1)) for a, b in zip(X, Xf)]
    kept = [torch.equal(a, b) for a, b in zip(X, Xf)]
    assert all(f or k for f, k in zip(flipped, kept)) and torch.equal(yf, y)
    assert 16 < sum(flipped) < 48


def test_randaugment_posterize_keeps_timms_zero_bit_black_image():
    (rand_augment,) = [
        t
        for t in CCT_CIFAR_300.train_transform().transforms
        if type(t).__name__ == "RandAugment"
    ]
    (op,) = [o for o in rand_augment.ops if o.name == "PosterizeIncreasing"]
    op.prob, op.magnitude, op.magnitude_std = 1.0, 10, 0.0  # level 10 keeps 0 bits
    black = np.asarray(op(_pil()))
    assert black.shape == (32, 32, 3) and (black == 0).all()
    op.magnitude = 5  # 2 bits kept: 4 levels per channel
    assert len(np.unique(np.asarray(op(_pil())))) <= 4
