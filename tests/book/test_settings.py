"""The quick/cpu/gpu/full setting, the offline and dry-run switches, and the GPU plan."""

import os
import subprocess
import sys

import pytest

from vitbook.book import settings
from vitbook.data import datasets, network, paths
from vitbook.training import tracking


@pytest.fixture(autouse=True)
def no_dry_run(monkeypatch):
    for name in ("BOOK_DRY_RUN", "BOOK_FIXTURES", "BOOK_CHECKPOINT_DIR"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    "name, expected", [("quick", 2), ("cpu", 5), ("gpu", 7), ("full", 10)]
)
def test_pick_follows_book_setting(monkeypatch, name, expected):
    monkeypatch.setenv("BOOK_SETTING", name)
    assert settings.pick(quick=2, cpu=5, gpu=7, full=10) == expected


def test_missing_values_fall_back_gpu_to_cpu_to_quick(monkeypatch):
    monkeypatch.setenv("BOOK_SETTING", "cpu")
    assert settings.pick(quick=2, full=10) == 2
    assert settings.pick(quick=None, full=10) is None
    assert settings.pick(quick=2, gpu=7, full=10) == 2
    monkeypatch.setenv("BOOK_SETTING", "gpu")
    assert settings.pick(quick=2, cpu=5, full=10) == 5
    assert settings.pick(quick=2, full=10) == 2
    assert settings.pick(quick=2, cpu=None, full=10) is None
    monkeypatch.setenv("BOOK_SETTING", "full")
    assert settings.pick(quick=2, cpu=5, gpu=7, full=None) is None


def test_default_is_cpu_without_gpu_and_gpu_with_one(monkeypatch):
    monkeypatch.delenv("BOOK_SETTING", raising=False)
    monkeypatch.setattr(settings.torch.cuda, "is_available", lambda: False)
    assert settings.setting() == "cpu" and not settings.is_quick()
    monkeypatch.setattr(settings.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(settings.torch.cuda, "get_device_name", lambda i: "Tesla T4")
    assert settings.setting() == "gpu"
    assert settings.hardware() == "cuda (Tesla T4)"
    monkeypatch.setenv("BOOK_SETTING", "full")  # full is opt-in only
    assert settings.setting() == "full"


def test_a_dry_run_is_the_gpu_setting_with_capped_loops(monkeypatch):
    monkeypatch.delenv("BOOK_SETTING", raising=False)
    monkeypatch.setattr(settings.torch.cuda, "is_available", lambda: False)
    assert not settings.is_dry_run() and settings.dry_run_steps() is None
    assert settings.cap(500) == 500 and settings.cap(None) is None
    assert settings.cap((0, 1, 2)) == (0, 1, 2)
    monkeypatch.setenv("BOOK_DRY_RUN", "1")
    assert settings.is_dry_run() and settings.setting() == "gpu"
    steps = settings.dry_run_steps()
    assert steps == settings.DRY_RUN_STEPS and 1 <= steps <= 5
    assert settings.cap(500) == steps and settings.cap(None) == steps
    assert settings.cap(1) == 1 and settings.cap(500, at=20) == 20
    assert settings.cap((0, 1, 2)) == (0, 1) and settings.cap([0, 1, 2], at=1) == [0]
    monkeypatch.setenv("BOOK_SETTING", "quick")  # an explicit setting still wins
    assert settings.setting() == "quick"


@pytest.mark.parametrize(
    "name, value, match",
    [
        ("BOOK_OFFLINE", "maybe", "BOOK_OFFLINE='maybe'.*1 or 0"),
        ("BOOK_DRY_RUN", "sure", "BOOK_DRY_RUN='sure'.*1 or 0"),
        ("BOOK_SETTING", "fast", "quick"),
    ],
)
def test_bad_value_is_explained(monkeypatch, name, value, match):
    monkeypatch.setenv(name, value)
    read = {
        "BOOK_OFFLINE": settings.is_offline,
        "BOOK_DRY_RUN": settings.is_dry_run,
        "BOOK_SETTING": settings.setting,
    }[name]
    with pytest.raises(ValueError, match=match):
        read()


# Imports every module of vitbook, then asks for each switch (a fresh process: the
# settings are applied when vitbook.book.settings is first imported).
IMPORT_ALL_THEN_ASK = """
import importlib, pkgutil
import vitbook
from vitbook.data import network, paths

for module in pkgutil.walk_packages(vitbook.__path__, "vitbook."):
    importlib.import_module(module.name)
from vitbook.book import settings

print(network.is_offline(), paths.data_dir())
for ask in (settings.is_offline, settings.is_dry_run, settings.uses_fixtures,
            settings.setting, settings.describe_setting):
    try:
        ask()
    except ValueError as error:
        print(error)
"""


def test_importing_vitbook_never_fails_on_a_switch_not_understood(tmp_path):
    """Issue 53: no import raises for a BOOK_* value; each switch says what is wrong
    when first asked for, the library offline meanwhile and given the other variables."""
    env = os.environ | {
        "BOOK_OFFLINE": "maybe",
        "BOOK_DRY_RUN": "sure",
        "BOOK_FIXTURES": "perhaps",
        "BOOK_SETTING": "bogus",
        "BOOK_DATA_DIR": str(tmp_path / "data"),
    }
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL_THEN_ASK],
        capture_output=True,
        text=True,
        env=env,
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    offline = "BOOK_OFFLINE='maybe' is not understood; set it to 1 or 0."
    choices = settings.SETTINGS
    assert done.stdout.splitlines() == [
        f"True {tmp_path / 'data'}",
        offline,
        "BOOK_DRY_RUN='sure' is not understood; set it to 1 or 0.",
        "BOOK_FIXTURES='perhaps' is not understood; set it to 1 or 0.",
        f"BOOK_SETTING='bogus' is not understood; set it to one of {choices}.",
        offline,  # the chapter's first line says it
    ]


def test_the_chapters_pass_the_books_switches_to_the_cli(monkeypatch, tmp_path):
    """The command line reads no BOOK_* variable: a chapter passes them as options."""
    data = ["--data-root", str(tmp_path / "data")]  # the library's (conftest)
    monkeypatch.setenv("BOOK_OFFLINE", "0")
    assert settings.cli_options() == data
    monkeypatch.setenv("BOOK_OFFLINE", "1")
    monkeypatch.setenv("BOOK_DRY_RUN", "1")
    assert settings.cli_options() == ["--offline", "--dry-run", *data]


@pytest.mark.parametrize("name", settings.SETTINGS)
def test_describe_setting_is_at_most_three_short_lines(monkeypatch, name):
    monkeypatch.setenv("BOOK_SETTING", name)
    monkeypatch.setattr(
        settings, "hardware", lambda: "cpu (" + "a very long CPU model name " * 5 + ")"
    )
    for dry_run in ("0", "1"):
        monkeypatch.setenv("BOOK_DRY_RUN", dry_run)
        monkeypatch.setenv("BOOK_FIXTURES", dry_run)
        lines = settings.describe_setting().splitlines()
        assert 2 <= len(lines) <= 3 and all(len(line) <= 80 for line in lines)
        assert lines[0].startswith(f"Setting: {name.upper()}")
        assert ("FIXTURES" in lines[-1]) == (dry_run == "1")


def test_describe_setting_names_setting_network_and_hardware(monkeypatch):
    monkeypatch.setenv("BOOK_SETTING", "quick")
    text = settings.describe_setting()
    assert text.startswith("Setting: QUICK")
    assert "offline" in text and "cpu (" in text and "cores" in text


def test_checkpoints_only_in_the_gpu_and_full_settings(monkeypatch, tmp_path):
    for name in ("quick", "cpu"):
        monkeypatch.setenv("BOOK_SETTING", name)
        assert settings.checkpoint_root("ch10") is None
        assert settings.run_dir(settings.checkpoint_root("ch10"), "clock") is None
    monkeypatch.setenv("BOOK_SETTING", "gpu")
    assert str(settings.checkpoint_root("ch10")) == "runs/ch10/gpu"
    monkeypatch.setenv("BOOK_CHECKPOINT_DIR", str(tmp_path))
    root = settings.checkpoint_root("ch10")
    assert root == tmp_path / "ch10" / "gpu"
    assert settings.run_dir(root, "clock") == root / "clock"
    monkeypatch.setenv("BOOK_SETTING", "full")  # never resumes the gpu setting's runs
    assert settings.checkpoint_root("ch10") == tmp_path / "ch10" / "full"


def test_gpu_plan_states_its_assumptions_and_the_arithmetic():
    work = [
        settings.Work("training", 600_000, 1e9, batch=100),
        settings.Work("testing", 100_000, 1e9, batch=1000, training=False),
    ]
    text = settings.gpu_plan(*work, note="data: CIFAR-10")
    # 2 FLOP per MAC; training 3x forward: 2 * (3 * 6e14 + 1e14) = 3.8e15 FLOP; plus
    # 6,000 training steps and 100 test batches of launch overhead.
    assert "600,000 images x 1 GMAC x 3 (train)" in text
    assert "100,000 images x 1 GMAC (test)" in text
    assert "3.8 PFLOP" in text and "65 TFLOP/s" in text and "25%" in text
    overhead = 6_000 * 5e-3 + 100 * 1.5e-3
    minutes = (3.8e15 / (0.25 * settings.T4_FP16_PEAK) + overhead) / 60  # 4.4 min
    assert (
        f"~{minutes:.2g} min" in text and f"{overhead / 60:.2g} min of launch" in text
    )
    assert text.splitlines()[-1].strip() == "data: CIFAR-10"
    fp32 = settings.gpu_plan(*work, amp=False)
    assert "8.1 TFLOP/s" in fp32 and "50%" in fp32
    assert (
        f"~{(3.8e15 / (0.5 * settings.T4_FP32_PEAK) + overhead) / 60:.2g} min" in fp32
    )
    nothing = settings.gpu_plan()
    assert "no training" in nothing and "FLOP" not in nothing
    lines = (text + "\n" + fp32 + "\n" + nothing).splitlines()
    assert all(len(line) <= 80 for line in lines)


def test_fixtures_are_announced_loudly(monkeypatch, capsys):
    """The library announces a fixture; the book switches fixtures on in the library from
    BOOK_FIXTURES (the autouse fixture of conftest restores the library's switches)."""
    network.announce_fixture("CIFAR-10", "random images")
    assert capsys.readouterr().out.startswith("[FIXTURE] CIFAR-10: random images")
    assert not settings.uses_fixtures()
    settings.apply_to_library()
    assert not network.uses_fixtures()
    monkeypatch.setenv("BOOK_FIXTURES", "1")
    assert settings.uses_fixtures() and not network.uses_fixtures()  # not yet passed
    settings.apply_to_library()
    assert network.uses_fixtures()


@pytest.fixture
def tracking_uri():
    """The library's MLflow store, put back after the test."""
    previous = tracking.set_tracking_uri(None)
    yield
    tracking.set_tracking_uri(previous)


def test_the_book_passes_its_places_to_the_library(monkeypatch, tmp_path, tracking_uri):
    """The library reads no BOOK_* variable: apply_to_library passes each one, and passes
    their absence (the library's defaults) too."""
    places = {
        "BOOK_DATA_DIR": str(tmp_path / "data"),
        "BOOK_MIRROR": "http://127.0.0.1:8000/",
        "BOOK_DEBIAN_FASHION_MNIST": str(tmp_path / "debian"),
        "BOOK_MLFLOW_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
    }
    for name, value in places.items():
        monkeypatch.setenv(name, value)
    settings.apply_to_library()
    assert paths.data_dir() == tmp_path / "data"
    assert datasets.course_data_url() == "http://127.0.0.1:8000"
    assert paths.debian_fashion_mnist() == tmp_path / "debian"
    assert tracking.tracking_uri() == places["BOOK_MLFLOW_URI"]
    for name in places:
        monkeypatch.delenv(name)
    settings.apply_to_library()
    assert paths.data_dir() == paths.project_root() / "data"
    assert datasets.course_data_url().startswith("https://github.com/")
    assert paths.debian_fashion_mnist() == paths.DEBIAN_FASHION_MNIST
    assert tracking.tracking_uri() == f"sqlite:///{tracking.default_store()}"


def test_under_ci_a_missing_dataset_is_an_error_not_a_stand_in(monkeypatch):
    """CI must test real data: the book's settings, not the library, read ``CI``."""
    monkeypatch.setenv("CI", "true")
    settings.apply_to_library()
    assert not network.stand_ins_allowed()
    monkeypatch.delenv("CI")
    settings.apply_to_library()
    assert network.stand_ins_allowed()


def test_run_report_times_the_chapter_from_its_first_describe_setting(monkeypatch):
    monkeypatch.setenv("BOOK_SETTING", "cpu")
    monkeypatch.setattr(settings, "_START", {})
    with pytest.raises(RuntimeError, match="describe"):
        settings.run_report()
    clock = iter([100.0, 400.0])
    monkeypatch.setattr(settings.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(settings, "_load", lambda: (0.25, 1.5, 1.75))
    settings.describe_setting()
    settings.describe_setting()  # a second call does not restart the clock
    first, second = settings.run_report().splitlines()
    assert first.startswith("This chapter ran in 5.0 min (cpu setting, ")
    assert second == (
        "Load average: 0.25 at the start; 0.25, 1.50, 1.75 over the last 1, 5, 15 min "
        "at the end."
    )
    assert all(len(line) <= 88 for line in (first, second))


def test_a_false_claim_stops_every_setting_but_quick(monkeypatch, capsys):
    monkeypatch.setenv("BOOK_SETTING", "cpu")
    settings.claim("two is more than one", 2 > 1)
    assert capsys.readouterr().out == "Checked: two is more than one\n"
    for name in ("cpu", "gpu", "full"):
        monkeypatch.setenv("BOOK_SETTING", name)
        with pytest.raises(settings.ClaimError, match="'one is more than two'"):
            settings.claim("one is more than two", 1 > 2)
    monkeypatch.setenv("BOOK_SETTING", "quick")
    settings.claim("one is more than two", 1 > 2)
    monkeypatch.setenv("BOOK_SETTING", "gpu")
    monkeypatch.setenv("BOOK_DRY_RUN", "1")
    settings.claim("one is more than two", 1 > 2)
    out = capsys.readouterr().out
    assert out.count("Not shown in this short run (quick setting or dry run): one") == 2
