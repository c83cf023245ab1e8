"""The batched augmentation of ``going_modular.gpu_augment`` against the CPU recipes.

Three levels: each batched operation against the PIL operation the CPU recipe calls (same
image, same argument); the random parameters each policy draws against the ones the CPU
recipe's own transforms draw (recorded from them, fixed seeds); and whole pipelines (shapes,
dtypes, statistics, MixUp/CutMix labels), the loader and the CLI flag.
"""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
import torch
from PIL import Image
from timm.data import RandomResizedCropAndInterpolation
from timm.data import auto_augment as aa
from timm.data.random_erasing import RandomErasing
from torchvision.transforms import v2

from going_modular import augment, train
from going_modular import gpu_augment as G
from going_modular.augment import CCT_CIFAR_200, CCT_CIFAR_300
from going_modular.models import build_model

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


@pytest.fixture(scope="module")
def photo() -> Image.Image:
    from skimage import data

    return Image.fromarray(data.astronaut()).resize((SIZE, SIZE), Image.BILINEAR)


def _tensor(image: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.array(image)).permute(2, 0, 1)[None].float()


def _one(value: float) -> torch.Tensor:
    return torch.tensor([float(value)])


def _step(transform, kind):
    return next(t for t in transform.transforms if isinstance(t, kind))


# --- each operation against PIL -----------------------------------------------------------


@pytest.mark.parametrize(
    ("pil_op", "arg", "ours"),
    [
        (aa.auto_contrast, None, G.auto_contrast),
        (aa.equalize, None, G.equalize),
        (aa.invert, None, G.invert),
        (aa.posterize, 1, G.posterize),
        (aa.posterize, 3, G.posterize),
        (aa.solarize, 26, G.solarize),
        (aa.solarize, 200, G.solarize),
        (aa.solarize_add, 99, G.solarize_add),
        (aa.color, 0.2, G.color),
        (aa.color, 1.8, G.color),
        (aa.contrast, 0.2, G.contrast),
        (aa.contrast, 1.8, G.contrast),
        (aa.brightness, 0.2, G.brightness),
        (aa.brightness, 1.8, G.brightness),
        (aa.sharpness, 0.2, G.sharpness),
        (aa.sharpness, 1.8, G.sharpness),
    ],
)
def test_pixel_operations_match_pil(photo, pil_op, arg, ours):
    expected = _tensor(pil_op(photo) if arg is None else pil_op(photo, arg))
    got = ours(_tensor(photo), None if arg is None else _one(arg))
    assert (got - expected).abs().max() <= 1  # PIL rounds the same way, up to one level


@pytest.mark.parametrize(
    ("pil_op", "arg", "ours"),
    [
        (aa.rotate, 23.0, G.rotate),
        (aa.shear_x, 0.27, G.shear_x),
        (aa.shear_y, -0.13, G.shear_y),
        (aa.translate_x_abs, 6, G.translate_x),
        (aa.translate_y_abs, -9, G.translate_y),
    ],
)
def test_geometric_operations_match_pil(photo, pil_op, arg, ours):
    fill = (125, 123, 114)
    expected = _tensor(pil_op(photo, arg, fillcolor=fill, resample=Image.BILINEAR))
    got = ours(_tensor(photo), _one(arg), fill=fill, mode="bilinear")
    diff = (got - expected).abs()
    # sub-pixel conventions differ slightly at edges; the images are the same
    assert diff.mean() < 1.5 and (diff <= 2).float().mean() > 0.95


def test_rotate_nearest_matches_pil(photo):
    expected = _tensor(photo.rotate(17, resample=Image.NEAREST, fillcolor=(128,) * 3))
    got = G.rotate(_tensor(photo), _one(17), fill=(128.0,), mode="nearest")
    assert (got - expected).abs().max() <= 1


def test_resized_crop_matches_pil_crop_and_resize(photo):
    x = _tensor(photo).repeat(48, 1, 1, 1)
    got = G.random_resized_crop(x, generator=torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(3)  # the same draws: boxes, then interpolation
    boxes = G.resized_crop_boxes(48, SIZE, SIZE, generator=g)
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
    out = G.random_pad_crop(x, padding=0, hflip=0.5)
    flipped = (out == x.flip(-1)).flatten(1).all(1)
    same = (out == x).flatten(1).all(1)
    assert (flipped | same).all() and 10 < flipped.sum() < 54


# --- the random parameters against the CPU recipe's -------------------------------------


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
    layers = G.RandAugment().sample(n, SIZE, "cpu", torch.Generator().manual_seed(0))
    applied = []
    for op, arg, _ in layers:
        for o, a in zip(op.tolist(), arg.tolist()):
            if o >= 0:
                applied.append((G.OP_NAMES[o], a))
    return applied


def test_randaugment_draws_like_timm():
    n_cpu, n_ours = 6000, 30000
    cpu_images, policy = _record_timm_randaugment(n_cpu)
    assert policy.num_layers == 2 and all(op.prob == 0.5 for op in policy.ops)
    assert {TIMM_TO_OURS.get(op.name, op.name) for op in policy.ops} == set(
        G.RAND_INCREASING
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
    for name in G.RAND_INCREASING:  # uniform over the 15 operations, on both sides
        assert ours_freq[name] / len(ours) == pytest.approx(1 / 15, abs=0.008)
        assert cpu_freq[name] / len(cpu) == pytest.approx(1 / 15, abs=0.02)
    for name in G.RAND_INCREASING:
        cpu_args = np.array([a[0] for n_, a in cpu if n_ == name and a], dtype=float)
        ours_args = np.array([a for n_, a in ours if n_ == name], dtype=float)
        if name in ("TranslateX", "TranslateY"):
            ours_args = ours_args / SIZE  # pixels -> timm's fraction of the width
        if len(cpu_args) == 0:  # no argument: AutoContrast, Equalize, Invert
            continue
        neutral = G.OPS[name][1]
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
    layers = G.AutoAugment().sample(
        n_ours, SIZE, "cpu", torch.Generator().manual_seed(0)
    )
    ours = Counter()
    for op, arg in layers:
        for o, a in zip(op.tolist(), arg.tolist()):
            if o >= 0:
                name = G.OP_NAMES[o]
                ours[(name, round(a, 3 if name == "Solarize" else 4))] += 1
    assert set(ours) == set(cpu)  # the same operations with the same magnitudes
    for key in cpu:  # drawn as often (binomial tolerance, 5 sigma)
        p = cpu[key] / n_cpu
        sigma = (p * (1 - p) / n_cpu) ** 0.5 + (p * (1 - p) / n_ours) ** 0.5
        assert ours[key] / n_ours == pytest.approx(p, abs=5 * sigma + 1e-3), key


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
    ours = G.resized_crop_boxes(
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
    ours_out = G.random_pad_crop(
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
        G.random_erasing(
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


@pytest.mark.parametrize("policy", [G.RandAugment(), G.AutoAugment()])
def test_sync_free_and_sorted_paths_agree(photo, policy):
    x = _tensor(photo).repeat(300, 1, 1, 1)
    x = (x + torch.randint(0, 30, x.shape)).clamp(0, 255)  # different images
    for layer in policy.sample(300, SIZE, "cpu", torch.Generator().manual_seed(1)):
        op, arg, *mode = layer
        mode = mode[0] if mode else policy.mode
        fast = G.apply_ops(x, op, arg, fill=policy.fill, mode=mode, sync_free=False)
        free = G.apply_ops(x, op, arg, fill=policy.fill, mode=mode, sync_free=True)
        torch.testing.assert_close(fast, free)
        x = fast


# --- whole pipelines, labels, loader, CLI -------------------------------------------------


def _real_batch(n: int) -> torch.Tensor:
    from skimage import data

    photo = np.asarray(data.astronaut())
    rng = np.random.default_rng(0)
    crops = [
        photo[y : y + 96 : 3, x : x + 96 : 3] for y, x in rng.integers(0, 400, (n, 2))
    ]
    return torch.from_numpy(np.stack(crops)).permute(0, 3, 1, 2).contiguous()


@pytest.mark.parametrize("recipe", [CCT_CIFAR_300, CCT_CIFAR_200])
def test_pipeline_matches_cpu_recipe_output(recipe):
    images = _real_batch(128)
    torch.manual_seed(0)
    random.seed(0)
    cpu_transform = recipe.train_transform()
    cpu = torch.stack(
        [cpu_transform(Image.fromarray(im.permute(1, 2, 0).numpy())) for im in images]
    )
    ours = G.recipe_augment(recipe, augment.CIFAR10_MEAN, augment.CIFAR10_STD)(images)
    assert ours.shape == cpu.shape == (128, 3, SIZE, SIZE)
    assert ours.dtype == cpu.dtype == torch.float32
    assert torch.isfinite(ours).all()
    for stat in (torch.mean, torch.std):
        assert stat(ours).item() == pytest.approx(stat(cpu).item(), abs=0.15)
    test = G.BatchAugment([], augment.CIFAR10_MEAN, augment.CIFAR10_STD)(images)
    expected = torch.stack(
        [
            recipe.test_transform()(Image.fromarray(im.permute(1, 2, 0).numpy()))
            for im in images
        ]
    )
    torch.testing.assert_close(test, expected)


def test_mixing_labels_match_the_cpu_path():
    model = build_model("cct_2_3x2", num_classes=10, img_size=SIZE)
    parts = CCT_CIFAR_300.build(model, 10, 1, num_classes=10)
    images, y = _real_batch(64), torch.arange(64) % 10
    cpu_batch = torch.stack(
        [
            CCT_CIFAR_300.train_transform()(
                Image.fromarray(im.permute(1, 2, 0).numpy())
            )
            for im in images
        ]
    )
    ours_batch = G.recipe_augment(
        CCT_CIFAR_300, augment.CIFAR10_MEAN, augment.CIFAR10_STD
    )(images)
    outs = []
    for batch in (cpu_batch, ours_batch):
        np.random.seed(0)
        torch.manual_seed(0)
        outs.append(parts.batch_transform(batch, y))
    (x_cpu, t_cpu), (x_ours, t_ours) = outs
    assert x_ours.shape == x_cpu.shape and x_ours.dtype == x_cpu.dtype
    assert torch.equal(t_ours, t_cpu)  # the same soft targets for the same draws
    assert t_ours.shape == (64, 10)
    torch.testing.assert_close(t_ours.sum(1), torch.ones(64))


def test_device_loader_serves_every_image_once_per_epoch():
    images = torch.randint(0, 256, (70, 3, 8, 8), dtype=torch.uint8)
    labels = torch.arange(70)
    aug = G.BatchAugment([], (0.0,), (1.0,))
    loader = G.DeviceLoader(images, labels, 16, aug, chunk=32)
    assert loader.chunk == 32 and len(loader) == 5 and len(loader.dataset) == 70
    seen = []
    for x, y in loader:
        assert x.dtype == torch.float32 and x.shape[1:] == (3, 8, 8)
        torch.testing.assert_close(x, images[y].float() / 255)
        seen += y.tolist()
    assert sorted(seen) == list(range(70))
    dropped = G.DeviceLoader(images, labels, 16, aug, drop_last=True)
    assert len(dropped) == 4 and all(len(y) == 16 for _, y in dropped)


def test_device_loader_passes_serve_every_image_once_per_pass():
    images = torch.randint(0, 256, (70, 1, 4, 4), dtype=torch.uint8)
    labels = torch.arange(70)
    aug = G.BatchAugment([], (0.0,), (1.0,))
    loader = G.DeviceLoader(images, labels, 16, aug, passes=3, drop_last=True)
    assert len(loader) == 12  # 4 full batches per pass
    seen = torch.cat([y for _, y in loader])
    assert len(seen) == 3 * 64
    for k in range(3):  # each pass is its own shuffle, without repeats
        part = seen[64 * k : 64 * (k + 1)]
        assert len(set(part.tolist())) == 64
    assert not torch.equal(seen[:64], seen[64:128])
    whole = G.DeviceLoader(images, labels, 16, aug, passes=2)
    counts = torch.bincount(torch.cat([y for _, y in whole]), minlength=70)
    assert len(whole) == 9 and counts.tolist() == [2] * 70
    with pytest.raises(ValueError, match="passes must be positive"):
        G.DeviceLoader(images, labels, 16, aug, passes=0)


def test_bad_inputs_are_refused_with_advice():
    aug = G.BatchAugment()
    with pytest.raises(TypeError, match="uint8"):
        aug(torch.zeros(2, 3, 8, 8))
    with pytest.raises(TypeError, match="to_uint8_images"):
        G.DeviceLoader(torch.zeros(2, 3, 8, 8), torch.zeros(2), 1, aug)
    with pytest.raises(ValueError, match="as many labels"):
        G.DeviceLoader(
            torch.zeros(2, 3, 8, 8, dtype=torch.uint8), torch.zeros(3), 1, aug
        )


def test_to_uint8_images_reads_pil_datasets():
    items = [(Image.new("RGB", (8, 8), (i, 0, 0)), i) for i in range(3)]
    x = G.to_uint8_images(items, img_size=4)
    assert x.shape == (3, 3, 4, 4) and x.dtype == torch.uint8
    assert x[:, 0, 0, 0].tolist() == [0, 1, 2]


def test_cli_gpu_augment_trains_and_refuses_misuse(tmp_path, capsys):
    train.main(
        [
            "--dataset", "cifar10", "--recipe", "cct", "--model", "cct_2_3x2",
            "--epochs", "1", "--max-steps", "2", "--batch-size", "32",
            "--gpu-augment", "on", "--output-dir", str(tmp_path / "run"),
        ]
    )  # fmt: skip
    assert "Augmenting batches on cpu" in capsys.readouterr().out
    assert (tmp_path / "run" / "latest" / "model.pth").exists()
    with pytest.raises(SystemExit) as exit_info:
        train.main(["--dataset", "mnist", "--gpu-augment", "on"])
    assert exit_info.value.code == 2
    assert "--gpu-augment on needs --recipe" in capsys.readouterr().err
