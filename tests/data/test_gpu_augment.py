"""vitbook.data.gpu_augment: whole pipelines against the CPU recipes (shapes, dtypes,
statistics, MixUp/CutMix labels), the loader, and the CLI flag."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from PIL import Image

from vitbook import train
from going_modular.data import augment
from vitbook.data import gpu_augment as G
from vitbook.training.cct_recipes import CCT_CIFAR_200, CCT_CIFAR_300

SIZE = 32


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
    np.random.seed(0)  # timm's RandAugment picks its operations with numpy
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
    mix = CCT_CIFAR_300.training_recipe(10, 1, num_classes=10).batch_transform
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
        outs.append(mix(batch, y))
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
    with pytest.raises(ValueError, match="passes must be a positive integer, got 0"):
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
