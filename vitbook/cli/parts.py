"""The data, the model and the recipe a :class:`~vitbook.cli.config.RunConfig` asks
for: the library's switches (``--offline``, ``--data-root``), the loaders (batched
augmentation on the device with ``--gpu-augment``), the model built for the first input
shape it takes, and the engine's :class:`~vitbook.training.recipe.Recipe`."""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms

from going_modular.data import augment
from going_modular.data.loaders import default_num_workers, train_test_loaders
from going_modular.models import build_model
from vitbook.cli.config import DRY_RUN_STEPS, RunConfig
from vitbook.cli.errors import UsageError
from vitbook.data import datasets, gpu_augment, image_folders, network, paths
from vitbook.training.recipe import Recipe
from vitbook.training.speed import prefer_channels_last

__all__ = [
    "data_switches",
    "fitting_model",
    "loaders",
    "make_dataloaders",
    "prepare_model",
    "training_recipe",
]


@contextlib.contextmanager
def data_switches(config: RunConfig) -> Iterator[None]:
    """Within the block, the data code offline with ``--offline`` and its datasets in
    ``--data-root`` (each left as the caller set it when not given); put back after."""
    offline = network.is_offline()
    network.set_offline(offline or config.offline)
    root = paths.set_data_dir(config.data_root) if config.data_root else None
    try:
        yield
    finally:
        network.set_offline(offline)
        if config.data_root:
            paths.set_data_dir(root)


def _datasets(
    dataset: str | None,
    img_size: int,
    fallback: bool,
    train_transform: Callable,
    test_transform: Callable,
    channels: int | None,
    data_dir: Path | None,
) -> tuple[Dataset, Dataset]:
    """The training and test datasets of :func:`make_dataloaders`."""
    if data_dir is not None or dataset in ("food", "food20"):
        checked = data_dir is not None  # the CLI checked --data-dir before the run
        if data_dir is None:
            subset = "10%" if dataset == "food" else "20%"
            data_dir = datasets.get_food_data(subset, fallback=fallback).root
        return image_folders.image_splits(
            data_dir / "train",
            data_dir / "test",
            train_transform,
            test_transform,
            check_images=not checked,
        )
    getter = datasets.get_cifar10 if dataset == "cifar10" else datasets.get_mnist
    if dataset == "fashion_mnist":
        getter = functools.partial(
            datasets.get_fashion_mnist, pad_to_32=img_size == 32, rgb=channels == 3
        )
    return (
        getter(train=True, transform=train_transform, fallback=fallback),
        getter(train=False, transform=test_transform, fallback=fallback),
    )


def make_dataloaders(
    dataset: str | None,
    img_size: int,
    batch_size: int,
    num_workers: int | None,
    fallback: bool,
    *,
    train_transform=None,
    test_transform=None,
    channels: int | None = None,
    data_dir: Path | None = None,
) -> tuple[DataLoader, DataLoader, list[str]]:
    """Dataloaders (:func:`~going_modular.data.loaders.train_test_loaders`) and class names
    for one of :data:`~vitbook.cli.options.DATASETS`, resized to ``img_size``.

    ``train_transform``/``test_transform`` replace the default (resize + to tensor) per split.
    Fashion-MNIST is padded (not resized) to a 32 ``img_size`` and repeated to RGB when
    ``channels`` is 3. With ``data_dir`` the images come from ``data_dir/train`` and
    ``data_dir/test`` (ImageFolder layout) instead of ``dataset``.
    """
    transform = transforms.Compose(
        [transforms.Resize((img_size, img_size)), transforms.ToTensor()]
    )
    train_data, test_data = _datasets(
        dataset,
        img_size,
        fallback,
        train_transform or transform,
        test_transform or transform,
        channels,
        data_dir,
    )
    workers = default_num_workers() if num_workers is None else num_workers
    train_dl, test_dl = train_test_loaders(
        train_data, test_data, batch_size, num_workers=workers
    )
    return train_dl, test_dl, list(train_data.classes)


def _device_loaders(config: RunConfig, img_size: int, device: torch.device):
    """cifar10 as uint8 tensors on ``device``, the recipe's augmentation batched there."""
    fallback = not config.no_fallback
    train_data = datasets.get_cifar10(train=True, fallback=fallback)
    test_data = datasets.get_cifar10(train=False, fallback=fallback)
    train_dl, test_dl = gpu_augment.recipe_loaders(
        train_data,
        test_data,
        config.cct,
        img_size,
        config.batch_size,
        device,
        augment.CIFAR10_MEAN,
        augment.CIFAR10_STD,
    )
    print(f"[INFO] Augmenting batches on {device} (--gpu-augment).")
    return train_dl, test_dl, list(train_data.classes)


def loaders(
    config: RunConfig,
    img_size: int,
    channels: int,
    device: torch.device,
    one_process: bool = True,
):
    """The training and test loaders and the class names the config asks for (the
    augmentation on the device only in ``one_process``: a sampler cannot shard it)."""
    if one_process and config.augments_on(device.type):
        return _device_loaders(config, img_size, device)
    split_transforms = {}
    if config.cct is not None and config.dataset == "cifar10":
        split_transforms = {
            "train_transform": config.cct.train_transform(img_size),
            "test_transform": config.cct.test_transform(img_size),
        }
    return make_dataloaders(
        config.dataset,
        img_size,
        config.batch_size,
        config.num_workers,
        not config.no_fallback,
        channels=channels,
        data_dir=config.data_dir,
        **split_transforms,
    )


def _first_fit(config: RunConfig) -> tuple[nn.Module, int, int, Exception | None]:
    """``config.model`` built for the first input shape it takes, checked with one forward
    pass of zeros: ``(model, img_size, channels, the first shape's error)``."""
    first_error = None
    for img_size, channels in config.inputs:
        try:
            model = build_model(
                config.model,
                num_classes=config.num_classes,
                img_size=img_size,
                in_channels=channels,
            )
            model.eval()
            with torch.no_grad():
                model(torch.zeros(2, channels, img_size, img_size))
            model.train()
        except (ValueError, RuntimeError) as error:
            first_error = first_error or error
            continue
        return model, img_size, channels, first_error
    size, channels = config.inputs[0]
    raise UsageError(
        f"--model {config.model} does not fit {config.data_label} "
        f"({channels} channel(s), {size}x{size} pixels): {first_error} "
        "Pass an --img-size the model takes, or choose another --model."
    )


def fitting_model(config: RunConfig) -> tuple[nn.Module, int, int]:
    """The model for the first input shape it takes (saying how the images are changed
    for it): ``(model, img_size, channels)``, or UsageError."""
    model, img_size, channels, first_error = _first_fit(config)
    if (img_size, channels) != config.inputs[0]:
        size, grey = config.inputs[0]
        changes = [] if channels == grey else ["grey repeated to RGB"]
        if img_size != size:
            how = "padded" if (size, img_size) == (28, 32) else "resized"
            changes.insert(0, f"{how} to {img_size}x{img_size}")
        print(
            f"[INFO] {config.model} does not take {config.data_label}'s {size}x{size} "
            f"images as they are ({first_error}), so they are {' and '.join(changes)}."
        )
    batch_norms = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
    if config.batch_size == 1 and any(
        isinstance(m, batch_norms) for m in model.modules()
    ):
        raise UsageError(
            f"--model {config.model} has BatchNorm layers, which cannot train on a batch "
            "of one image (every batch would be skipped): use --batch-size 2 or more"
        )
    return model, img_size, channels


def prepare_model(model: nn.Module, compile_model: bool) -> nn.Module:
    """The model the engine runs: channels-last weights when that is faster
    (:func:`~vitbook.training.speed.prefer_channels_last`) and, with ``--compile``, compiled
    (opt-in: on this book's CPU it was 0.87x as fast; the checkpoint keeps the uncompiled
    module, which shares its weights)."""
    prefer_channels_last(model)
    if not compile_model:
        return model
    print("[INFO] torch.compile: the first steps compile the model and are slow.")
    return torch.compile(model)


def training_recipe(
    config: RunConfig, steps_per_epoch: int, num_classes: int
) -> Recipe:
    """The engine's recipe for this run: AdamW with the options' learning rate, weight decay
    (biases and norms exempt), label smoothing and warmup + cosine, or the CCT recipe's
    (:meth:`~vitbook.training.cct_recipes.CCTRecipe.training_recipe`); with the
    options' length, time budget, gradient clipping and mixed precision; with
    ``--dry-run``, every epoch at most :data:`~vitbook.cli.config.DRY_RUN_STEPS`
    training and test batches."""
    if config.cct is None:
        recipe = Recipe(
            lr=config.lr,
            weight_decay=config.weight_decay,
            label_smoothing=config.label_smoothing,
            schedule="warmup_cosine" if config.warmup_epochs > 0 else "constant",
            warmup_steps=config.warmup_epochs * steps_per_epoch,
            epochs=config.epochs,
        )
    else:
        recipe = config.cct.training_recipe(
            steps_per_epoch, config.epochs, num_classes=num_classes
        )
        print(f"[INFO] Recipe {config.cct.name}: {config.cct.source}")
    recipe = recipe.replace(
        max_steps_per_epoch=config.max_steps,
        time_budget=None if config.time_budget is None else config.time_budget * 60,
        max_grad_norm=config.max_grad_norm,
        amp=config.amp,
    )
    if not config.dry_run:
        return recipe
    return recipe.replace(
        max_steps_per_epoch=min(recipe.max_steps_per_epoch or math.inf, DRY_RUN_STEPS),
        max_eval_steps=min(recipe.max_eval_steps or math.inf, DRY_RUN_STEPS),
    )
