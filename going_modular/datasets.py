"""Dataset getters: the real data when online, an honest offline stand-in otherwise.

Every getter tries the real dataset unless ``BOOK_OFFLINE=1``. If that fails it prints why
and falls back to the stand-in (see :mod:`going_modular.standins`), saying so in one line,
unless called with ``fallback=False``, in which case the error is raised.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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
    "20%": (f"{_COURSE_DATA}/pizza_steak_sushi_20_percent.zip", "pizza_steak_sushi_20_percent"),
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
        raise ValueError(f"Unknown subset {subset!r}; choose one of {sorted(FOOD_SOURCES)}.")
    root = Path(root) if root is not None else data_dir()
    if not is_offline():
        url, folder = FOOD_SOURCES[subset]
        try:
            return ImageFolderData(download_data(url, folder, sha256=sha256, data_dir=root), False)
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
        except (RuntimeError, OSError) as error:  # torchvision raises these on failed downloads
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
    train: bool = True, transform=None, *, fallback: bool = True, root: str | Path | None = None
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
    train: bool = True, transform=None, *, fallback: bool = True, root: str | Path | None = None
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
