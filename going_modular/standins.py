"""Offline stand-ins: small, real, learnable datasets made from data that packages ship.

Readers with internet use the real datasets; CI and offline readers get these instead, and
every getter says so in one line. None of them is noise:

* ``texture_photos``: for pizza/steak/sushi. Crops of scikit-image's brick, grass and gravel
  photographs, train and test cut from disjoint rows of each photograph, in ImageFolder layout.
* ``DigitsMNIST``: for MNIST. scikit-learn's 1,797 real 8x8 handwritten digits, upscaled to 28x28.
* ``PhotoDigits``: for CIFAR-10's 32x32 RGB, 10 classes. The same handwritten digits, coloured
  and placed on crops of real photographs shipped with scikit-image.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image
from torch.utils.data import Dataset

TEXTURE_CLASSES = ("brick", "grass", "gravel")
_BACKGROUND_PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field")


def _texture(name: str) -> np.ndarray:
    from skimage import data

    return np.asarray(getattr(data, name)(), dtype=np.uint8)


def make_texture_photos(
    root: Path,
    train_per_class: int = 75,
    test_per_class: int = 25,
    crop: int = 128,
    seed: int = 0,
) -> Path:
    """Write the 3-class texture dataset to ``root`` (ImageFolder layout) and return it.

    Train crops come from the top 65% of each 512x512 photograph's rows, test crops from the
    bottom 30%, so no test pixel was ever seen in training. The folder appears atomically.
    """
    if (root / "train").is_dir() and (root / "test").is_dir():
        return root
    rng = np.random.default_rng(seed)
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
    try:
        for name in TEXTURE_CLASSES:
            photo = _texture(name)
            height = photo.shape[0]
            regions = {
                "train": (0, int(0.65 * height), train_per_class),
                "test": (int(0.70 * height), height, test_per_class),
            }
            for split, (top, bottom, count) in regions.items():
                folder = staging / split / name
                folder.mkdir(parents=True)
                for i in range(count):
                    size = int(rng.integers(crop // 2, min(crop * 2, bottom - top) + 1))
                    y = int(rng.integers(top, bottom - size + 1))
                    x = int(rng.integers(0, photo.shape[1] - size + 1))
                    patch = Image.fromarray(photo[y : y + size, x : x + size]).convert(
                        "RGB"
                    )
                    if rng.random() < 0.5:
                        patch = patch.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
                    patch.resize((crop, crop), Image.Resampling.BICUBIC).save(
                        folder / f"{name}_{i:03d}.jpg", quality=92
                    )
        try:
            os.replace(staging, root)
        except OSError:  # another process finished first; keep its complete copy
            if not (root / "train").is_dir():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return root


def _digits_split(train: bool) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits, split 80/20 with a fixed, stratified seed."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images * (255.0 / 16.0)).astype(np.uint8)
    x_train, x_test, y_train, y_test = train_test_split(
        images, digits.target, test_size=0.2, stratify=digits.target, random_state=0
    )
    return (x_train, y_train) if train else (x_test, y_test)


class _ImageListDataset(Dataset):
    """A list of PIL images and integer labels, with an optional transform, like torchvision's."""

    classes: list[str]

    def __init__(self, images: list[Image.Image], targets: list[int], transform=None):
        self.images, self.targets, self.transform = images, targets, transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int):
        image = self.images[index]
        return (self.transform(image) if self.transform else image), self.targets[index]


class DigitsMNIST(_ImageListDataset):
    """MNIST's shape (28x28 grayscale, 10 classes) from scikit-learn's real handwritten digits."""

    classes = [
        f"{d} - {w}"
        for d, w in enumerate(
            "zero one two three four five six seven eight nine".split()
        )
    ]

    def __init__(self, train: bool = True, transform=None):
        images, labels = _digits_split(train)
        pil = [
            Image.fromarray(im).resize((28, 28), Image.Resampling.BILINEAR)
            for im in images
        ]
        super().__init__(pil, [int(t) for t in labels], transform)


class PhotoDigits(_ImageListDataset):
    """CIFAR-10's shape (32x32 RGB, 10 classes): real handwritten digits on real photographs.

    Each digit is drawn ``copies`` times, each time scaled, coloured and placed at random
    over a random crop of one of scikit-image's photographs. The 1,797 digits are split 80/20
    at random (stratified by class): scikit-learn's digits carry no writer ids, so the same
    person's writing may be on both sides. The backgrounds come from disjoint photo halves.
    """

    classes = [str(d) for d in range(10)]

    def __init__(
        self,
        train: bool = True,
        transform=None,
        copies: int | None = None,
        seed: int = 0,
    ):
        from skimage import data

        copies = copies if copies is not None else (4 if train else 2)
        rng = np.random.default_rng(seed + (0 if train else 1))
        photos = [np.asarray(getattr(data, n)())[..., :3] for n in _BACKGROUND_PHOTOS]
        halves = [
            p[: p.shape[0] // 2] if train else p[p.shape[0] // 2 :] for p in photos
        ]
        digits, labels = _digits_split(train)
        images, targets = [], []
        for digit, label in zip(digits, labels, strict=True):
            for _ in range(copies):
                images.append(
                    self._render(digit, halves[rng.integers(len(halves))], rng)
                )
                targets.append(int(label))
        super().__init__(images, targets, transform)

    @staticmethod
    def _render(
        digit: np.ndarray, photo: np.ndarray, rng: np.random.Generator
    ) -> Image.Image:
        y = int(rng.integers(0, photo.shape[0] - 32))
        x = int(rng.integers(0, photo.shape[1] - 32))
        canvas = photo[y : y + 32, x : x + 32].astype(np.float32) * 0.6
        size = int(rng.integers(18, 29))
        glyph = Image.fromarray(digit).resize((size, size), Image.Resampling.BILINEAR)
        alpha = np.asarray(glyph, dtype=np.float32)[..., None] / 255.0
        colour = rng.uniform(120, 255, size=3).astype(np.float32)
        top, left = (int(v) for v in rng.integers(0, 32 - size + 1, size=2))
        region = canvas[top : top + size, left : left + size]
        canvas[top : top + size, left : left + size] = (
            alpha * colour + (1 - alpha) * region
        )
        return Image.fromarray(canvas.clip(0, 255).astype(np.uint8))
