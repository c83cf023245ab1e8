"""vitbook.data.gpu_augment.policies: the operations and arguments each policy draws against
the ones the CPU recipe's own transforms draw (recorded from them, fixed seeds)."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
import torch
from PIL import Image
from timm.data import auto_augment as aa
from torchvision.transforms import v2

from vitbook.data.gpu_augment import policies as policies
from vitbook.data.gpu_augment.ops import OP_NAMES, OPS
from vitbook.training.cct_recipes import CCT_CIFAR_200, CCT_CIFAR_300

SIZE = 32
# timm's RandAugment names ("inc1" variants) -> the batched operation that does the same
TIMM_TO_OURS = {
    "PosterizeIncreasing": "Posterize",
    "SolarizeIncreasing": "Solarize",
    "ColorIncreasing": "Color",
    "ContrastIncreasing": "Contrast",
    "BrightnessIncreasing": "Brightness",
    "SharpnessIncreasing": "Sharpness",
    "TranslateXRel": "TranslateX",
    "TranslateYRel": "TranslateY",
}


def _step(transform, kind):
    """The step of type ``kind`` in a CPU recipe's transform."""
    return next(t for t in transform.transforms if isinstance(t, kind))


def _record_timm_randaugment(n: int) -> tuple[list[list[tuple]], object]:
    """Run the cct recipe's own timm RandAugment on ``n`` images, recording each operation
    applied (name and arguments) instead of applying it."""
    policy = _step(CCT_CIFAR_300.train_transform(), aa.RandAugment)
    calls: list[tuple] = []
    for op in policy.ops:
        op.aug_fn = lambda img, *args, _name=op.name, **kw: (
            calls.append((_name, args)) or img
        )
    random.seed(0)
    np.random.seed(0)
    image, per_image = Image.new("RGB", (SIZE, SIZE)), []
    for _ in range(n):
        calls.clear()
        policy(image)
        per_image.append(list(calls))
    return per_image, policy


def _ours_randaugment(n: int) -> list[tuple[str, float]]:
    layers = policies.RandAugment().sample(
        n, SIZE, "cpu", torch.Generator().manual_seed(0)
    )
    applied = []
    for op, arg, _ in layers:
        for o, a in zip(op.tolist(), arg.tolist()):
            if o >= 0:
                applied.append((OP_NAMES[o], a))
    return applied


def test_randaugment_draws_like_timm():
    n_cpu, n_ours = 6000, 30000
    cpu_images, policy = _record_timm_randaugment(n_cpu)
    assert policy.num_layers == 2 and all(op.prob == 0.5 for op in policy.ops)
    assert {TIMM_TO_OURS.get(op.name, op.name) for op in policy.ops} == set(
        policies.RAND_INCREASING
    )
    ours = _ours_randaugment(n_ours)
    # about one operation per image (2 layers x probability 0.5)
    assert len(ours) / n_ours == pytest.approx(1.0, abs=0.02)
    assert sum(map(len, cpu_images)) / n_cpu == pytest.approx(1.0, abs=0.05)
    cpu = [
        (TIMM_TO_OURS.get(name, name), args)
        for calls in cpu_images
        for name, args in calls
    ]
    cpu_freq = Counter(name for name, _ in cpu)
    ours_freq = Counter(name for name, _ in ours)
    for (
        name
    ) in policies.RAND_INCREASING:  # uniform over the 15 operations, on both sides
        assert ours_freq[name] / len(ours) == pytest.approx(1 / 15, abs=0.008)
        assert cpu_freq[name] / len(cpu) == pytest.approx(1 / 15, abs=0.02)
    for name in policies.RAND_INCREASING:
        cpu_args = np.array([a[0] for n_, a in cpu if n_ == name and a], dtype=float)
        ours_args = np.array([a for n_, a in ours if n_ == name], dtype=float)
        if name in ("TranslateX", "TranslateY"):
            ours_args = ours_args / SIZE  # pixels -> timm's fraction of the width
        if len(cpu_args) == 0:  # no argument: AutoContrast, Equalize, Invert
            continue
        neutral = OPS[name][1]
        if name in ("Rotate", "ShearX", "ShearY", "TranslateX", "TranslateY") or (
            neutral == 1.0
        ):  # signed at random: half each way, then compare the size of the change
            assert (ours_args > neutral).mean() == pytest.approx(0.5, abs=0.03)
            assert (cpu_args > neutral).mean() == pytest.approx(0.5, abs=0.08)
            cpu_args, ours_args = abs(cpu_args - neutral), abs(ours_args - neutral)
        lo, hi = cpu_args.min(), cpu_args.max()
        span = max(hi - lo, 1.0)
        # the same range (up to the rarest tail values: magnitudes 3 sigma out)...
        within = (ours_args >= lo - 0.02 * span) & (ours_args <= hi + 0.02 * span)
        assert within.mean() > 0.995, name
        # ...and the same distribution inside it
        for q in (0.1, 0.25, 0.5, 0.75, 0.9):
            assert np.quantile(ours_args, q) == pytest.approx(
                np.quantile(cpu_args, q), abs=0.06 * span
            ), (name, q)


def _record_torchvision_autoaugment(n: int) -> list[list[tuple[str, float]]]:
    policy = _step(CCT_CIFAR_200.train_transform(), v2.AutoAugment)
    assert policy.policy == v2.AutoAugmentPolicy.CIFAR10
    calls: list[tuple[str, float]] = []

    def record(image, transform_id, magnitude, interpolation, fill):
        calls.append((transform_id, magnitude))
        return image

    policy._apply_image_or_video_transform = record
    torch.manual_seed(0)
    image, per_image = torch.zeros(3, SIZE, SIZE, dtype=torch.uint8), []
    for _ in range(n):
        calls.clear()
        policy(image)
        per_image.append(list(calls))
    return per_image


def _cpu_autoaugment_key(name: str, magnitude: float) -> tuple[str, float]:
    """torchvision's (operation, magnitude) as the argument the batched op receives."""
    if name in ("Brightness", "Color", "Contrast", "Sharpness"):
        return name, round(1 + magnitude, 4)
    if name in ("TranslateX", "TranslateY"):
        return name, float(int(magnitude))
    if name == "Solarize":
        return name, round(255 * magnitude, 3)
    return name, round(magnitude, 4)


def test_autoaugment_draws_like_torchvision():
    n_cpu, n_ours = 8000, 40000
    cpu = Counter(
        _cpu_autoaugment_key(*call)
        for calls in _record_torchvision_autoaugment(n_cpu)
        for call in calls
    )
    layers = policies.AutoAugment().sample(
        n_ours, SIZE, "cpu", torch.Generator().manual_seed(0)
    )
    ours = Counter()
    for op, arg in layers:
        for o, a in zip(op.tolist(), arg.tolist()):
            if o >= 0:
                name = OP_NAMES[o]
                ours[(name, round(a, 3 if name == "Solarize" else 4))] += 1
    assert set(ours) == set(cpu)  # the same operations with the same magnitudes
    for key in cpu:  # drawn as often (binomial tolerance, 5 sigma)
        p = cpu[key] / n_cpu
        sigma = (p * (1 - p) / n_cpu) ** 0.5 + (p * (1 - p) / n_ours) ** 0.5
        assert ours[key] / n_ours == pytest.approx(p, abs=5 * sigma + 1e-3), key
