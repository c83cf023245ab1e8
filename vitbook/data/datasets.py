"""Dataset getters: the real data when online, an honest offline stand-in otherwise.

Every getter tries the real dataset unless the library is offline
(:func:`~vitbook.data.network.set_offline`). If that fails it prints why and falls
back to the stand-in (see :mod:`vitbook.data.standins`), saying so in one line,
unless called with ``fallback=False``, in which case the error is raised; all of them
through :func:`~vitbook.data.standins.real_or_stand_in`. Fashion-MNIST, the book's
offline dataset, is the exception: :func:`prepare_fashion_mnist` gets it from local
files, Debian's package or a download, and without it the getters raise (the stand-in
only with ``fallback=True``); ``python -m vitbook.data.datasets --prepare
fashion-mnist`` gets it ready beforehand.

With fixtures on (:func:`~vitbook.data.network.set_fixtures`; the dry run of
``tests/test_dry_run.py``) the "online" data are small local test fixtures in the
libraries' own formats, and every getter says so in a ``[FIXTURE]`` line.
Where data land and come from (the data folder, a mirror of the course's downloads,
Debian's package folder) is set in :mod:`vitbook.data.paths`.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import Dataset
from torchvision.datasets import CIFAR10

from vitbook.data import network, standins
from vitbook.data.download import DownloadError, download_data
from vitbook.data.files import atomic_write, temporary_folder
from vitbook.data.network import (
    announce_fixture,
    is_offline,
    set_offline,
    uses_fixtures,
)
from vitbook.data.paths import (
    DEBIAN_FASHION_MNIST,
    data_dir,
    debian_fashion_mnist,
    mirror,
    set_data_dir,
    set_debian_fashion_mnist,
)

__all__ = [
    "DEBIAN_FASHION_MNIST",
    "DEBIAN_PACKAGE",
    "FASHION_MNIST_CLASSES",
    "FASHION_MNIST_MEAN",
    "FASHION_MNIST_SHA256",
    "FASHION_MNIST_STD",
    "FOOD_SOURCES",
    "INSTALL_FASHION_MNIST",
    "NETWORK_TIMEOUT_SECONDS",
    "PREPARE_FASHION_MNIST",
    "ImageFolderData",
    "course_data_url",
    "fashion_mnist_missing",
    "fashion_mnist_tensors",
    "get_cifar10",
    "get_fashion_mnist",
    "get_food_data",
    "get_mnist",
    "main",
    "prepare_fashion_mnist",
]

_COURSE_DATA = "https://github.com/mrdbourke/pytorch-deep-learning/raw/main/data"
FOOD_SOURCES: dict[str, tuple[str, str]] = {
    # subset -> (zip file under course_data_url(), folder name). Upstream publishes no
    # checksum for these archives; pass ``sha256=`` to get_food_data to pin one you trust.
    "10%": ("pizza_steak_sushi.zip", "pizza_steak_sushi"),
    "20%": ("pizza_steak_sushi_20_percent.zip", "pizza_steak_sushi_20_percent"),
}
_DIGITS = "scikit-learn's 8x8 handwritten digits, upscaled to 28x28"


def course_data_url() -> str:
    """Where the course's zips come from: the mirror set by
    :func:`~vitbook.data.paths.set_mirror`, else the course's GitHub."""
    return mirror() or _COURSE_DATA


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

    def download() -> ImageFolderData:
        file, folder = FOOD_SOURCES[subset]
        url = f"{course_data_url()}/{file}"
        path = download_data(url, folder, sha256=sha256, data_dir=root)
        if uses_fixtures():
            announce_fixture(f"pizza/steak/sushi {subset}", f"random photos from {url}")
        return ImageFolderData(path, False)

    return standins.real_or_stand_in(
        "pizza/steak/sushi",
        download,
        lambda: ImageFolderData(
            standins.make_texture_photos(root / "texture_photos"), True
        ),
        "texture photos (brick, grass, gravel) from scikit-image",
        fallback=fallback,
    )


def _announce_download(name: str, root: Path) -> None:
    """With fixtures on, say that ``name`` came from the test mirror (the dry run points
    torchvision's own download at it; ``tests/dry_run_fixtures.py``)."""
    if uses_fixtures():
        source = f"from {mirror()}" if mirror() is not None else f"in {root}"
        announce_fixture(name, f"class-coded images in torchvision's format, {source}")


def _real_cifar10(root: Path, train: bool, transform: Callable | None) -> CIFAR10:
    dataset = CIFAR10(str(root), train=train, transform=transform, download=True)
    _announce_download("CIFAR-10", root)
    return dataset


def get_cifar10(
    train: bool = True,
    transform: Callable | None = None,
    *,
    fallback: bool = True,
    root: str | Path | None = None,
) -> Dataset:
    """CIFAR-10 via torchvision; offline, the 32x32 RGB :class:`~standins.PhotoDigits`."""
    root = Path(root) if root is not None else data_dir()
    return standins.real_or_stand_in(
        "CIFAR-10",
        lambda: _real_cifar10(root, train, transform),
        lambda: standins.PhotoDigits(train=train, transform=transform),
        "photo-digits (scikit-learn's handwritten digits on scikit-image photos, 32x32 RGB)",
        fallback=fallback,
    )


def get_mnist(
    train: bool = True,
    transform: Callable | None = None,
    *,
    fallback: bool = True,
    root: str | Path | None = None,
) -> Dataset:
    """MNIST via torchvision; offline, scikit-learn's digits as :class:`~standins.DigitsMNIST`."""
    from torchvision.datasets import MNIST

    def real() -> MNIST:
        dataset = MNIST(str(root), train=train, transform=transform, download=True)
        _announce_download("MNIST", root)
        return dataset

    root = Path(root) if root is not None else data_dir()
    return standins.real_or_stand_in(
        "MNIST",
        real,
        lambda: standins.DigitsMNIST(train=train, transform=transform),
        _DIGITS,
        fallback=fallback,
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
DEBIAN_PACKAGE = "dataset-fashion-mnist"
# SHA-256 of the four files' *decompressed* contents, so a re-compressed copy verifies too.
FASHION_MNIST_SHA256 = {
    "train-images-idx3-ubyte": "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
    "train-labels-idx1-ubyte": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    "t10k-images-idx3-ubyte": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
    "t10k-labels-idx1-ubyte": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
}
INSTALL_FASHION_MNIST = f"sudo apt-get install {DEBIAN_PACKAGE}"
PREPARE_FASHION_MNIST = "python -m vitbook.data.datasets --prepare fashion-mnist"
# How long apt-get download or torchvision's download may wait on one connection.
NETWORK_TIMEOUT_SECONDS = 20


def fashion_mnist_missing(root: str | Path | None = None) -> str:
    """The one line that says what to run when Fashion-MNIST is neither found nor fetched."""
    root = Path(root) if root is not None else data_dir()
    return (
        f"Fashion-MNIST is missing: run `{INSTALL_FASHION_MNIST}`, or put its four "
        f"*-ubyte.gz files in {root / 'fashion-mnist'}, or run `{PREPARE_FASHION_MNIST}` "
        "with network access."
    )


def _sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_maybe_gzipped(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if path.suffix == ".gz" else data


def _install_fashion_mnist_files(raw: Path, sources: list[Path]) -> str | None:
    """Copy verified Fashion-MNIST files into torchvision's ``raw`` folder; return the source.

    Each source folder may hold the files gzipped (``*-ubyte.gz``, as published) or not.
    Returns None when no source holds all four; raises ValueError when a file is corrupt.
    """

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
                    f"and reinstall the data ({INSTALL_FASHION_MNIST}), or choose another data folder."
                )
            atomic_write(raw / name, lambda f, data=data: f.write(data))
        return str(source)
    return None


def _fetch_debian_package(root: Path, raw: Path) -> str | None:
    """Debian's package without root: ``apt-get download`` it and ``dpkg-deb -x`` it into a
    temporary folder in ``root``, then install its verified files into ``raw``."""
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        return None
    apt_options = ["-o", "Acquire::Retries=0"]
    apt_options += ["-o", f"Acquire::http::Timeout={NETWORK_TIMEOUT_SECONDS}"]
    with temporary_folder(root, "apt-download") as tmp:
        try:
            subprocess.run(
                ["apt-get", "download", "-qq", *apt_options, DEBIAN_PACKAGE],
                cwd=tmp,
                check=True,
                capture_output=True,
                timeout=3 * NETWORK_TIMEOUT_SECONDS,
            )
            (package,) = tmp.glob("*.deb")
            unpacked = tmp / "unpacked"
            subprocess.run(
                ["dpkg-deb", "-x", str(package), str(unpacked)],
                check=True,
                capture_output=True,
            )
        except (subprocess.SubprocessError, OSError, ValueError):
            return None
        files = unpacked / DEBIAN_FASHION_MNIST.relative_to("/")
        if _install_fashion_mnist_files(raw, [files]) is None:
            return None
    return f"Debian's package {DEBIAN_PACKAGE} (apt-get download)"


def _fetch_with_torchvision(root: Path, raw: Path) -> str | None:
    """torchvision's download of the four files, then the same SHA-256 check."""
    from torchvision.datasets import FashionMNIST

    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(NETWORK_TIMEOUT_SECONDS)
    try:
        FashionMNIST(str(root), train=True, download=True)
    except (RuntimeError, OSError):
        return None
    finally:
        socket.setdefaulttimeout(previous)
    if _install_fashion_mnist_files(raw, []) is None:
        raise ValueError(
            f"torchvision downloaded Fashion-MNIST files into {raw} that fail the SHA-256 "
            "check: delete that folder and try again."
        )
    return "torchvision's download"


def prepare_fashion_mnist(root: str | Path | None = None) -> str:
    """Put the four verified Fashion-MNIST files in ``root/FashionMNIST/raw``; say where from.

    Tries, in order: files already there, ``root/fashion-mnist`` or ``root`` (``root``
    defaults to :func:`~vitbook.data.paths.data_dir`), Debian's installed package, and unless
    offline (:func:`~vitbook.data.network.is_offline`): Debian's package downloaded without root (``apt-get download``),
    then torchvision's download. Every source passes the SHA-256 check. Raises a
    :class:`DownloadError` with :func:`fashion_mnist_missing`'s line when none works.
    """
    root = Path(root) if root is not None else data_dir()
    raw = root / "FashionMNIST" / "raw"
    local = [raw, root / "fashion-mnist", root, debian_fashion_mnist()]
    source = _install_fashion_mnist_files(raw, local)
    if source is None and not is_offline():
        source = _fetch_debian_package(root, raw) or _fetch_with_torchvision(root, raw)
        if source is not None:
            print(f"[INFO] Fashion-MNIST: got it from {source}, into {raw}")
    if source is None:
        raise DownloadError(fashion_mnist_missing(root))
    return source


def _fashion_transform(
    pad_to_32: bool, rgb: bool, transform: Callable | None
) -> Callable | None:
    from torchvision import transforms

    steps = ([transforms.Pad(2)] if pad_to_32 else []) + (
        [transforms.Grayscale(3)] if rgb else []
    )
    if transform is not None:
        steps.append(transform)
    return transforms.Compose(steps) if steps else None


def get_fashion_mnist(
    train: bool = True,
    transform: Callable | None = None,
    *,
    pad_to_32: bool = False,
    rgb: bool = False,
    fallback: bool = False,
    root: str | Path | None = None,
) -> Dataset:
    """Fashion-MNIST (60,000 training / 10,000 test images, 28x28 grey, 10 classes).

    Gets the four official files as :func:`prepare_fashion_mnist` does. ``pad_to_32`` pads
    to 32x32 and ``rgb`` repeats the grey channel three times, so CIFAR-shaped models take
    the images unchanged; both run before ``transform``. Returns a torchvision
    ``FashionMNIST`` whose ``.data`` (uint8, N x 28 x 28) and ``.targets`` hold the
    unpadded images and labels.

    With no source it raises a :class:`DownloadError` whose message says what to run.
    Only with ``fallback=True`` (for callers sized for 1,797 images, like the CLI), and
    not under ``CI=true``, it returns the handwritten-digits stand-in instead, saying so.
    """
    from torchvision.datasets import FashionMNIST

    root = Path(root) if root is not None else data_dir()
    composed = _fashion_transform(pad_to_32, rgb, transform)

    def local_or_download() -> Dataset:
        prepare_fashion_mnist(root)
        return FashionMNIST(str(root), train=train, transform=composed, download=False)

    return standins.real_or_stand_in(
        "Fashion-MNIST",
        local_or_download,
        lambda: standins.DigitsMNIST(train=train, transform=composed),
        _DIGITS,
        fallback=fallback and network.stand_ins_allowed(),
        try_offline=True,
    )


def fashion_mnist_tensors(
    train: bool = True,
    *,
    pad_to_32: bool = False,
    rgb: bool = False,
    normalize: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fashion-MNIST as two tensors in memory: images (N, C, H, W) float32 and labels (N,).

    Fast for small models on a CPU: no per-image decoding. ``normalize`` standardises with
    the training set's mean and standard deviation; pixels are otherwise in [0, 1]. Raises
    a :class:`DownloadError` saying what to run when Fashion-MNIST cannot be had (never a
    smaller stand-in: callers index all 60,000 images).
    """
    dataset = get_fashion_mnist(train)
    x = dataset.data.float().div_(255).unsqueeze(1)
    if pad_to_32:
        x = torch.nn.functional.pad(x, (2, 2, 2, 2))
    if normalize:
        x = (x - FASHION_MNIST_MEAN) / FASHION_MNIST_STD
    if rgb:
        x = x.expand(-1, 3, -1, -1).contiguous()
    return x, dataset.targets.long()


def main(argv: list[str] | None = None) -> int:
    """``python -m vitbook.data.datasets --prepare fashion-mnist``: get the data ready
    (``make data`` runs it first); exit 1 with one line saying what to run if it cannot."""
    parser = argparse.ArgumentParser(
        prog="python -m vitbook.data.datasets",
        description="Get a dataset ready before any chapter or test needs it.",
    )
    parser.add_argument("--prepare", choices=["fashion-mnist"], required=True)
    parser.add_argument(
        "--offline", action="store_true", help="use local files only, never the network"
    )
    parser.add_argument("--data-dir", help="where datasets land (default: data/)")
    parser.add_argument(
        "--debian-dir", help=f"Debian's package files (default: {DEBIAN_FASHION_MNIST})"
    )
    given = parser.parse_args(argv)
    if given.offline:
        set_offline(True)
    if given.data_dir:
        set_data_dir(given.data_dir)
    if given.debian_dir:
        set_debian_fashion_mnist(given.debian_dir)
    try:
        source = prepare_fashion_mnist()
    except DownloadError as error:
        print(error, file=sys.stderr)
        return 1
    print(f"Fashion-MNIST is ready ({source}).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
