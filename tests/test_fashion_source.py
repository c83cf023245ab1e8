"""Chapter 7's shipped backbone: the file loads, its hash matches its record, and it
classifies real source-class test images at about its recorded accuracy."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from going_modular.data.datasets import (
    FASHION_MNIST_MEAN,
    FASHION_MNIST_STD,
    get_fashion_mnist,
)
from going_modular.data.download import DownloadError
from going_modular.models.fashion_source import (
    WEIGHTS_FILE,
    file_sha256,
    load_fashion_source_backbone,
    source_backbone_record,
)


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
