"""Issue 30, the CLI's side: a refused ``--resume`` leaves its run folder byte for byte as
it was, signals do what a user means by them, and bad options are explained before any
work starts. Also: the CLI's own switches (``--dry-run``'s caps, ``--offline``,
``--data-root``) reach the library through the config, not the environment."""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vitbook import train
from vitbook.cli.config import DRY_RUN_STEPS
from vitbook.data import network, paths
from vitbook.training import runs
from vitbook.training.checkpoint import CHECKSUM_KEY, save_checkpoint
from vitbook.training.loop import RESULT_KEYS

TINY = ["--model", "tinyvgg", "--dataset", "mnist", "--batch-size", "32"]


def _own(data: Path, out: Path, *extra: str) -> list[str]:
    """Training on :func:`tiny_image_folder` (conftest; 2 steps per epoch) into ``out``."""
    return [
        "--data-dir", str(data), "--img-size", "8", "--batch-size", "4",
        "--epochs", "3", "--output-dir", str(out), *extra,
    ]  # fmt: skip


def _snapshot(out: Path) -> dict[str, str]:
    """Every file below ``out`` by its SHA-256, and where each symlink points."""
    files = {}
    for path in sorted(out.rglob("*")):
        name = str(path.relative_to(out))
        if path.is_symlink():
            files[name] = "-> " + os.readlink(path)
        elif path.is_file():
            files[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return files


def _refused(argv: list[str], capsys) -> str:
    """Run the CLI, expecting it to refuse with exit code 2; return stderr."""
    with pytest.raises(SystemExit) as info:
        train.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


@pytest.fixture
def interrupted_run(tiny_image_folder, tmp_path, signal_at_training_step, capsys):
    """A run of 3 planned epochs stopped by Ctrl-C in epoch 2 (epoch 1 saved)."""

    def make(out: Path, *extra: str) -> Path:
        signal_at_training_step(signal.SIGINT, step=3)
        with pytest.raises(SystemExit) as info:
            train.main(_own(tiny_image_folder, out, *extra))
        assert info.value.code == 130
        capsys.readouterr()
        run = (out / "latest").resolve()
        assert json.loads((run / "results.json").read_text())["status"] == (
            "interrupted"
        )
        return run

    return make


# --- A refused --resume writes nothing ----------------------------------------------------------


def test_resume_of_a_truncated_checkpoint_changes_nothing(
    interrupted_run, tmp_path, capsys
):
    out = tmp_path / "runs"
    run = interrupted_run(out)
    checkpoint = run / "checkpoint.pth"
    checkpoint.write_bytes(checkpoint.read_bytes()[:100])
    before = _snapshot(out)
    err = _refused(["--resume", str(run)], capsys)
    assert f"Cannot read the training checkpoint {checkpoint}" in err
    assert "was left as it is" in err and "start a new run" in err
    assert _snapshot(out) == before  # results.json still holds epoch 1, not "failed"


def test_resume_with_another_runs_checkpoint_changes_nothing(
    interrupted_run, tmp_path, capsys
):
    mine = interrupted_run(tmp_path / "mine")
    other = interrupted_run(tmp_path / "other", "--lr", "0.01")
    shutil.copy(other / "checkpoint.pth", mine / "checkpoint.pth")
    before = _snapshot(tmp_path / "mine")
    err = _refused(["--resume", str(mine)], capsys)
    assert (
        "checkpoint.pth does not belong to this run (lr=0.01 there but 0.001 here)"
        in (err)
    )
    assert "Nothing was changed" in err
    assert _snapshot(tmp_path / "mine") == before  # model.pth and train_loss untouched


def test_resume_of_a_checkpoint_beyond_the_planned_epochs_is_refused(
    interrupted_run, tmp_path, capsys
):
    out = tmp_path / "runs"
    run = interrupted_run(out)
    state = torch.load(run / "checkpoint.pth", weights_only=True)
    del state[CHECKSUM_KEY]
    save_checkpoint(
        run, 9, state | {"epoch": 9}
    )  # a valid checksum: only the epoch is odd
    before = _snapshot(out)
    err = _refused(["--resume", str(run)], capsys)
    assert "holds epoch 9, but the run plans 3 epoch(s)" in err
    assert _snapshot(out) == before


def _resaved(run: Path, change) -> None:
    """``run``'s checkpoint changed by ``change`` and saved again with a valid checksum."""
    state = torch.load(run / "checkpoint.pth", weights_only=True)
    del state[CHECKSUM_KEY]
    change(state)
    save_checkpoint(run, state["epoch"], state)


def _edited_option(run: Path, key: str, value) -> None:
    saved = json.loads((run / "results.json").read_text())
    (run / "results.json").write_text(
        json.dumps(saved | {"options": saved["options"] | {key: value}})
    )


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (
            lambda run: _resaved(
                run, lambda s: s["model"]["head.1.bias"].fill_(math.nan)
            ),
            "holds NaN or infinite values in 1 tensor(s) (first: model.head.1.bias)",
        ),
        (
            lambda run: _resaved(
                run, lambda s: s["optimizer"]["state"][0]["exp_avg"].fill_(math.inf)
            ),
            "(first: optimizer.state.0.exp_avg)",
        ),
        (
            lambda run: _resaved(run, lambda s: s["results"]["train_loss"].clear()),
            "holds epoch 1 but results of [0, 1] epoch(s)",
        ),
        (
            lambda run: _edited_option(run, "lr", "fast"),
            "holds the option lr='fast', which cannot be right",
        ),
        (
            lambda run: _edited_option(run, "batch_size", 0),
            "batch_size=0, which cannot be right (must be a positive integer, got 0)",
        ),
        (
            lambda run: _edited_option(run, "frobnicate", 3),
            "frobnicate=3, which cannot be right (this version has no such option)",
        ),
    ],
    ids=[
        "nan-weights",
        "inf-optimizer",
        "results-cut",
        "lr-text",
        "batch-0",
        "unknown",
    ],
)
def test_resume_of_an_edited_run_is_refused_plainly(
    damage, message, interrupted_run, tmp_path, capsys
):
    out = tmp_path / "runs"
    run = interrupted_run(out)
    damage(run)
    before = _snapshot(out)
    assert message in " ".join(_refused(["--resume", str(run)], capsys).split())
    assert _snapshot(out) == before  # still "interrupted", nothing rewritten


def test_resume_on_changed_data_is_refused(
    interrupted_run, tiny_image_folder, tmp_path, capsys
):
    out = tmp_path / "runs"
    run = interrupted_run(out)
    extra = tiny_image_folder / "train" / "a" / "extra.png"
    extra.write_bytes((tiny_image_folder / "train" / "a" / "0.png").read_bytes())
    before = _snapshot(out)
    err = _refused(["--resume", str(run)], capsys)
    assert "train_images=8 there but 9 here" in err
    assert _snapshot(out) == before
    extra.unlink()  # the data as it was: the run continues
    train.main(["--resume", str(run)])
    results = json.loads((run / "results.json").read_text())
    assert results["status"] == "complete" and len(results["train_loss"]) == 3
    assert results["class_names"] == ["a", "b"] and results["test_images"] == 4


def test_resume_on_images_moved_between_classes_is_refused(
    interrupted_run, tiny_image_folder, tmp_path, capsys
):
    """The same class names and counts, but one image under another label."""
    out = tmp_path / "runs"
    run = interrupted_run(out)
    train_dir = tiny_image_folder / "train"
    (train_dir / "a" / "0.png").rename(train_dir / "b" / "9.png")
    (train_dir / "b" / "0.png").rename(train_dir / "a" / "9.png")
    before = _snapshot(out)
    err = _refused(["--resume", str(run)], capsys)
    assert "the train image files were renamed, moved between classes" in err
    assert "test image files" not in err
    assert _snapshot(out) == before


# --- Signals ------------------------------------------------------------------------------------


def test_sighup_is_ignored_under_nohup(
    tiny_image_folder, tmp_path, signal_at_training_step, capsys
):
    signal_at_training_step(signal.SIGHUP, step=3)
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup starts it
    try:
        train.main(_own(tiny_image_folder, tmp_path / "runs"))
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)
    results = json.loads((tmp_path / "runs" / "latest" / "results.json").read_text())
    assert results["status"] == "complete" and len(results["train_loss"]) == 3


def test_signals_after_the_last_epoch_let_the_save_finish(
    tiny_image_folder, tmp_path, monkeypatch, capsys
):
    save = runs.Run.save

    def signalled_save(self, record, results):
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)
        save(self, record, results)

    monkeypatch.setattr(runs.Run, "save", signalled_save)
    train.main(_own(tiny_image_folder, tmp_path / "runs"))  # exits 0: no SystemExit
    out = capsys.readouterr()
    assert "SIGTERM came after the last epoch: the run is complete." in out.out
    assert "Traceback" not in out.err
    run = (tmp_path / "runs" / "latest").resolve()
    results = json.loads((run / "results.json").read_text())
    assert results["status"] == "complete" and runs.pair_matches(run)


def test_a_second_signal_does_not_cut_the_save_of_the_first(
    tiny_image_folder, tmp_path, monkeypatch, signal_at_training_step, capsys
):
    keep_stopped = runs.Run.keep_stopped

    def impatient(self, error):
        os.kill(os.getpid(), signal.SIGTERM)  # the user presses again, or kill follows
        return keep_stopped(self, error)

    monkeypatch.setattr(runs.Run, "keep_stopped", impatient)
    signal_at_training_step(signal.SIGINT, step=3)
    with pytest.raises(SystemExit) as info:
        train.main(_own(tiny_image_folder, tmp_path / "runs"))
    assert info.value.code == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith("Interrupted during epoch 2: saved epoch 1's checkpoint")
    )
    run = (tmp_path / "runs" / "latest").resolve()
    assert json.loads((run / "results.json").read_text())["status"] == "interrupted"
    assert runs.pair_matches(run)


_STORM = """
import os, signal, sys, threading, time
from vitbook import train
from vitbook.cli import parts

build, calls = parts.build_model, []

def storm():  # a signal every 2 ms for 1.5 s, from the third training step on
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.002)

def count(module, inputs):
    calls.append(1) if module.training else None
    if module.training and len(calls) == 3:
        threading.Thread(target=storm, daemon=True).start()
        time.sleep(0.05)

def build_model(*args, **kwargs):
    model = build(*args, **kwargs)
    model.register_forward_pre_hook(count)
    return model

parts.build_model = build_model
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.argv[1:] = {argv!r}
train.main()
"""


def test_a_signal_storm_ends_the_program_plainly(tiny_image_folder, tmp_path):
    """SIGINT every 2 ms: one line, exit 130, the run kept as interrupted; none of the
    later signals cuts the exit short or prints a traceback."""
    argv = _own(tiny_image_folder, tmp_path / "runs")
    env = os.environ | {"PYTHONPATH": str(Path(train.__file__).parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", _STORM.format(argv=argv)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("Interrupted during epoch 2")
    run = (tmp_path / "runs" / "latest").resolve()
    results = json.loads((run / "results.json").read_text())
    assert results["status"] == "interrupted" and results["epochs_completed"] == 1


# --- Clear messages before work starts -----------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-1e-3", "argument --lr/--learning-rate: must be positive, got -0.001"),
        ("-inf", "argument --lr/--learning-rate: must be a finite number, got -inf"),
    ],
)
def test_a_negative_learning_rate_says_why_not(value, message, tmp_path, capsys):
    err = _refused([*TINY, "--lr", value, "--output-dir", str(tmp_path / "o")], capsys)
    assert message in err and "expected one argument" not in err
    assert not (tmp_path / "o").exists()


def test_output_dir_links_that_go_nowhere_are_refused(tmp_path, capsys):
    dangling, loop = tmp_path / "dangling", tmp_path / "loop"
    dangling.symlink_to(tmp_path / "gone")
    loop.symlink_to(loop)
    err = _refused([*TINY, "--output-dir", str(dangling)], capsys)
    assert f"--output-dir {dangling} is a symbolic link to {tmp_path / 'gone'}" in err
    assert "which does not exist" in err
    err = _refused([*TINY, "--output-dir", str(loop)], capsys)
    assert f"--output-dir {loop} is a symbolic link that leads back to itself" in err
    assert not (tmp_path / "gone").exists() and not (tmp_path / "data").exists()


def test_an_empty_output_dir_is_refused_not_taken_as_the_current_folder(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    err = _refused([*TINY, "--output-dir", ""], capsys)
    assert "--output-dir: needs a folder's path, got an empty one" in err
    assert list(tmp_path.iterdir()) == []


def test_batch_norm_with_batches_of_one_is_refused_up_front(tmp_path, capsys):
    argv = ["--model", "vitbn", "--dataset", "mnist", "--batch-size", "1"]
    err = _refused([*argv, "--output-dir", str(tmp_path / "o")], capsys)
    assert "--model vitbn has BatchNorm layers" in err and "--batch-size 2" in err
    assert not (tmp_path / "o").exists() and not (tmp_path / "data").exists()


def test_a_users_own_lock_file_is_never_touched(tiny_image_folder, tmp_path, capsys):
    out = tmp_path / "runs"
    out.mkdir()
    (out / ".lock").write_text("my own lock file")
    train.main(_own(tiny_image_folder, out, "--epochs", "1"))
    assert (out / ".lock").read_text() == "my own lock file"
    assert not (out / runs.LOCK).exists()


# --- The CLI's switches reach the library through the config -------------------------------------


def test_the_dry_run_caps_the_clis_recipe(tmp_path, monkeypatch):
    seen = []

    def fit(model, train_data, test_data, recipe, **kwargs):
        seen.append(recipe)
        return {key: [1.0] for key in RESULT_KEYS}

    monkeypatch.setattr(train, "fit", fit)
    monkeypatch.setattr(runs.Run, "_plot", lambda self, results: None)
    monkeypatch.setenv("BOOK_DRY_RUN", "1")  # the book's switch: not the CLI's
    options = [*TINY, "--epochs", "1", "--output-dir", str(tmp_path / "o")]
    train.main([*options, "--dry-run"])
    train.main([*options, "--dry-run", "--max-steps", "1"])
    train.main(options)
    dry, dry_one, full = seen
    steps = DRY_RUN_STEPS
    assert (dry.max_steps_per_epoch, dry.max_eval_steps) == (steps, steps)
    assert (dry_one.max_steps_per_epoch, dry_one.max_eval_steps) == (1, steps)
    assert (full.max_steps_per_epoch, full.max_eval_steps) == (None, None)


def test_offline_and_the_data_root_reach_the_library_for_the_run(tmp_path, monkeypatch):
    seen = []

    def fit(*args, **kwargs):
        seen.append((network.is_offline(), paths.data_dir()))
        return {key: [1.0] for key in RESULT_KEYS}

    monkeypatch.setattr(train, "fit", fit)
    monkeypatch.setattr(runs.Run, "_plot", lambda self, results: None)
    network.set_offline(False)  # the caller's switches (conftest puts them back)
    root = tmp_path / "datasets"
    options = [*TINY, "--epochs", "1", "--output-dir", str(tmp_path / "o")]
    train.main([*options, "--offline", "--data-root", str(root)])
    assert seen == [(True, root)]
    assert (network.is_offline(), paths.data_dir()) == (False, tmp_path / "data")
