"""The benchmarks' own helpers (the benchmarks themselves time things and are run by hand)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

from vitbook.data.gpu_augment import DeviceLoader
from vitbook.training.loop import fit
from vitbook.training.recipe import Recipe

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from time_to_accuracy import Resuming  # noqa: E402


def labels_seen(loader, steps: int, per_epoch: int) -> list[int]:
    """The labels of the batches ``fit`` trains on, ``per_epoch`` steps per epoch."""
    seen: list[int] = []

    def record(x, y):
        seen.extend(y.tolist())
        return x, y

    model = nn.Sequential(nn.Flatten(), nn.Linear(1, 12))
    recipe = Recipe(steps=steps, max_steps_per_epoch=per_epoch, batch_transform=record)
    fit(model, loader, None, recipe, device="cpu", progress=False)
    return seen


def test_resuming_serves_every_image_once_per_pass_across_short_epochs():
    images, labels = torch.zeros(12, 1, 1, 1, dtype=torch.uint8), torch.arange(12)
    loader = DeviceLoader(images, labels, 2, lambda x: x.float())
    # epochs of 4 batches (8 images) cut a pass of 12 images: the next epoch goes on
    seen = labels_seen(Resuming(loader), steps=12, per_epoch=4)
    assert len(seen) == 24
    assert sorted(seen[:12]) == list(range(12)) == sorted(seen[12:])
    # without it, each short epoch starts a new shuffle: the first 12 repeat some images
    torch.manual_seed(0)
    fresh = labels_seen(loader, steps=12, per_epoch=4)
    assert sorted(fresh[:12]) != list(range(12))
    assert len(Resuming(loader)) == len(loader) and Resuming(loader).batch_size == 2
