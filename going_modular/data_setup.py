"""Turn an ImageFolder dataset on disk into PyTorch DataLoaders, with clear errors."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from PIL import Image, UnidentifiedImageError
from torch.utils.data import DataLoader
from torchvision import datasets, transforms


def default_num_workers() -> int:
    """Worker processes for loading: all cores with a GPU to feed, none on a CPU-only machine."""
    return (os.cpu_count() or 0) if torch.cuda.is_available() else 0


class ImageDecodeError(ValueError):
    """An image file that cannot be decoded; the message names it and what to do."""


def load_rgb(path: str | Path) -> Image.Image:
    """Open an image as RGB, or raise an error that names the file and what to do."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"No image file at {path}. Check the path.")
    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except (UnidentifiedImageError, OSError) as error:
        raise ImageDecodeError(
            f"Cannot decode image {path}: {error}. Delete or replace this file and try again."
        ) from error


def check_image_folder(folder: str | Path) -> list[str]:
    """Check that ``folder`` exists and holds one subfolder per class; return the class names."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(
            f"Data folder {folder} does not exist. Download the data first (for example with "
            "going_modular.datasets.get_food_data()) or check the path."
        )
    classes = sorted(
        p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")
    )
    if not classes:
        raise ValueError(
            f"Data folder {folder} has no class subfolders. Expected the ImageFolder layout "
            f"{folder}/<class_name>/<image>.jpg, one subfolder per class."
        )
    return classes


def is_hidden(path: str | Path, root: str | Path) -> bool:
    """Whether any part of ``path`` below ``root`` starts with a dot (``.ipynb_checkpoints``)."""
    return any(part.startswith(".") for part in Path(path).relative_to(root).parts)


class VisibleImageFolder(datasets.ImageFolder):
    """torchvision's ImageFolder without hidden folders and files.

    A ``.ipynb_checkpoints`` folder (Jupyter makes one when a notebook opens an image) or
    macOS's ``._name.jpg`` files would otherwise become a class or a sample, and a hidden
    class folder sorts first, shifting every label against a test folder without it.
    """

    def __init__(self, root: str | Path, transform=None, loader=load_rgb):
        root = str(root)
        super().__init__(
            root,
            transform=transform,
            loader=loader,
            is_valid_file=lambda path: (
                datasets.folder.has_file_allowed_extension(
                    path, datasets.folder.IMG_EXTENSIONS
                )
                and not is_hidden(path, root)
            ),
        )

    def find_classes(self, directory: str | Path) -> tuple[list[str], dict[str, int]]:
        classes = check_image_folder(directory)
        return classes, {name: i for i, name in enumerate(classes)}


def create_dataloaders(
    train_dir: str | Path,
    test_dir: str | Path,
    transform: transforms.Compose,
    batch_size: int,
    num_workers: int | None = None,
    test_transform: transforms.Compose | None = None,
) -> tuple[DataLoader, DataLoader, list[str]]:
    """Create training and testing DataLoaders from two ImageFolder directories.

    Args:
        train_dir: folder with one subfolder of images per class, for training.
        test_dir: the same layout, for testing.
        transform: applied to training images (and to test images unless ``test_transform``).
        batch_size: images per batch.
        num_workers: loader processes; by default :func:`default_num_workers`.
        test_transform: optional separate transform for test images (no augmentation).

    Returns:
        ``(train_dataloader, test_dataloader, class_names)``.
    """
    if batch_size <= 0:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size}.")
    if num_workers is not None and num_workers < 0:
        raise ValueError(f"num_workers must be 0 or more, got {num_workers}.")
    train_classes = check_image_folder(train_dir)
    test_classes = check_image_folder(test_dir)
    if train_classes != test_classes:
        raise ValueError(
            f"Train classes {train_classes} and test classes {test_classes} differ; "
            "both folders need the same class subfolders."
        )
    train_data = VisibleImageFolder(train_dir, transform=transform)
    test_data = VisibleImageFolder(test_dir, transform=test_transform or transform)
    workers = default_num_workers() if num_workers is None else num_workers
    pin = torch.cuda.is_available()
    train_dataloader = DataLoader(
        train_data,
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        pin_memory=pin,
    )
    test_dataloader = DataLoader(
        test_data,
        batch_size=batch_size,
        shuffle=False,
        num_workers=workers,
        pin_memory=pin,
    )
    return train_dataloader, test_dataloader, train_data.classes


def walk_through_dir(dir_path: str | Path) -> None:
    """Print how many folders and images each folder below ``dir_path`` holds (hidden ones
    are skipped, as the loaders skip them)."""
    for dirpath, dirnames, filenames in os.walk(dir_path):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        filenames = [f for f in filenames if not f.startswith(".")]
        print(
            f"There are {len(dirnames)} directories and {len(filenames)} images in '{dirpath}'."
        )
