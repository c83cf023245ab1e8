"""The quick/cpu/full setting and the offline switch."""

import pytest

from going_modular import settings


@pytest.mark.parametrize("name, expected", [("quick", 2), ("cpu", 5), ("full", 10)])
def test_pick_follows_book_setting(monkeypatch, name, expected):
    monkeypatch.setenv("BOOK_SETTING", name)
    assert settings.pick(quick=2, cpu=5, full=10) == expected


def test_cpu_takes_the_quick_value_when_none_is_given(monkeypatch):
    monkeypatch.setenv("BOOK_SETTING", "cpu")
    assert settings.pick(quick=2, full=10) == 2
    assert settings.pick(quick=None, full=10) is None


def test_default_is_cpu_without_gpu_and_full_with_one(monkeypatch):
    monkeypatch.delenv("BOOK_SETTING", raising=False)
    monkeypatch.setattr(settings.torch.cuda, "is_available", lambda: False)
    assert settings.setting() == "cpu" and not settings.is_quick()
    monkeypatch.setattr(settings.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(settings.torch.cuda, "get_device_name", lambda i: "Tesla T4")
    assert settings.setting() == "full"
    assert settings.hardware() == "cuda (Tesla T4)"


@pytest.mark.parametrize(
    "name, value, match",
    [
        ("BOOK_OFFLINE", "maybe", "BOOK_OFFLINE='maybe'.*1 or 0"),
        ("BOOK_SETTING", "fast", "quick"),
    ],
)
def test_bad_value_is_explained(monkeypatch, name, value, match):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=match):
        settings.is_offline() if name == "BOOK_OFFLINE" else settings.setting()


def test_describe_names_setting_network_and_hardware(monkeypatch):
    monkeypatch.setenv("BOOK_SETTING", "quick")
    text = settings.describe()
    assert text.startswith("Setting: QUICK")
    assert "offline" in text and "cpu (" in text and "cores" in text
