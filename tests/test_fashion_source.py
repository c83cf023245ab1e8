"""Chapter 7's shipped backbone: the file loads, its hash matches its record, and it
classifies real source-class test images at about its recorded accuracy; the
pre-training function takes step options or measures the fastest."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from vitbook.data.datasets import (
    FASHION_MNIST_MEAN,
    FASHION_MNIST_STD,
    get_fashion_mnist,
)
from vitbook.data.download import DownloadError
from vitbook.models.fashion_source import (
    WEIGHTS_FILE,
    file_sha256,
    load_fashion_source_backbone,
    source_backbone_record,
)
from vitbook.training import source_backbone
from vitbook.training.speed import StepOptions


def test_shipped_file_matches_its_record():
    record = source_backbone_record()
    assert file_sha256(WEIGHTS_FILE) == record["sha256"]
    assert WEIGHTS_FILE.stat().st_size < 5_000_000  # a few MB, shipped as package data
    assert "pretrain_ch07_backbone.py" in record["command"]


def test_a_changed_file_is_refused(tmp_path):
    copy = tmp_path / WEIGHTS_FILE.name
    shutil.copy(WEIGHTS_FILE, copy)
    shutil.copy(WEIGHTS_FILE.with_suffix(".json"), copy.with_suffix(".json"))
    with copy.open("ab") as f:
        f.write(b"\0")
    with pytest.raises(ValueError, match="SHA-256"):
        load_fashion_source_backbone(copy)


def test_backbone_classifies_source_images_at_its_recorded_accuracy():
    model, record = load_fashion_source_backbone()
    try:  # the repository's data folder (`make data`), not the test's empty one
        test_set = get_fashion_mnist(False, root=Path(__file__).parents[1] / "data")
    except DownloadError as error:
        pytest.skip(f"no Fashion-MNIST: {error}")
    x = (
        test_set.data.float().div(255).unsqueeze(1) - FASHION_MNIST_MEAN
    ) / FASHION_MNIST_STD
    y = test_set.targets
    relabel = torch.full((10,), -1, dtype=torch.long)
    relabel[torch.tensor(record["source_classes"])] = torch.arange(
        len(record["source_classes"])
    )
    keep = relabel[y] >= 0
    x, y = x[keep][:600], relabel[y[keep]][:600]
    with torch.inference_mode():
        accuracy = (model(x).argmax(1) == y).float().mean().item()
    # 600 images: the binomial standard error is below 1.5 points; allow about 3 of them
    assert abs(accuracy - record["test_acc"]) < 0.045


def _tiny_fashion(monkeypatch):
    """40 random 28 x 28 images of 4 classes in place of Fashion-MNIST."""
    generator = torch.Generator().manual_seed(0)
    fake = SimpleNamespace(
        data=torch.randint(
            0, 256, (40, 28, 28), dtype=torch.uint8, generator=generator
        ),
        targets=torch.arange(40) % 4,
    )
    monkeypatch.setattr(source_backbone, "get_fashion_mnist", lambda train: fake)


def _pretrain(**kwargs):
    return source_backbone.pretrain_source_backbone(
        [0, 1, 2],
        1,
        batch_size=8,
        max_steps_per_epoch=2,
        device="cpu",
        progress=False,
        **kwargs,
    )


def test_pretraining_uses_the_options_it_is_given(monkeypatch):
    _tiny_fashion(monkeypatch)

    def no_measuring(*args, **kwargs):
        raise AssertionError("options were given: nothing to measure")

    monkeypatch.setattr(source_backbone, "fastest_step", no_measuring)
    options = StepOptions(amp=True, math_attention=True)
    _, results = _pretrain(options=options)
    assert len(results["test_acc"]) == 1
    assert results["options"] == str(options)  # what the script records


def test_pretraining_measures_the_fastest_step_without_moving_the_random_stream(
    monkeypatch,
):
    _tiny_fashion(monkeypatch)
    measured = []

    def fastest(model, images, labels):
        measured.append(images.shape)
        torch.rand(100)  # measuring draws random numbers, as training steps do
        return StepOptions(), {}

    monkeypatch.setattr(source_backbone, "fastest_step", fastest)
    chosen, results = _pretrain()
    assert measured == [(8, 1, 28, 28)]  # the first training batch
    assert results["options"] == str(StepOptions())
    given, _ = _pretrain(options=StepOptions())
    for a, b in zip(chosen.state_dict().values(), given.state_dict().values()):
        assert torch.equal(a, b)


def test_shift_flip_moves_a_garment_by_at_most_two_pixels_over_black():
    """The pre-training's augmentation (chapter 7 trains its target models with it too):
    a bright square lands within 2 pixels of where it was, or of its mirror image; the
    border it uncovers is black, normalised; both flips and all 25 shifts occur."""
    image = torch.zeros(1, 1, 28, 28, dtype=torch.uint8)
    image[..., 5:9, 3:7] = 255  # rows 5-8, columns 3-6; mirrored: columns 21-24
    torch.manual_seed(0)
    out = source_backbone.shift_flip()(image.expand(2_000, -1, -1, -1).contiguous())
    black = -FASHION_MNIST_MEAN / FASHION_MNIST_STD
    bright = (1 - FASHION_MNIST_MEAN) / FASHION_MNIST_STD
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.unique(), torch.tensor([black, bright]))
    bright_at = (out[:, 0] > 0).nonzero()  # (image, row, column) of each bright pixel
    assert len(bright_at) == 2_000 * 16  # the square never leaves the frame
    top = bright_at[:, 1].view(2_000, 16).min(1).values
    left = bright_at[:, 2].view(2_000, 16).min(1).values
    assert set((top - 5).tolist()) == set(range(-2, 3))
    kept, mirrored = left - 3, left - 21
    assert ((kept.abs() <= 2) | (mirrored.abs() <= 2)).all()
    assert 800 < (mirrored.abs() <= 2).sum() < 1_200  # about half are flipped
    shifts = set(
        zip((top - 5).tolist(), torch.where(kept.abs() <= 2, kept, mirrored).tolist())
    )
    assert len(shifts) == 25
