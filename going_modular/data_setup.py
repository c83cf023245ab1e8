"""Turn two folders of images into PyTorch DataLoaders, as the course's ``data_setup.py``.

Each folder holds one subfolder of images per class (torchvision's ``ImageFolder``
layout); hidden folders such as ``.ipynb_checkpoints`` are not classes. The command line
checks a folder much more closely before a long run (``vitbook.data.image_folders``).
"""

from __future__ import annotations

import os
from pathlib import Path

from PIL import Image
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

from going_modular.data.loaders import default_num_workers, train_test_loaders

__all__ = ["NUM_WORKERS", "create_dataloaders", "load_image", "walk_through_dir"]

NUM_WORKERS = default_num_workers()


def load_image(path: str) -> Image.Image:
    """torchvision's image loader (RGB), naming the file when it cannot be read."""
    try:
        return datasets.folder.pil_loader(path)
    except (OSError, Image.DecompressionBombError) as error:
        raise OSError(f"Cannot read image {path}: {error}") from error


class _VisibleImageFolder(datasets.ImageFolder):
    """An ``ImageFolder`` whose classes are its visible subfolders, read by
    :func:`load_image`."""

    def __init__(self, root: str | Path, transform) -> None:
        super().__init__(root, transform=transform, loader=load_image)

    def find_classes(self, directory: str) -> tuple[list[str], dict[str, int]]:
        classes, _ = super().find_classes(directory)
        classes = [c for c in classes if not c.startswith(".")]
        return classes, {name: i for i, name in enumerate(classes)}


def _subfolders(folder: Path) -> list[str]:
    """The names of ``folder``'s visible subfolders, sorted."""
    return sorted(d.name for d in folder.iterdir() if d.is_dir() and d.name[0] != ".")


def _classes(folder: Path, name: str) -> list[str]:
    """The class folders of the ``name`` folder, or an error saying why it is not one."""
    if folder.is_file():
        raise NotADirectoryError(
            f"The {name} folder {folder} is a file, not a folder: give a folder with "
            "one subfolder of images per class."
        )
    if not folder.is_dir():
        raise FileNotFoundError(
            f"The {name} folder {folder} does not exist: give a folder with one "
            "subfolder of images per class."
        )
    found = _subfolders(folder)
    if not found:
        raise ValueError(f"The {name} folder {folder} has no class subfolders.")
    splits = [c for c in found if c in ("train", "test") and _subfolders(folder / c)]
    if splits:
        raise ValueError(
            f"The {name} folder {folder} holds {' and '.join(splits)}/ with class "
            "subfolders: this looks like the dataset's root. Pass "
            f"{folder / 'train'} and {folder / 'test'}."
        )
    return found


def _check_transform(**transforms_: object) -> None:
    """Refuse a transform that is not a function of an image (e.g. a name)."""
    for name, transform in transforms_.items():
        if transform is not None and not callable(transform):
            raise TypeError(
                f"{name} must turn an image into a tensor (a callable such as "
                f"transforms.Compose([...])), got {transform!r}."
            )


def create_dataloaders(
    train_dir: str | Path,
    test_dir: str | Path,
    transform: transforms.Compose,
    batch_size: int,
    num_workers: int = NUM_WORKERS,
    test_transform: transforms.Compose | None = None,
) -> tuple[DataLoader, DataLoader, list[str]]:
    """Create training and testing DataLoaders from two ImageFolder directories.

    Args:
        train_dir: folder with one subfolder of images per class, for training.
        test_dir: the same layout, for testing.
        transform: turns a PIL image into a tensor (applied to test images too, unless
            ``test_transform`` is given).
        batch_size: images per batch.
        num_workers: loader processes (all cores when there is a GPU to feed).
        test_transform: optional separate transform for test images (no augmentation).

    Returns:
        ``(train_dataloader, test_dataloader, class_names)``.
    """
    if transform is None:
        raise ValueError(
            "transform is None: give one that turns images into tensors, e.g. "
            "transforms.Compose([transforms.Resize((64, 64)), transforms.ToTensor()])."
        )
    _check_transform(transform=transform, test_transform=test_transform)
    if Path(train_dir).resolve() == Path(test_dir).resolve():
        raise ValueError(
            f"train_dir and test_dir are the same folder ({train_dir}): the model would "
            "be tested on the images it trained on. Pass the training and the test "
            "folders, e.g. <root>/train and <root>/test."
        )
    train_classes = _classes(Path(train_dir), "training")
    test_classes = _classes(Path(test_dir), "test")
    if train_classes != test_classes:
        raise ValueError(
            f"Train classes {train_classes} and test classes {test_classes} differ; "
            "both folders need the same class subfolders."
        )
    train_data = _VisibleImageFolder(train_dir, transform)
    test_data = _VisibleImageFolder(test_dir, test_transform or transform)
    train_dataloader, test_dataloader = train_test_loaders(
        train_data, test_data, batch_size, num_workers=num_workers
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
