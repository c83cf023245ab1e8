"""Dataset getters: the real data when online, an honest offline stand-in otherwise.

Every getter tries the real dataset unless ``BOOK_OFFLINE=1``. If that fails it prints why
and falls back to the stand-in (see :mod:`going_modular.standins`), saying so in one line,
unless called with ``fallback=False``, in which case the error is raised.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import Dataset

from . import standins
from .download import DownloadError, download_data
from .paths import data_dir
from .settings import is_offline

_COURSE_DATA = "https://github.com/mrdbourke/pytorch-deep-learning/raw/main/data"
FOOD_SOURCES: dict[str, tuple[str, str]] = {
    # subset -> (zip URL, folder name). Upstream publishes no checksum for these archives;
    # pass ``sha256=`` to get_food_data to pin one you trust.
    "10%": (f"{_COURSE_DATA}/pizza_steak_sushi.zip", "pizza_steak_sushi"),
    "20%": (
        f"{_COURSE_DATA}/pizza_steak_sushi_20_percent.zip",
        "pizza_steak_sushi_20_percent",
    ),
}


@dataclass(frozen=True)
class ImageFolderData:
    """Where an ImageFolder dataset lives, and whether it is the offline stand-in."""

    root: Path
    stand_in: bool

    @property
    def train_dir(self) -> Path:
        return self.root / "train"

    @property
    def test_dir(self) -> Path:
        return self.root / "test"


def _announce_stand_in(real: str, stand_in: str) -> None:
    print(f"[STAND-IN] {real} is not available offline: using {stand_in} instead.")


def _explain_failure(name: str, error: Exception) -> None:
    print(f"[INFO] Could not get {name}: {error}")


def get_food_data(
    subset: str = "10%",
    *,
    fallback: bool = True,
    sha256: str | None = None,
    root: str | Path | None = None,
) -> ImageFolderData:
    """Pizza, steak and sushi images (a ``"10%"`` or ``"20%"`` subset of Food-101).

    Offline, or when the download fails and ``fallback`` is True, returns the 3-class
    texture-photo stand-in (brick, grass, gravel) in the same ImageFolder layout.
    """
    if subset not in FOOD_SOURCES:
        raise ValueError(
            f"Unknown subset {subset!r}; choose one of {sorted(FOOD_SOURCES)}."
        )
    root = Path(root) if root is not None else data_dir()
    if not is_offline():
        url, folder = FOOD_SOURCES[subset]
        try:
            return ImageFolderData(
                download_data(url, folder, sha256=sha256, data_dir=root), False
            )
        except DownloadError as error:
            if not fallback:
                raise
            _explain_failure(f"pizza/steak/sushi {subset}", error)
    elif not fallback:
        raise DownloadError(
            f"BOOK_OFFLINE=1 and fallback=False: pizza/steak/sushi {subset} "
            "cannot be fetched. Unset BOOK_OFFLINE or allow the stand-in."
        )
    _announce_stand_in(
        "pizza/steak/sushi", "texture photos (brick, grass, gravel) from scikit-image"
    )
    return ImageFolderData(standins.make_texture_photos(root / "texture_photos"), True)


def _torchvision_or_stand_in(
    name: str, make_real, make_stand_in, stand_in_name: str, fallback: bool
) -> Dataset:
    if not is_offline():
        try:
            return make_real()
        except (
            RuntimeError,
            OSError,
        ) as error:  # torchvision raises these on failed downloads
            if not fallback:
                raise DownloadError(
                    f"Could not download {name} through torchvision: {error}. "
                    "Check your connection, or pass fallback=True to use the stand-in."
                ) from error
            _explain_failure(name, error)
    elif not fallback:
        raise DownloadError(
            f"BOOK_OFFLINE=1 and fallback=False: {name} cannot be fetched. "
            "Unset BOOK_OFFLINE or allow the stand-in."
        )
    _announce_stand_in(name, stand_in_name)
    return make_stand_in()


def get_cifar10(
    train: bool = True,
    transform=None,
    *,
    fallback: bool = True,
    root: str | Path | None = None,
) -> Dataset:
    """CIFAR-10 via torchvision; offline, the 32x32 RGB :class:`~standins.PhotoDigits`."""
    from torchvision.datasets import CIFAR10

    root = Path(root) if root is not None else data_dir()
    return _torchvision_or_stand_in(
        "CIFAR-10",
        lambda: CIFAR10(str(root), train=train, transform=transform, download=True),
        lambda: standins.PhotoDigits(train=train, transform=transform),
        "photo-digits (scikit-learn's handwritten digits on scikit-image photos, 32x32 RGB)",
        fallback,
    )


def get_mnist(
    train: bool = True,
    transform=None,
    *,
    fallback: bool = True,
    root: str | Path | None = None,
) -> Dataset:
    """MNIST via torchvision; offline, scikit-learn's digits as :class:`~standins.DigitsMNIST`."""
    from torchvision.datasets import MNIST

    root = Path(root) if root is not None else data_dir()
    return _torchvision_or_stand_in(
        "MNIST",
        lambda: MNIST(str(root), train=train, transform=transform, download=True),
        lambda: standins.DigitsMNIST(train=train, transform=transform),
        "scikit-learn's 8x8 handwritten digits, upscaled to 28x28",
        fallback,
    )


# --- Fashion-MNIST: the book's real offline dataset -------------------------------------------

FASHION_MNIST_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
# Mean and standard deviation of the 60,000 training images' pixels, scaled to [0, 1].
FASHION_MNIST_MEAN, FASHION_MNIST_STD = 0.2860, 0.3530
# Debian/Ubuntu's package `dataset-fashion-mnist` installs the four official files here.
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
# SHA-256 of the four files' *decompressed* contents, so a re-compressed copy verifies too.
FASHION_MNIST_SHA256 = {
    "train-images-idx3-ubyte": "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
    "train-labels-idx1-ubyte": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    "t10k-images-idx3-ubyte": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
    "t10k-labels-idx1-ubyte": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
}
INSTALL_FASHION_MNIST = "sudo apt-get install dataset-fashion-mnist"


def _sha256_bytes(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _read_maybe_gzipped(path: Path) -> bytes:
    import gzip

    return (
        gzip.decompress(path.read_bytes())
        if path.suffix == ".gz"
        else path.read_bytes()
    )


def _install_fashion_mnist_files(raw: Path, sources: list[Path]) -> str | None:
    """Copy verified Fashion-MNIST files into torchvision's ``raw`` folder; return the source.

    Each source folder may hold the files gzipped (``*-ubyte.gz``, as published) or not.
    Returns None when no source holds all four; raises ValueError when a file is corrupt.
    """
    import os
    import tempfile

    def verified(name: str) -> bool:
        path = raw / name
        return (
            path.exists()
            and _sha256_bytes(path.read_bytes()) == FASHION_MNIST_SHA256[name]
        )

    if all(verified(name) for name in FASHION_MNIST_SHA256):
        return str(raw)
    for source in sources:
        found = {
            n: next((p for p in (source / n, source / f"{n}.gz") if p.exists()), None)
            for n in FASHION_MNIST_SHA256
        }
        if not all(found.values()):
            continue
        raw.mkdir(parents=True, exist_ok=True)
        for name, path in found.items():
            data = _read_maybe_gzipped(path)
            if _sha256_bytes(data) != FASHION_MNIST_SHA256[name]:
                raise ValueError(
                    f"{path} is not the official Fashion-MNIST file (SHA-256 mismatch). Delete it "
                    f"and reinstall the data ({INSTALL_FASHION_MNIST}), or point BOOK_DATA_DIR elsewhere."
                )
            handle, temporary = tempfile.mkstemp(prefix=f".{name}-", dir=raw)
            with os.fdopen(handle, "wb") as file:
                file.write(data)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temporary, 0o666 & ~umask)
            os.replace(temporary, raw / name)
        return str(source)
    return None


def _fashion_transform(pad_to_32: bool, rgb: bool, transform):
    from torchvision import transforms

    steps = ([transforms.Pad(2)] if pad_to_32 else []) + (
        [transforms.Grayscale(3)] if rgb else []
    )
    if transform is not None:
        steps.append(transform)
    return transforms.Compose(steps) if steps else None


def get_fashion_mnist(
    train: bool = True,
    transform=None,
    *,
    pad_to_32: bool = False,
    rgb: bool = False,
    fallback: bool = True,
    root: str | Path | None = None,
) -> Dataset:
    """Fashion-MNIST (60,000 training / 10,000 test images, 28x28 grey, 10 classes).

    Looks for the four official files, verified by SHA-256, in ``root`` (default
    ``BOOK_DATA_DIR``), then in Debian's package (``apt-get install dataset-fashion-mnist``),
    then, when online, downloads them through torchvision. ``pad_to_32`` pads to 32x32 and
    ``rgb`` repeats the grey channel three times, so CIFAR-shaped models take the images
    unchanged; both run before ``transform``. Returns a torchvision ``FashionMNIST`` whose
    ``.data`` (uint8, N x 28 x 28) and ``.targets`` hold the unpadded images and labels.

    With no source, under ``CI=true`` or with ``fallback=False`` it raises; otherwise it falls
    back to the handwritten-digits stand-in, saying so in a ``[STAND-IN]`` line.
    """
    import os

    from torchvision.datasets import FashionMNIST

    root = Path(root) if root is not None else data_dir()
    composed = _fashion_transform(pad_to_32, rgb, transform)
    raw = root / "FashionMNIST" / "raw"
    candidates = [raw, root / "fashion-mnist", root, DEBIAN_FASHION_MNIST]
    if _install_fashion_mnist_files(raw, candidates) is not None:
        return FashionMNIST(str(root), train=train, transform=composed, download=False)
    if not is_offline():
        try:
            return FashionMNIST(
                str(root), train=train, transform=composed, download=True
            )
        except (RuntimeError, OSError) as error:
            if not fallback:
                raise DownloadError(
                    f"Could not download Fashion-MNIST: {error}. Install it offline with "
                    f"`{INSTALL_FASHION_MNIST}`, or check your connection."
                ) from error
            _explain_failure("Fashion-MNIST", error)
    if not fallback or os.environ.get("CI", "").lower() == "true":
        raise DownloadError(
            f"Fashion-MNIST is not on this machine (looked in {raw} and {DEBIAN_FASHION_MNIST})"
            f"{' and the network is off (BOOK_OFFLINE=1)' if is_offline() else ''}. Install it "
            f"with `{INSTALL_FASHION_MNIST}`, or put the four *-ubyte.gz files in {root / 'fashion-mnist'}."
        )
    _announce_stand_in(
        "Fashion-MNIST", "scikit-learn's 8x8 handwritten digits, upscaled to 28x28"
    )
    return standins.DigitsMNIST(train=train, transform=composed)


def fashion_mnist_tensors(
    train: bool = True,
    *,
    pad_to_32: bool = False,
    rgb: bool = False,
    normalize: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fashion-MNIST as two tensors in memory: images (N, C, H, W) float32 and labels (N,).

    Fast for small models on a CPU: no per-image decoding. ``normalize`` standardises with the
    training set's mean and standard deviation; pixels are otherwise in [0, 1].
    """
    dataset = get_fashion_mnist(train, fallback=True)
    if isinstance(dataset, standins.DigitsMNIST):
        import numpy as np

        images = torch.from_numpy(np.stack([np.asarray(im) for im in dataset.images]))
        labels = torch.tensor(dataset.targets)
    else:
        images, labels = dataset.data, dataset.targets
    x = images.float().div_(255).unsqueeze(1)
    if pad_to_32:
        x = torch.nn.functional.pad(x, (2, 2, 2, 2))
    if normalize:
        x = (x - FASHION_MNIST_MEAN) / FASHION_MNIST_STD
    if rgb:
        x = x.expand(-1, 3, -1, -1).contiguous()
    return x, labels.long()
