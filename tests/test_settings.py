"""The quick/full and offline switches."""

import pytest

from going_modular import settings


def test_pick_follows_book_quick(monkeypatch):
    monkeypatch.setenv("BOOK_QUICK", "1")
    assert settings.pick(quick=2, full=10) == 2
    monkeypatch.setenv("BOOK_QUICK", "0")
    assert settings.pick(quick=2, full=10) == 10


def test_default_is_quick_without_gpu(monkeypatch):
    monkeypatch.delenv("BOOK_QUICK", raising=False)
    monkeypatch.setattr(settings.torch.cuda, "is_available", lambda: False)
    assert settings.is_quick()
    monkeypatch.setattr(settings.torch.cuda, "is_available", lambda: True)
    assert not settings.is_quick()


def test_bad_value_is_explained(monkeypatch):
    monkeypatch.setenv("BOOK_OFFLINE", "maybe")
    with pytest.raises(ValueError, match="BOOK_OFFLINE='maybe'.*1 or 0"):
        settings.is_offline()


def test_describe(monkeypatch):
    monkeypatch.setenv("BOOK_QUICK", "1")
    assert settings.describe().startswith("Setting: QUICK")
    assert "offline" in settings.describe()
