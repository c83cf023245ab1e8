"""vitbook.data.gpu_augment.crops: the crops against PIL's crop and resize, and the boxes,
offsets and erased areas against the ones torchvision's and timm's transforms draw."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
import torch
from PIL import Image
from timm.data import RandomResizedCropAndInterpolation
from timm.data.random_erasing import RandomErasing
from torchvision.transforms import v2

from vitbook.data.gpu_augment import crops as crops
from vitbook.training.cct_recipes import CCT_CIFAR_200, CCT_CIFAR_300

SIZE = 32


def _tensor(image: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.array(image)).permute(2, 0, 1)[None].float()


def _step(transform, kind):
    """The step of type ``kind`` in a CPU recipe's transform."""
    return next(t for t in transform.transforms if isinstance(t, kind))


def test_resized_crop_matches_pil_crop_and_resize(photo):
    x = _tensor(photo).repeat(48, 1, 1, 1)
    got = crops.random_resized_crop(x, generator=torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(3)  # the same draws: boxes, then interpolation
    boxes = crops.resized_crop_boxes(48, SIZE, SIZE, generator=g)
    cubic = torch.rand(48, generator=g) < 0.5
    assert 0 < cubic.sum() < 48
    for k in range(48):
        top, left, h, w = (int(v) for v in boxes[k])
        resample = Image.BICUBIC if cubic[k] else Image.BILINEAR
        crop = photo.crop((left, top, left + w, top + h)).resize((SIZE, SIZE), resample)
        assert (got[k] - _tensor(crop)[0]).abs().max() <= 2


def test_flip_is_folded_into_the_crops():
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).view(2, 3, 8, 8)
    x = x.repeat(32, 1, 1, 1)
    out = crops.random_pad_crop(x, padding=0, hflip=0.5)
    flipped = (out == x.flip(-1)).flatten(1).all(1)
    same = (out == x).flatten(1).all(1)
    assert (flipped | same).all() and 10 < flipped.sum() < 54


def test_resized_crop_boxes_draw_like_timm():
    crop = _step(CCT_CIFAR_300.train_transform(), RandomResizedCropAndInterpolation)
    assert crop.scale == (0.8, 1.0)
    boxes, get_params = [], crop.get_params
    crop.get_params = lambda *a: boxes.append(get_params(*a)) or boxes[-1]
    random.seed(0)
    image = Image.new("RGB", (SIZE, SIZE))
    for _ in range(4000):
        crop(image)
    cpu = np.array(boxes, dtype=float)  # top, left, h, w
    ours = crops.resized_crop_boxes(
        20000,
        SIZE,
        SIZE,
        crop.scale,
        crop.ratio,
        generator=torch.Generator().manual_seed(0),
    ).numpy()
    for stat in (
        lambda b: b[:, 2] * b[:, 3] / SIZE**2,  # area fraction
        lambda b: np.log(b[:, 3] / b[:, 2]),  # aspect ratio
        lambda b: b[:, 0],
        lambda b: b[:, 1],
    ):
        a, b = stat(cpu), stat(ours)
        assert ((b >= a.min() - 1e-6) & (b <= a.max() + 1e-6)).mean() > 0.998
        for q in (0.1, 0.5, 0.9):
            assert np.quantile(b, q) == pytest.approx(
                np.quantile(a, q), abs=0.05 + 0.02
            )


def test_pad_crop_offsets_like_torchvision():
    index = torch.arange(SIZE * SIZE, dtype=torch.float32).view(1, 1, SIZE, SIZE) + 1
    cpu_crop = _step(CCT_CIFAR_200.train_transform(), v2.RandomCrop)
    torch.manual_seed(0)

    def offset(img: torch.Tensor) -> tuple[int, int]:
        nz = (img[0] > 0).nonzero()
        first = img[0][nz[0, 0], nz[0, 1]].item() - 1
        return int(first // SIZE - nz[0, 0]) + 4, int(first % SIZE - nz[0, 1]) + 4

    cpu = Counter(offset(cpu_crop(index[0])) for _ in range(3000))
    ours_out = crops.random_pad_crop(
        index.repeat(9000, 1, 1, 1), generator=torch.Generator().manual_seed(0)
    )
    ours = Counter(offset(img) for img in ours_out)
    assert set(cpu) == set(ours) == {(i, j) for i in range(9) for j in range(9)}


def _erased_areas(images: torch.Tensor) -> np.ndarray:
    """Fraction of each image's pixels replaced by noise (0 when not erased)."""
    return (images != 0).any(1).flatten(1).float().mean(1).numpy()


def test_random_erasing_like_timm():
    erase = _step(CCT_CIFAR_300.train_transform(), RandomErasing)
    assert erase.probability == CCT_CIFAR_300.random_erasing == 0.25
    random.seed(0)
    cpu = _erased_areas(
        torch.stack([erase(torch.zeros(3, SIZE, SIZE)) for _ in range(4000)])
    )
    ours = _erased_areas(
        crops.random_erasing(
            torch.zeros(16000, 3, SIZE, SIZE),
            0.25,
            generator=torch.Generator().manual_seed(0),
        )
    )
    assert (ours > 0).mean() == pytest.approx((cpu > 0).mean(), abs=0.025)
    a, b = cpu[cpu > 0], ours[ours > 0]
    assert b.min() >= a.min() - 0.01 and b.max() <= a.max() + 0.01
    for q in (0.1, 0.5, 0.9):
        assert np.quantile(b, q) == pytest.approx(np.quantile(a, q), abs=0.02)
