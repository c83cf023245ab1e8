"""Issue 53, "Nothing lost": a stop never erases finished epochs, the lock never
follows a link, a checkpoint is its own run's, every image is decoded (and a huge one
refused) before a run folder is made, names that are not UTF-8 are trained on, and a
read-only run folder is refused before any work."""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import signal
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from test_cli_safety import _own, _refused, _snapshot, interrupted_run  # noqa: F401

from vitbook import train
from vitbook.cli import parts
from vitbook.training import runs

# --- 1. A stop after the checkpoint was damaged keeps the last good results -----------


def _damaged_at_training_step(monkeypatch, checkpoint: Path, step: int) -> None:
    """The CLI's model cuts ``checkpoint`` short at its ``step``-th training forward
    pass (as a careless ``cp`` or bit rot would), before any signal armed after this."""
    build, calls = parts.build_model, []

    def damage(module, inputs):
        if module.training:
            calls.append(1)
            if len(calls) == step:
                checkpoint.write_bytes(checkpoint.read_bytes()[:100])

    def build_model(*args, **kwargs):
        model = build(*args, **kwargs)
        model.register_forward_pre_hook(damage)
        return model

    monkeypatch.setattr(parts, "build_model", build_model)


def test_a_stop_never_erases_finished_epochs_for_a_damaged_checkpoint(
    interrupted_run,  # noqa: F811
    tmp_path,
    monkeypatch,
    signal_at_training_step,
    capsys,
):
    run = interrupted_run(tmp_path / "runs")  # epoch 1 in model.pth and results.json
    checkpoint = run / "checkpoint.pth"
    # resumed: epoch 2 trains and is checkpointed; in epoch 3 the checkpoint is damaged
    _damaged_at_training_step(monkeypatch, checkpoint, step=3)
    signal_at_training_step(signal.SIGTERM, step=3)
    with pytest.raises(SystemExit) as info:
        train.main(["--resume", str(run)])
    assert info.value.code == 143
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert f"{checkpoint} is damaged" in last and "--resume" not in last
    results = json.loads((run / "results.json").read_text())
    assert results["status"] == "interrupted" and results["epochs_completed"] == 1
    assert len(results["train_loss"]) == len(results["test_acc"]) == 1
    assert runs.pair_matches(run)  # model.pth and its results still belong together


# --- 2. The lock file never follows a symbolic link -----------------------------------


def test_a_lock_file_that_is_a_symbolic_link_is_refused_and_its_target_untouched(
    tiny_image_folder, tmp_path, capsys
):
    out, precious = tmp_path / "runs", tmp_path / "precious.txt"
    out.mkdir()
    precious.write_text("a file the lock must never truncate")
    (out / runs.LOCK).symlink_to(precious)
    err = _refused(_own(tiny_image_folder, out, "--epochs", "1"), capsys)
    assert f"{out / runs.LOCK} is a symbolic link" in err
    assert len(err.strip().splitlines()[-1]) < 400  # one line, no traceback
    assert precious.read_text() == "a file the lock must never truncate"
    assert (out / runs.LOCK).is_symlink() and os.listdir(out) == [runs.LOCK]


# --- 3. Another run's checkpoint is refused, naming what differs ----------------------


def test_resume_with_a_sibling_runs_checkpoint_names_the_seed(
    interrupted_run,  # noqa: F811
    tmp_path,
    capsys,
):
    mine = interrupted_run(tmp_path / "mine")  # --seed 42, the default
    sibling = interrupted_run(tmp_path / "sibling", "--seed", "7")
    shutil.copy(sibling / "checkpoint.pth", mine / "checkpoint.pth")
    before = _snapshot(tmp_path / "mine")
    err = " ".join(_refused(["--resume", str(mine)], capsys).split())
    assert "checkpoint.pth is another run's" in err
    assert f"run_id={sibling.name!r} there but {mine.name!r} here" in err
    assert "seed=7 there but 42 here" in err
    assert _snapshot(tmp_path / "mine") == before


# --- 4. Every image decoded, and a huge one refused, before a run folder is made ------


@pytest.mark.parametrize("fmt", ["BMP", "TIFF", "PPM"])  # the CLI reads no .gif
def test_a_truncated_image_of_any_format_is_refused_before_the_run(
    fmt, tiny_image_folder, tmp_path, capsys
):
    pixels = np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt)
    cut = tiny_image_folder / "train" / "a" / f"cut.{fmt.lower()}"
    cut.write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    out = tmp_path / "runs"
    err = _refused(_own(tiny_image_folder, out), capsys)
    assert f"{cut}: " in err and "image file is truncated" in err
    assert not out.exists()  # refused before any folder was made


def _blank_png(width: int, height: int) -> bytes:
    """A whole 1-bit black PNG of ``width`` x ``height`` pixels: a few KB on disk."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return len(data).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")

    header = (
        width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([1, 0, 0, 0, 0])
    )
    rows = zlib.compress(bytes(1 + (width + 7) // 8) * height, 9)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", rows)
        + chunk(b"IEND", b"")
    )


def test_an_image_of_too_many_pixels_is_refused_before_the_run(
    tiny_image_folder, tmp_path, capsys
):
    huge = tiny_image_folder / "train" / "b" / "huge.png"
    huge.write_bytes(_blank_png(12_000, 12_000))  # 144 megapixels in 20 KB
    out = tmp_path / "runs"
    err = " ".join(
        _refused(_own(tiny_image_folder, out, "--epochs", "1"), capsys).split()
    )
    assert f"{huge}: 12000x12000 pixels (144 megapixels," in err
    assert "Shrink it" in err
    assert "DecompressionBombWarning" not in err
    assert not out.exists()


# --- 5. File and class names that are not UTF-8 ---------------------------------------


def test_names_that_are_not_utf8_are_trained_on(tiny_image_folder, tmp_path, capsys):
    data = os.fsencode(tiny_image_folder)
    os.rename(data + b"/train/a/0.png", data + b"/train/a/caf\xe9.png")
    for split in (b"train", b"test"):
        os.rename(data + b"/" + split + b"/b", data + b"/" + split + b"/\xff-b")
    out = tmp_path / "runs"
    train.main(_own(tiny_image_folder, out, "--epochs", "1"))
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    run = (out / "latest").resolve()
    results = json.loads((run / "results.json").read_text())
    assert results["status"] == "complete" and results["train_images"] == 8
    assert results["class_names"] == ["a", os.fsdecode(b"\xff-b")]


# --- 6. A run folder that cannot be written is refused before any work ----------------


def _unwritable(monkeypatch, folder: Path, code: int) -> None:
    """Every write in or below ``folder`` fails with ``code`` (EROFS: a read-only mount;
    EACCES: no permission), as the kernel says it even to root."""
    real_open, folder = os.open, os.path.realpath(folder)

    def open_(path, flags, *args, **kwargs):
        writes = flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
        where = os.path.realpath(path)
        if writes and (where == folder or where.startswith(folder + os.sep)):
            raise OSError(code, os.strerror(code), path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)


@pytest.mark.parametrize(
    ("read_only", "code"),
    [("run", errno.EACCES), ("output", errno.EROFS)],
    ids=["run-folder-EACCES", "output-folder-EROFS"],
)
def test_resume_of_a_read_only_run_folder_is_refused_before_any_work(
    read_only,
    code,
    interrupted_run,  # noqa: F811
    tmp_path,
    monkeypatch,
    capsys,
):
    run = interrupted_run(tmp_path / "runs")
    before = _snapshot(tmp_path / "runs")
    _unwritable(monkeypatch, run if read_only == "run" else tmp_path / "runs", code)
    monkeypatch.setattr(
        parts, "fitting_model", lambda *a: pytest.fail("work began")
    )  # the refusal comes first
    err = _refused(["--resume", str(run)], capsys)
    assert f"--resume {run}: {run} cannot be written ({os.strerror(code)})" in err
    assert _snapshot(tmp_path / "runs") == before


# --- 7. Only the run's own folder is written; a user's `latest` is never replaced ------


def _swapped_at_training_step(monkeypatch, out: Path, victim: Path, step: int) -> Path:
    """At the CLI model's ``step``-th training forward pass, the run folder in ``out``
    is moved to ``out/../moved`` and its path made a link to ``victim``; return where
    it was moved."""
    build, calls, moved = parts.build_model, [], out.parent / "moved"

    def swap(module, inputs):
        if module.training:
            calls.append(1)
            if len(calls) == step:
                (run,) = [p for p in out.iterdir() if runs.RUN_NAME.fullmatch(p.name)]
                run.rename(moved)
                run.symlink_to(victim, target_is_directory=True)

    def build_model(*args, **kwargs):
        model = build(*args, **kwargs)
        model.register_forward_pre_hook(swap)
        return model

    monkeypatch.setattr(parts, "build_model", build_model)
    return moved


def test_a_run_folder_replaced_mid_run_by_a_link_never_writes_into_its_target(
    tiny_image_folder, tmp_path, monkeypatch, capsys
):
    out, victim = tmp_path / "runs", tmp_path / "victim"
    victim.mkdir()
    for name in ("model.pth", "results.json", "checkpoint.pth"):
        (victim / name).write_text(f"the user's own {name}")
    before = _snapshot(victim)
    moved = _swapped_at_training_step(monkeypatch, out, victim, step=3)  # in epoch 2
    with pytest.raises(SystemExit) as info:
        train.main(_own(tiny_image_folder, out))
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "was moved or replaced" in err
    assert "--resume" not in err  # it would name the link, not the run
    assert _snapshot(victim) == before and sorted(os.listdir(victim)) == sorted(before)
    results = json.loads((moved / "results.json").read_text())
    assert results["status"] == "failed" and results["epochs_completed"] == 2
    assert runs.pair_matches(moved) and (moved / "loss_curves.png").is_file()
    assert not (out / "latest").exists()  # never pointed at the link


def test_a_users_file_named_latest_is_left_as_it_is(
    tiny_image_folder, tmp_path, capsys
):
    out = tmp_path / "runs"
    out.mkdir()
    (out / "latest").write_text("my notes: try lr 1e-3 next\n")
    train.main(_own(tiny_image_folder, out, "--epochs", "1"))
    err = capsys.readouterr().err
    assert (out / "latest").read_text() == "my notes: try lr 1e-3 next\n"
    assert not (out / "latest").is_symlink()
    assert f"{out / 'latest'} is not a pointer this program made" in err


# --- 8. A --resume that cannot go on says why ------------------------------------------


def test_resume_of_a_cut_off_results_json_says_it_is_damaged(
    interrupted_run,  # noqa: F811
    tmp_path,
    capsys,
):
    run = interrupted_run(tmp_path / "runs")
    (run / "results.json").write_text('{"status": "interr')
    err = " ".join(_refused(["--resume", str(run)], capsys).split())
    assert f"{run / 'results.json'} is damaged (not valid JSON" in err
    assert "there is no results.json" not in err


def test_resume_of_a_missing_or_dangling_latest_lists_the_run_folders(
    interrupted_run,  # noqa: F811
    tmp_path,
    capsys,
):
    out = tmp_path / "runs"
    run = interrupted_run(out)
    (out / "latest").unlink()  # as after a SIGKILL before the first save
    err = " ".join(_refused(["--resume", str(out / "latest")], capsys).split())
    assert f"--resume {out / 'latest'} does not exist" in err and run.name in err
    (out / "latest").symlink_to("20240101-000000-abcd1234")
    err = " ".join(_refused(["--resume", str(out / "latest")], capsys).split())
    assert "is a symbolic link to 20240101-000000-abcd1234, which does not exist" in err
    assert run.name in err


def test_resume_with_a_checkpoint_that_is_a_folder_says_so(
    interrupted_run,  # noqa: F811
    tmp_path,
    capsys,
):
    run = interrupted_run(tmp_path / "runs")
    (run / "checkpoint.pth").unlink()
    (run / "checkpoint.pth").mkdir()
    err = " ".join(_refused(["--resume", str(run)], capsys).split())
    assert f"{run / 'checkpoint.pth'} is not a file" in err
    assert "before its first epoch" not in err


def test_resume_of_a_run_in_training_names_the_run_folder(
    interrupted_run,  # noqa: F811
    tmp_path,
    capsys,
):
    run = interrupted_run(tmp_path / "runs")
    with runs.OutputLock(tmp_path / "runs"):  # as a run training there holds it
        err = " ".join(_refused(["--resume", str(run)], capsys).split())
    assert f"--resume {run}: that run folder is in use" in err
    assert "--output-dir" not in err.split("error:")[-1]


# --- Issue 53, probes53: what a refusal names -------------------------------------------


def test_resume_without_its_checkpoint_says_it_is_missing_and_what_is_kept(
    interrupted_run,  # noqa: F811
    tmp_path,
    capsys,
):
    run = interrupted_run(tmp_path / "runs")  # epoch 1 in model.pth and results.json
    (run / "checkpoint.pth").unlink()
    err = " ".join(_refused(["--resume", str(run)], capsys).split())
    assert f"{run / 'checkpoint.pth'} is missing" in err
    assert "1 epoch(s) are kept in model.pth and results.json" in err
    assert "before its first epoch" not in err


def test_resume_of_a_file_of_a_run_folder_says_to_pass_the_folder(
    interrupted_run,  # noqa: F811
    tmp_path,
    capsys,
):
    run = interrupted_run(tmp_path / "runs")
    err = " ".join(_refused(["--resume", str(run / "results.json")], capsys).split())
    assert (
        f"--resume {run / 'results.json'} is a file: pass the run folder, e.g. "
        f"--resume {run}"
    ) in err


def test_a_class_folder_that_cannot_be_read_is_named_not_called_empty(
    tiny_image_folder, tmp_path, monkeypatch, capsys
):
    locked, scandir = tiny_image_folder / "test" / "b", os.scandir

    def without_permission(path="."):  # as chmod 000 does for a user other than root
        if Path(path) == locked:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", without_permission)
    out = tmp_path / "runs"
    err = " ".join(_refused(_own(tiny_image_folder, out), capsys).split())
    assert f"{locked} cannot be read (Permission denied)" in err
    assert "no images" not in err
    assert not out.exists()
