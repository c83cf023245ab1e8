"""The book's two switches, read once from the environment.

* ``BOOK_QUICK``: ``1`` runs every chapter in its quick setting (a small model, a few
  steps: minutes on a laptop CPU); ``0`` runs the full setting the papers use, for a GPU.
  Unset, the book picks quick when no CUDA GPU is present.
* ``BOOK_OFFLINE``: ``1`` means never touch the network; every dataset getter uses its
  offline stand-in at once. CI sets it.
"""

from __future__ import annotations

import os

import torch

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _flag(name: str, default: bool) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    if value:
        raise ValueError(f"{name}={value!r} is not understood; set it to 1 or 0.")
    return default


def is_quick() -> bool:
    """True when chapters should run their quick (CPU-sized) setting."""
    return _flag("BOOK_QUICK", default=not torch.cuda.is_available())


def is_offline() -> bool:
    """True when the network must not be touched (``BOOK_OFFLINE=1``)."""
    return _flag("BOOK_OFFLINE", default=False)


def pick(quick, full):
    """Return ``quick`` in the quick setting and ``full`` otherwise.

    Chapters size their runs with it, e.g. ``EPOCHS = pick(quick=2, full=10)``.
    """
    return quick if is_quick() else full


def describe() -> str:
    """One line saying which setting is in force, for a chapter's first output."""
    setting = "QUICK (small model, few steps)" if is_quick() else "FULL (the papers' settings)"
    net = "offline (stand-in data)" if is_offline() else "online"
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return f"Setting: {setting} | network: {net} | device: {device}"
