"""The CCT recipes' data pieces: the per-image transforms (each recipe's against timm's and
the reference's order), MixUp/CutMix against timm's Mixup, the batch flip (the recipes'
hyper-parameters and schedules: tests/training/test_cct_recipes.py; the CLI's ``--recipe``:
tests/test_cli.py)."""

from __future__ import annotations

import random

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
from torchvision.transforms import v2

from going_modular.data import augment
from going_modular.data.augment import (
    CIFAR10_MEAN,
    CIFAR10_STD,
    RAND_AUGMENT,
    MixUpCutMix,
    TransformedDataset,
    cifar_test_transform,
    cifar_train_transform,
)
from vitbook.training.cct_recipes import CCT_CIFAR_200, CCT_CIFAR_300


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


def test_transformed_dataset_shares_one_base():
    base = [(_pil(), 3), (_pil(), 7)]
    view = TransformedDataset(base, cifar_test_transform())
    x, y = view[1]
    assert len(view) == 2 and y == 7 and x.shape == (3, 32, 32)
    assert TransformedDataset(base)[0][0] is base[0][0]


def test_mixupcutmix_is_timms_mixup_with_the_same_draws():
    X, y = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))
    ours = MixUpCutMix(10, label_smoothing=0.1)
    timms = Mixup(
        mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1, num_classes=10
    )
    for seed in range(6):
        a = _seeded(lambda b: ours(*b), (X, y), seed)
        b = _seeded(lambda b: timms(b[0].clone(), b[1]), (X, y), seed)
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize(("mixup", "cutmix"), [(0.8, 1.0), (0.8, 0.0), (0.0, 1.0)])
def test_mixed_batches_have_soft_targets_summing_to_one(mixup, cutmix):
    mix = MixUpCutMix(10, mixup_alpha=mixup, cutmix_alpha=cutmix)
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
    never = MixUpCutMix(10, prob=0.0, label_smoothing=0.1)
    Xm, ym = never(X, y)
    assert torch.equal(Xm, X)
    torch.testing.assert_close(ym, smoothed)
    stopping = MixUpCutMix(10, stop_after_steps=2)
    assert not torch.equal(stopping(X, y)[0], X)
    stopping(X, y)
    Xm, ym = stopping(X, y)  # third call: mixing is off for good
    assert torch.equal(Xm, X) and torch.equal(ym, nn.functional.one_hot(y, 10).float())
    with pytest.raises(ValueError, match="mixup_alpha > 0 or cutmix_alpha > 0"):
        MixUpCutMix(10, mixup_alpha=0, cutmix_alpha=0)
    resumed = MixUpCutMix(10, stop_after_steps=2)
    resumed.load_state_dict(stopping.state_dict())
    assert resumed.state_dict() == {"steps": 3, "mixup_enabled": False}
    Xm, ym = resumed(X, y)  # still off after a resume, though its own counter says 0
    assert torch.equal(Xm, X) and resumed.steps == 4


@pytest.mark.parametrize("size", [97, 1])
def test_an_odd_batch_mixes_its_even_part_and_keeps_the_last_image(size):
    """A last batch of 97 used to raise "needs an even batch size" after a full epoch."""
    X, y = torch.randn(size, 3, 8, 8), torch.randint(0, 10, (size,))
    ours = MixUpCutMix(10, label_smoothing=0.1)
    timms = Mixup(
        mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1, num_classes=10
    )
    Xm, ym = _seeded(lambda b: ours(*b), (X, y), 3)
    assert Xm.shape == X.shape and ym.shape == (size, 10) and ours.steps == 1
    assert torch.equal(Xm[-1], X[-1])
    last = nn.functional.one_hot(y[-1:], 10).float() * 0.9 + 0.01
    torch.testing.assert_close(ym[-1:], last)
    if size > 1:
        even = _seeded(lambda b: timms(b[0].clone(), b[1]), (X[:-1], y[:-1]), 3)
        torch.testing.assert_close((Xm[:-1], ym[:-1]), even)
        assert not torch.equal(Xm[:-1], X[:-1])


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
