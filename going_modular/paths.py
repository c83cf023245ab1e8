"""Where things live: the project's root and its ``data/`` folder."""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE_PARENT = Path(__file__).resolve().parents[1]


def project_root() -> Path | None:
    """The repository root when the package runs from a checkout, else None."""
    return _PACKAGE_PARENT if (_PACKAGE_PARENT / "_toc.yml").exists() else None


def data_dir() -> Path:
    """Where datasets land: ``$BOOK_DATA_DIR``, else the checkout's ``data/``, else ``./data``."""
    if env := os.environ.get("BOOK_DATA_DIR"):
        return Path(env)
    root = project_root()
    return (root if root is not None else Path.cwd()) / "data"
