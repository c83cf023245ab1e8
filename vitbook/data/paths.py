"""Where things live: the project's root, the data folder, and where data come from.

The library never reads the book's environment: whoever runs it says here where datasets
land (:func:`set_data_dir`), which server mirrors the course's downloads
(:func:`set_mirror`) and where Debian's Fashion-MNIST package is installed
(:func:`set_debian_fashion_mnist`). The book passes its ``BOOK_DATA_DIR``, ``BOOK_MIRROR``
and ``BOOK_DEBIAN_FASHION_MNIST``; ``python -m vitbook.data.datasets`` its options.
Each setter returns what was set before, so that a caller can put it back.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "DEBIAN_FASHION_MNIST",
    "data_dir",
    "debian_fashion_mnist",
    "mirror",
    "project_root",
    "set_data_dir",
    "set_debian_fashion_mnist",
    "set_mirror",
]

# Debian/Ubuntu's package `dataset-fashion-mnist` installs the four official files here.
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")

_PACKAGE_PARENT = Path(__file__).resolve().parents[2]
_state: dict[str, Path | str | None] = {
    "data_dir": None,
    "mirror": None,
    "debian_fashion_mnist": None,
}


def _swap(key: str, value: Path | str | None) -> Path | str | None:
    previous, _state[key] = _state[key], value
    return previous


def project_root() -> Path | None:
    """The repository root when the package runs from a checkout, else None."""
    return _PACKAGE_PARENT if (_PACKAGE_PARENT / "_toc.yml").exists() else None


def set_data_dir(path: str | Path | None) -> Path | None:
    """Put datasets in ``path`` from now on (None or "": the default again)."""
    return _swap("data_dir", Path(path).expanduser() if path else None)


def data_dir() -> Path:
    """Where datasets land: the folder given to :func:`set_data_dir`, else the checkout's
    ``data/``, else ``./data``.

    Raises NotADirectoryError when the folder set is, or lies inside, a file.
    """
    path = _state["data_dir"]
    if path is not None:
        existing = next(p for p in (path, *path.parents) if p.exists())
        if not existing.is_dir():
            raise NotADirectoryError(
                f"The data folder {path}: {existing} is a file, not a folder. Choose a "
                "folder (it is made if missing; the book reads BOOK_DATA_DIR), or unset it "
                "to use the project's data/."
            )
        return path
    root = project_root()
    return (root if root is not None else Path.cwd()) / "data"


def set_mirror(url: str | None) -> str | None:
    """Download the course's files from ``url`` instead of its GitHub (None or "": GitHub)."""
    url = (url or "").strip().rstrip("/")
    return _swap("mirror", url or None)


def mirror() -> str | None:
    """The server set by :func:`set_mirror` (without a trailing ``/``), or None."""
    return _state["mirror"]


def set_debian_fashion_mnist(path: str | Path | None) -> Path | None:
    """Look for Debian's Fashion-MNIST files in ``path`` (None or "": the package's folder,
    :data:`DEBIAN_FASHION_MNIST`); tests point it at a missing folder."""
    return _swap("debian_fashion_mnist", Path(path) if path else None)


def debian_fashion_mnist() -> Path:
    """Where Debian's Fashion-MNIST package's files are looked for."""
    return _state["debian_fashion_mnist"] or DEBIAN_FASHION_MNIST
