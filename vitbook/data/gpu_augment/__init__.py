"""Batched, device-side augmentation: the CCT recipes' image transforms on whole batches.

The CPU recipes in :mod:`going_modular.data.augment` transform one PIL image at a time in loader
workers; on Colab two cores cannot keep a GPU busy that way. Here the images stay in memory as
one uint8 tensor (on the training device) and every step of the recipe runs on a whole batch at
once, with its random parameters drawn per sample. Images are float in [0, 255] between steps
and rounded after each operation, as PIL keeps them in uint8.

* :class:`BatchAugment` chains the steps, then normalises and erases;
  :func:`recipe_augment` builds the chain of a recipe (:class:`AugmentRecipe`, such as a
  :class:`~vitbook.training.cct_recipes.CCTRecipe`) from the crops
  (:mod:`~vitbook.data.gpu_augment.crops`) and the policies
  (:mod:`~vitbook.data.gpu_augment.policies`, built on the operations of
  :mod:`~vitbook.data.gpu_augment.ops`);
* :class:`DeviceLoader` serves shuffled, augmented batches from the tensors
  (:func:`to_uint8_images` makes them), :func:`recipe_loaders` the training and test loaders
  of a recipe.

MixUp/CutMix stay the recipe's own batch transform, which the engine applies on the device.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Protocol

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset, TensorDataset

from going_modular.data.checks import check_sizes
from vitbook.data.gpu_augment.crops import (
    random_erasing,
    random_hflip,
    random_pad_crop,
    random_resized_crop,
)
from vitbook.data.gpu_augment.policies import AutoAugment, RandAugment

__all__ = [
    "AugmentRecipe",
    "BatchAugment",
    "DeviceLoader",
    "Step",
    "recipe_augment",
    "recipe_loaders",
    "to_uint8_images",
]

#: One step of a :class:`BatchAugment`: float images (n, C, H, W) in [0, 255] -> the same.
Step = Callable[[torch.Tensor], torch.Tensor]


class AugmentRecipe(Protocol):
    """What the device-side augmentation reads of a recipe (a
    :class:`~vitbook.training.cct_recipes.CCTRecipe` has these fields): the data
    layer names the fields it needs instead of importing the training layer."""

    policy: str | None  # "autoaugment", "randaugment" or None
    crop: str | None  # "pad", "resized" or None
    hflip: bool
    random_erasing: float
    mixup_alpha: float
    cutmix_alpha: float


class BatchAugment:
    """uint8 batch (n, C, H, W) -> augmented, normalised float32 batch, on the batch's device.

    ``steps`` run on float images in [0, 255]; then normalisation with ``mean``/``std`` (in
    [0, 1] units, as torchvision's Normalize), then random erasing with probability
    ``random_erasing`` (0: none). No steps and no erasing give the test transform.
    """

    def __init__(
        self,
        steps: Sequence[Step] = (),
        mean: Sequence[float] = (0.5,),
        std: Sequence[float] = (0.5,),
        random_erasing: float = 0.0,
    ):
        self.steps, self.random_erasing = list(steps), random_erasing
        self.mean, self.std = tuple(mean), tuple(std)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        if images.dtype != torch.uint8 or images.ndim != 4:
            raise TypeError(
                f"BatchAugment takes uint8 batches (n, C, H, W), got {images.dtype} "
                f"{tuple(images.shape)}; keep the data as uint8 (see to_uint8_images)."
            )
        x = images.float()
        for step in self.steps:
            x = step(x)
        mean = x.new_tensor(self.mean).view(1, -1, 1, 1) * 255
        std = x.new_tensor(self.std).view(1, -1, 1, 1) * 255
        x = x.sub_(mean).div_(std)
        if self.random_erasing > 0:
            x = random_erasing(x, self.random_erasing)
        return x

    def __repr__(self) -> str:
        names = ", ".join(
            getattr(getattr(s, "func", s), "__name__", repr(s)) for s in self.steps
        )
        return f"BatchAugment([{names}], erasing={self.random_erasing})"


def recipe_augment(
    recipe: AugmentRecipe,
    mean: Sequence[float],
    std: Sequence[float],
) -> BatchAugment:
    """The device-side twin of ``recipe.train_transform()`` (a :class:`~.cct_recipes.CCTRecipe`).

    The same steps in the same order as :func:`~.augment.cifar_train_transform`: AutoAugment
    (grey fill) before the crop and the flip, RandAugment (filled with ``mean`` in pixels, as
    timm's ``img_mean``) after them; then normalisation and random erasing.
    """
    flip = 0.5 if recipe.hflip else 0.0
    if recipe.crop == "pad":
        geometric: list[Step] = [partial(random_pad_crop, hflip=flip)]
    elif recipe.crop == "resized":
        geometric = [partial(random_resized_crop, hflip=flip)]
    elif recipe.crop is None:
        geometric = [random_hflip] if recipe.hflip else []
    else:
        raise ValueError(f"Unknown crop {recipe.crop!r}.")
    if recipe.policy == "autoaugment":
        steps = [AutoAugment(), *geometric]
    elif recipe.policy == "randaugment":
        img_mean = [min(255, round(255 * m)) for m in mean]
        steps = [*geometric, RandAugment(fill=img_mean)]
    elif recipe.policy is None:
        steps = geometric
    else:
        raise ValueError(f"Unknown policy {recipe.policy!r}.")
    return BatchAugment(steps, mean, std, recipe.random_erasing)


def to_uint8_images(dataset: Dataset, img_size: int | None = None) -> torch.Tensor:
    """All images of ``dataset`` (PIL images or uint8 arrays, no transform) as (N, C, H, W)
    uint8, resized to ``img_size`` (antialiased) when given."""
    import numpy as np

    data = getattr(dataset, "data", None)
    if data is not None and getattr(dataset, "transform", None) is None:
        arrays = np.asarray(data)
    else:
        arrays = np.stack([np.asarray(dataset[i][0]) for i in range(len(dataset))])
    x = torch.from_numpy(arrays)
    x = x.unsqueeze(1) if x.ndim == 3 else x.permute(0, 3, 1, 2)
    if img_size is not None and tuple(x.shape[-2:]) != (img_size, img_size):
        x = F.interpolate(
            x.float(), size=(img_size, img_size), mode="bilinear", antialias=True
        )
        x = x.round().clamp(0, 255).to(torch.uint8)
    return x.contiguous()


class DeviceLoader:
    """Shuffled batches ``(augment(images[idx]), labels[idx])`` from tensors on one device.

    A drop-in for the engine's dataloaders when the data fits in (GPU) memory: no workers, no
    host-to-device copies, augmentation batched by ``augment`` (a :class:`BatchAugment`).
    ``augment`` runs on ``chunk`` images at a time (a multiple of ``batch_size``; by default
    about 8 MiB of float images), which spreads its fixed cost per call over more images.
    ``drop_last`` drops a last, smaller batch. ``passes``
    makes one iteration (one epoch of the engine) that many shuffled passes over the images,
    for small datasets trained many times over without a test after every pass.
    """

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        batch_size: int,
        augment: Callable[[torch.Tensor], torch.Tensor],
        *,
        shuffle: bool = True,
        drop_last: bool = False,
        device: torch.device | str | None = None,
        chunk: int | None = None,
        passes: int = 1,
    ):
        if images.dtype != torch.uint8 or images.ndim != 4:
            raise TypeError(
                f"DeviceLoader needs uint8 images (N, C, H, W), got {images.dtype} "
                f"{tuple(images.shape)}; convert with to_uint8_images(dataset)."
            )
        if len(images) != len(labels) or len(images) == 0:
            raise ValueError(
                f"Need as many labels as images, and at least one: got {len(images)} "
                f"images and {len(labels)} labels."
            )
        check_sizes(batch_size=batch_size, passes=passes)
        device = device or images.device
        self.images, self.labels = images.to(device), labels.to(device)
        self.batch_size, self.augment = batch_size, augment
        self.shuffle, self.drop_last, self.passes = shuffle, drop_last, passes
        if chunk is None:
            chunk = 2**23 // (4 * images[0].numel())
        self.chunk = max(1, chunk // batch_size) * batch_size

    @property
    def dataset(self) -> TensorDataset:
        """The uint8 images and their labels, as a dataset (for ``len`` and inspection)."""
        return TensorDataset(self.images, self.labels)

    def __len__(self) -> int:
        return math.ceil(self.passes * self._per_pass() / self.batch_size)

    def _per_pass(self) -> int:
        """Images served per pass (a multiple of the batch size with ``drop_last``)."""
        n = len(self.images)
        return n // self.batch_size * self.batch_size if self.drop_last else n

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        n, dev = len(self.images), self.images.device
        keep = self._per_pass()
        order = torch.cat(
            [
                (torch.randperm(n) if self.shuffle else torch.arange(n))[:keep]
                for _ in range(self.passes)
            ]
        ).to(dev)
        for first in range(0, len(order), self.chunk):
            idx = order[first : first + self.chunk]
            xs, ys = self.augment(self.images[idx]), self.labels[idx]
            for start in range(0, len(idx), self.batch_size):
                end = start + self.batch_size
                yield xs[start:end], ys[start:end]


def recipe_loaders(
    train_data: Dataset,
    test_data: Dataset,
    recipe: AugmentRecipe,
    img_size: int,
    batch_size: int,
    device: torch.device | str,
    mean: Sequence[float],
    std: Sequence[float],
) -> tuple[DeviceLoader, DeviceLoader]:
    """Training and test :class:`DeviceLoader` for a recipe: the images of ``train_data`` and
    ``test_data`` (no transform; ``.targets`` labels) as uint8 tensors on ``device``, the
    training batches augmented by :func:`recipe_augment`, the test batches only normalised.
    A recipe that mixes gets full batches only (``drop_last``, as timm's training script
    does with MixUp), so every mixed batch has the recipe's batch size."""
    mixes = recipe.mixup_alpha > 0 or recipe.cutmix_alpha > 0
    train = DeviceLoader(
        to_uint8_images(train_data, img_size),
        torch.as_tensor(train_data.targets),
        batch_size,
        recipe_augment(recipe, mean, std),
        drop_last=mixes,
        device=device,
    )
    test = DeviceLoader(
        to_uint8_images(test_data, img_size),
        torch.as_tensor(test_data.targets),
        batch_size,
        BatchAugment([], mean, std),
        shuffle=False,
        device=device,
    )
    return train, test
