"""Shared fixtures: every test runs offline, with its own data folder."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def offline_and_isolated(monkeypatch, tmp_path):
    """BOOK_OFFLINE=1 and a fresh BOOK_DATA_DIR, unless a test changes them."""
    monkeypatch.setenv("BOOK_OFFLINE", "1")
    monkeypatch.setenv("BOOK_DATA_DIR", str(tmp_path / "data"))
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def texture_photos(tmp_path_factory):
    """The 3-class texture stand-in, made once per session."""
    from going_modular.standins import make_texture_photos

    return make_texture_photos(tmp_path_factory.mktemp("shared") / "texture_photos")
