"""Pre-training chapter 7's backbone on the source classes of Fashion-MNIST.

The images stay in memory as uint8 and are served by a
:class:`~vitbook.data.gpu_augment.DeviceLoader` (random 2-pixel shifts and left-right
flips, then the training set's normalisation, the same as
:func:`~vitbook.data.datasets.fashion_mnist_tensors`); training uses chapter 6's recipe
(AdamW, warmup and cosine, label smoothing, clipping) with the step options given, by default
the fastest measured on the first batch (:func:`~vitbook.training.speed.fastest_step`).
The shipped backbone's record names the step that made it.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path

import torch
from torch import nn

from going_modular.utils import set_seeds
from vitbook.data.datasets import (
    FASHION_MNIST_MEAN,
    FASHION_MNIST_STD,
    get_fashion_mnist,
)
from vitbook.data.gpu_augment import BatchAugment, DeviceLoader
from vitbook.data.gpu_augment.crops import random_pad_crop
from vitbook.models.fashion_source import source_vit
from vitbook.training.loop import fit
from vitbook.training.recipe import Recipe
from vitbook.training.speed import StepOptions, fastest_step

__all__ = ["pretrain_source_backbone", "shift_flip", "source_loaders"]

_NORM = dict(mean=(FASHION_MNIST_MEAN,), std=(FASHION_MNIST_STD,))


def _select(train: bool, classes: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 images (N, 1, 28, 28) of ``classes``, relabelled 0, 1, ... in their order."""
    dataset = get_fashion_mnist(train)
    relabel = torch.full((10,), -1, dtype=torch.long)
    relabel[torch.tensor(list(classes))] = torch.arange(len(classes))
    labels = relabel[dataset.targets]
    keep = labels >= 0
    return dataset.data[keep].unsqueeze(1).contiguous(), labels[keep]


def shift_flip() -> BatchAugment:
    """The pre-training's augmentation: uint8 batches shifted by up to 2 pixels and flipped
    left-right at random, then normalised as :func:`fashion_mnist_tensors` normalises."""
    return BatchAugment([partial(random_pad_crop, padding=2, hflip=0.5)], **_NORM)


def source_loaders(
    classes: Sequence[int], batch_size: int = 128
) -> tuple[DeviceLoader, DeviceLoader]:
    """Training (shifted, flipped) and test loaders over the Fashion-MNIST images of
    ``classes``, normalised as :func:`fashion_mnist_tensors` normalises."""
    train = DeviceLoader(*_select(True, classes), batch_size, shift_flip())
    test = DeviceLoader(
        *_select(False, classes), 1000, BatchAugment(**_NORM), shuffle=False
    )
    return train, test


def pretrain_source_backbone(
    classes: Sequence[int],
    epochs: int,
    *,
    batch_size: int = 128,
    lr: float = 1e-3,
    seed: int = 0,
    max_steps_per_epoch: int | None = None,
    device: torch.device | str | None = None,
    checkpoint_dir: str | Path | None = None,
    progress: bool = True,
    options: StepOptions | None = None,
) -> tuple[nn.Module, dict[str, list[float] | str]]:
    """The small ViT trained on ``classes`` for ``epochs`` (resuming from ``checkpoint_dir``
    when it holds a checkpoint), and its per-epoch history with ``options``, the step's
    options as text.

    ``options`` (autocast, attention kernel) default to the fastest for this model,
    measured by :func:`fastest_step` on the first training batch without moving the
    random stream that training draws from.
    """
    set_seeds(seed)
    model = source_vit(len(classes))
    train, test = source_loaders(classes, batch_size)
    if options is None:
        with torch.random.fork_rng():
            options, _ = fastest_step(model, *next(iter(train)))
    steps = epochs * min(len(train), max_steps_per_epoch or len(train))
    recipe = Recipe(
        lr=lr,
        weight_decay=0.05,
        schedule="warmup_cosine",
        warmup_steps=steps // 10,
        label_smoothing=0.1,
        max_grad_norm=1.0,
        epochs=epochs,
        max_steps_per_epoch=max_steps_per_epoch,
        amp=options.amp,
    )
    with options.attention(model):
        results = fit(
            model,
            train,
            test,
            recipe,
            device=device,
            checkpoint_dir=checkpoint_dir,
            progress=progress,
        )
    return model.eval(), {**results, "options": str(options)}
