"""The CCT recipe: transforms, MixUp/CutMix, the recipe's optimiser and schedule, the engine's
time budget and the CLI's ``--recipe`` and ``--time-budget``."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from going_modular import augment, engine, standins, train
from going_modular.augment import (
    CCT_CIFAR_200,
    CCT_CIFAR_300,
    TransformedDataset,
    cifar_test_transform,
    cifar_train_transform,
    mixup_cutmix,
)
from going_modular.models import build_model


def _pil(size: int = 32) -> Image.Image:
    rng = np.random.default_rng(0)
    return Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8))


@pytest.mark.parametrize("policy", ["autoaugment", "randaugment", None])
@pytest.mark.parametrize("crop", ["pad", "resized", None])
def test_train_transform_gives_normalised_float_tensors(policy, crop):
    transform = cifar_train_transform(32, policy=policy, random_erasing=0.5, crop=crop)
    for image in (_pil(), torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8)):
        x = transform(image)
        assert type(x) is torch.Tensor  # a plain tensor, not a tv_tensors.Image
        assert x.shape == (3, 32, 32) and x.dtype == torch.float32
        assert torch.isfinite(x).all()


def test_train_transform_resizes_and_randomises():
    x = cifar_train_transform(48, policy="randaugment")(_pil(32))
    assert x.shape == (3, 48, 48)
    torch.manual_seed(0)
    outs = [cifar_train_transform()(_pil()) for _ in range(4)]
    assert any(not torch.equal(outs[0], o) for o in outs[1:])


def test_test_transform_is_deterministic_normalisation():
    image = _pil()
    x = cifar_test_transform()(image)
    expected = torch.from_numpy(np.array(image)).permute(2, 0, 1).float() / 255
    mean = torch.tensor(augment.CIFAR10_MEAN)[:, None, None]
    std = torch.tensor(augment.CIFAR10_STD)[:, None, None]
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


def test_transformed_dataset_shares_one_base():
    base = [(_pil(), 3), (_pil(), 7)]
    view = TransformedDataset(base, cifar_test_transform())
    x, y = view[1]
    assert len(view) == 2 and y == 7 and x.shape == (3, 32, 32)
    assert TransformedDataset(base)[0][0] is base[0][0]


@pytest.mark.parametrize(("mixup", "cutmix"), [(0.8, 1.0), (0.8, 0.0), (0.0, 1.0)])
def test_mixed_batches_have_soft_targets_summing_to_one(mixup, cutmix):
    mix = mixup_cutmix(10, mixup_alpha=mixup, cutmix_alpha=cutmix)
    X, y = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))
    Xm, ym = mix(X, y)
    assert Xm.shape == X.shape and ym.shape == (16, 10) and ym.dtype == torch.float32
    torch.testing.assert_close(ym.sum(dim=1), torch.ones(16))
    assert (ym >= 0).all()
    # each row mixes at most two classes, and the sample's own class is one of them
    assert ((ym > 0).sum(dim=1) <= 2).all()
    assert (ym[torch.arange(16), y] > 0).all()


def test_unmixed_batches_get_one_hot_targets_and_mixing_can_stop():
    X, y = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))
    never = mixup_cutmix(10, prob=0.0)
    Xm, ym = never(X, y)
    assert torch.equal(Xm, X) and torch.equal(ym, nn.functional.one_hot(y, 10).float())
    stopping = mixup_cutmix(10, stop_after_steps=2)
    assert not torch.equal(stopping(X, y)[0], X)
    stopping(X, y)
    assert torch.equal(stopping(X, y)[0], X)  # third call: mixing is off for good
    with pytest.raises(ValueError, match="mixup_alpha > 0 or cutmix_alpha > 0"):
        mixup_cutmix(10, mixup_alpha=0, cutmix_alpha=0)


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
    assert (
        decay["lr"] == no_decay["lr"] == pytest.approx(5.5e-4 / (10 * 10))
    )  # warmup step 0
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


def test_schedule_warms_up_decays_and_cools_down():
    model = nn.Linear(4, 2)
    parts = CCT_CIFAR_300.build(model, steps_per_epoch=3, num_classes=2)
    assert (parts.warmup_steps, parts.total_steps) == (30, 930)
    lrs = _lrs(parts)
    assert lrs[29] == pytest.approx(5.5e-4) and max(lrs) == pytest.approx(5.5e-4)
    assert all(a <= b for a, b in zip(lrs[:30], lrs[1:30]))  # rising during warmup
    assert all(a >= b for a, b in zip(lrs[30:], lrs[31:]))  # then never rising
    assert lrs[-30:] == pytest.approx([1e-5] * 30)  # 10 cooldown epochs at min_lr
    assert parts.batch_transform.stop_after_steps == 175 * 3


def test_short_runs_keep_the_recipes_proportions():
    model = nn.Linear(4, 2)
    parts = CCT_CIFAR_200.build(model, steps_per_epoch=10, epochs=20)
    assert (parts.warmup_steps, parts.total_steps) == (
        5,
        200,
    )  # 5/200 of the run, not 5 epochs
    assert parts.batch_transform is None and parts.loss_fn.label_smoothing == 0.1
    lrs = _lrs(parts)
    assert lrs[4] == pytest.approx(5e-4) and lrs[-1] < 1e-6
    with pytest.raises(ValueError, match="pass num_classes"):
        CCT_CIFAR_300.build(model, 10)
    assert CCT_CIFAR_300.replace(label_smoothing=0.0).label_smoothing == 0.0


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
    assert 2 <= model.calls <= 8
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
    assert sorted(p.name for p in out.iterdir()) == [
        "loss_curves.png",
        "model.pth",
        "results.json",
    ]
    results = json.loads((out / "results.json").read_text())
    assert len(results["train_loss"]) == 1  # the budget stopped it during epoch 1
    assert math.isfinite(results["test_loss"][0])
    printed = capsys.readouterr().out
    assert "[STAND-IN] CIFAR-10" in printed and "[INFO] Recipe cct-cifar-300" in printed
