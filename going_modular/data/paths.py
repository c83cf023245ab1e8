"""Where things live: the project's root and its ``data/`` folder."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["data_dir", "project_root"]

_PACKAGE_PARENT = Path(__file__).resolve().parents[2]


def project_root() -> Path | None:
    """The repository root when the package runs from a checkout, else None."""
    return _PACKAGE_PARENT if (_PACKAGE_PARENT / "_toc.yml").exists() else None


def data_dir() -> Path:
    """Where datasets land: ``$BOOK_DATA_DIR``, else the checkout's ``data/``, else ``./data``.

    Raises NotADirectoryError when ``$BOOK_DATA_DIR`` is, or lies inside, a file.
    """
    if env := os.environ.get("BOOK_DATA_DIR"):
        path = Path(env).expanduser()
        existing = next(p for p in (path, *path.parents) if p.exists())
        if not existing.is_dir():
            raise NotADirectoryError(
                f"BOOK_DATA_DIR={env}: {existing} is a file, not a folder. Point "
                "BOOK_DATA_DIR to a folder (it is made if missing), or unset it to use "
                "the project's data/."
            )
        return path
    root = project_root()
    return (root if root is not None else Path.cwd()) / "data"
