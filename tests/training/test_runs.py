"""Run folders: the lock, ``latest``, a model and its results saved as a pair."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import warnings

import matplotlib.pyplot as plt
import pytest

from vitbook.data import files
from vitbook.training import runs
from vitbook.training.loop import RESULT_KEYS


def test_each_run_gets_a_new_folder_and_latest_points_to_it(tmp_path):
    first, second = runs.new_run_dir(tmp_path), runs.new_run_dir(tmp_path)
    assert first != second and first.is_dir() and second.is_dir()
    runs.update_latest(first)
    runs.update_latest(second)
    assert (tmp_path / "latest").resolve() == second
    assert os.readlink(tmp_path / "latest") == second.name  # relative: folder can move
    assert runs.resolve_run(tmp_path / "latest") == second
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [first.name, second.name, "latest"]
    )


def test_latest_is_a_text_pointer_where_symlinks_fail(tmp_path, monkeypatch):
    def no_symlinks(*args, **kwargs):
        raise OSError("symlinks are not supported here")

    monkeypatch.setattr(os, "symlink", no_symlinks)
    run = runs.new_run_dir(tmp_path)
    latest = runs.update_latest(run)
    assert latest.read_text() == f"{run.name}\n"
    assert runs.resolve_run(latest) == run


def test_latest_that_is_a_real_folder_is_left_alone(tmp_path):
    (tmp_path / "latest").mkdir()
    (tmp_path / "latest" / "model.pth").write_text("an old layout's run")
    with pytest.raises(IsADirectoryError, match="left as it is"):
        runs.update_latest(runs.new_run_dir(tmp_path))
    assert (tmp_path / "latest" / "model.pth").read_text() == "an old layout's run"


def test_latest_that_is_a_users_link_is_left_alone_but_our_pointer_is_moved_on(
    tmp_path,
):
    first, second = runs.new_run_dir(tmp_path), runs.new_run_dir(tmp_path)
    (tmp_path / "latest").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(FileExistsError, match="not a pointer this program made"):
        runs.update_latest(first)
    assert os.readlink(tmp_path / "latest") == str(tmp_path / "elsewhere")
    (tmp_path / "latest").unlink()
    (tmp_path / "latest").write_text(f"{first.name}\n")  # our own text pointer
    assert runs.resolve_run(runs.update_latest(second)) == second.resolve()


def test_a_held_folder_is_written_even_once_its_path_names_another(tmp_path):
    run, victim = runs.new_run_dir(tmp_path / "out"), tmp_path / "victim"
    victim.mkdir()
    held = files.HeldFolder(run)
    run.rename(tmp_path / "moved")
    run.symlink_to(victim)
    with pytest.raises(files.FolderMovedError, match="was moved or replaced"):
        files.write_json(run / "results.json", {"epochs": 1})
    files.write_json(run / "results.json", {"epochs": 2})  # said once; kept quietly
    assert os.listdir(victim) == []
    assert json.loads((tmp_path / "moved" / "results.json").read_text()) == {
        "epochs": 2
    }
    with files.open_file(run / "results.json") as f:  # read there too
        assert json.loads(f.read()) == {"epochs": 2}
    held.close()


def test_the_lock_refuses_a_second_holder_and_is_taken_over_from_a_dead_one(
    tmp_path, capsys, dead_pid
):
    with runs.OutputLock(tmp_path) as lock:
        assert lock.locked
        with pytest.raises(runs.RunLockedError, match=f"process {os.getpid()}"):
            runs.OutputLock(tmp_path).acquire()
    assert not (tmp_path / runs.LOCK).exists()
    dead = dead_pid
    (tmp_path / runs.LOCK).write_text(f"{dead} 2024-01-01 00:00:00\n")
    with runs.OutputLock(tmp_path) as lock:
        assert lock.took_over == dead
        assert (tmp_path / runs.LOCK).read_text().startswith(f"{os.getpid()} ")
    assert f"left by process {dead}, which has ended" in capsys.readouterr().out


def test_the_lock_is_released_when_its_process_is_killed(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            # What OutputLock does, without importing the package (seconds)
            "import fcntl, os, time; "
            f"fd = os.open({str(tmp_path / runs.LOCK)!r}, os.O_RDWR | os.O_CREAT); "
            "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, b'%d' % os.getpid()); "
            "print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(runs.RunLockedError, match=f"process {holder.pid}"):
            runs.OutputLock(tmp_path).acquire()
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    finally:
        holder.kill()
    with runs.OutputLock(tmp_path) as lock:
        assert lock.took_over == holder.pid


def _lock_file_that_is(kind: str, path, elsewhere) -> None:
    """Put ``kind`` of thing where the lock file goes (``elsewhere``: a user's file)."""
    if kind == "symlink":
        path.symlink_to(elsewhere)
    elif kind == "dangling symlink":
        path.symlink_to(elsewhere.parent / "created-through-the-link")
    elif kind == "hard link":
        os.link(elsewhere, path)
    elif kind == "folder":
        path.mkdir()
    else:
        os.mkfifo(path)


@pytest.mark.parametrize(
    "kind", ["symlink", "dangling symlink", "hard link", "folder", "fifo"]
)
def test_the_lock_never_opens_a_link_or_anything_but_its_own_file(tmp_path, kind):
    """A symbolic link in the lock file's place made the lock truncate its target (as
    root: any file) (issue 53)."""
    out, precious = tmp_path / "runs", tmp_path / "precious.txt"
    out.mkdir()
    precious.write_text("keep me")
    _lock_file_that_is(kind, out / runs.LOCK, precious)
    with pytest.raises(runs.UnsafeLockError, match="not this program's lock file"):
        runs.OutputLock(out).acquire()
    assert precious.read_text() == "keep me"
    assert sorted(os.listdir(tmp_path)) == ["precious.txt", "runs"]
    assert os.path.lexists(out / runs.LOCK)  # left as it was


@pytest.mark.parametrize("checkpoint", ["damaged", "missing"])
@pytest.mark.parametrize(
    ("error", "status"), [(KeyboardInterrupt(), "interrupted"), (OSError(), "failed")]
)
def test_a_stop_never_rewrites_finished_results_from_a_lost_checkpoint(
    tmp_path, checkpoint, error, status
):
    """A resumed run whose checkpoint.pth was damaged (or removed) while it trained
    rewrote results.json with no epochs on a stop (issue 53)."""
    record = {"run_id": "r", "model": "tinyvgg", "data": "d", "status": "running"}
    finished = {"epochs_completed": 1, "model_sha256": "abc"} | {
        key: [0.5] for key in RESULT_KEYS
    }
    files.write_json(tmp_path / runs.RESULTS, record | finished)
    if checkpoint == "damaged":
        (tmp_path / "checkpoint.pth").write_bytes(b"PK\x03\x04 cut short")
    current = runs.Run(tmp_path, record, None, 8)
    kept = current.keep_stopped(error)
    saved = json.loads((tmp_path / runs.RESULTS).read_text())
    assert {k: saved.get(k) for k in finished} == finished  # the results as they were
    assert saved["status"] == status and ("error" in saved) == (status == "failed")
    record, sentence, from_checkpoint = kept
    assert saved == record and not from_checkpoint
    assert sentence.startswith(f"{tmp_path / 'checkpoint.pth'} is {checkpoint}")
    assert "keeps the last good record (1 epoch(s)), marked " + status in sentence


def test_a_pair_matches_only_the_model_it_was_saved_with(tmp_path):
    def write_model(folder):
        return files.atomic_write(folder / runs.MODEL, lambda f: f.write(b"weights 1"))

    runs.save_pair(tmp_path, write_model, {"status": "complete"}, {"test_acc": [0.5]})
    saved = json.loads((tmp_path / runs.RESULTS).read_text())
    assert saved["status"] == "complete" and saved["test_acc"] == [0.5]
    assert runs.pair_matches(tmp_path)
    (tmp_path / runs.MODEL).write_bytes(b"weights 2")  # e.g. a crash between the two
    assert not runs.pair_matches(tmp_path)


def test_names_and_paths_too_long_for_the_file_system_are_refused(tmp_path):
    runs.check_path_length(tmp_path / ("x" * 255))
    with pytest.raises(ValueError, match="is 256 bytes long; file systems allow 255"):
        runs.check_path_length(tmp_path / ("x" * 256))
    deep = tmp_path.joinpath(*["y" * 200] * 20)
    with pytest.raises(ValueError, match="would exceed the 4095-byte limit"):
        runs.check_path_length(deep)


def test_exit_codes_follow_the_signal():
    assert runs.exit_code(KeyboardInterrupt()) == 130
    assert runs.exit_code(runs.StopSignal(signal.SIGTERM)) == 143
    assert runs.exit_code(runs.StopSignal(signal.SIGHUP)) == 129


def test_figures_are_closed_after_saving(tmp_path):
    plt.close("all")  # figures other tests in this process left open are not ours
    current = runs.Run(tmp_path, {"model": "tinyvgg", "data": "mnist"}, None, 28)
    results = {key: [1.0, 0.5] for key in RESULT_KEYS}
    with warnings.catch_warnings(), plt.rc_context({"figure.max_open_warning": 2}):
        warnings.simplefilter("error")  # "More than 2 figures have been opened"
        for _ in range(4):
            current._plot(results)
    assert plt.get_fignums() == []
    assert (tmp_path / "loss_curves.png").read_bytes()[:4] == b"\x89PNG"


def test_a_failing_optional_step_is_one_warning(capsys):
    def fails():
        raise OSError("read-only file system")

    runs.optional_step("Updating the 'latest' pointer", fails)
    assert capsys.readouterr().err == (
        "[WARNING] Updating the 'latest' pointer failed (OSError: read-only file "
        "system); the run itself is saved and its status is unchanged.\n"
    )


def test_a_full_disk_is_described_plainly():
    full = OSError(28, "No space left on device", "/runs/x/model.pth")
    assert runs.describe_error(full) == (
        "No space left on device while writing /runs/x/model.pth: free some space (or "
        "fix the folder)."
    )
    assert runs.describe_error(ValueError("bad image")) == "bad image"
