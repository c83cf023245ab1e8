"""Run folders: atomic writes, temporaries of this code only, the lock, ``latest``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from going_modular import runs


def _dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout)


def test_atomic_write_replaces_whole_or_not_at_all(tmp_path):
    path = tmp_path / "results.json"
    runs.write_json(path, {"epochs": 1})
    with pytest.raises(ValueError, match="Out of range float values"):
        runs.write_json(path, {"loss": float("nan")})  # strict JSON: never written

    def cut_short(f):
        f.write(b'{"half": ')
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError) as info:
        runs.atomic_write(path, cut_short)
    assert info.value.filename == str(path)  # the message names the file
    assert json.loads(path.read_text()) == {"epochs": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]  # no temporary


def test_a_write_removes_only_this_codes_temporaries_of_ended_processes(tmp_path):
    prefix = ".results.json.partial-"
    dead = tmp_path / f"{prefix}{_dead_pid()}-abcd1234"
    ours = tmp_path / f"{prefix}{os.getpid()}-zzzz9999"  # a write in progress
    users = [
        ".results.json-20240101",  # the backups the earlier cleanup deleted
        ".results.json-k2j3h4_x",
        f"{prefix}notes.txt",
        f"{prefix}{_dead_pid()}-abcd1234.bak",
    ]
    for path in (dead, ours, *(tmp_path / name for name in users)):
        path.write_bytes(b"partial")
    runs.write_json(tmp_path / "results.json", {"epochs": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [ours.name, *users, "results.json"]
    )


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


def test_the_lock_refuses_a_second_holder_and_is_taken_over_from_a_dead_one(
    tmp_path, capsys
):
    with runs.OutputLock(tmp_path) as lock:
        assert lock.locked
        with pytest.raises(runs.RunLockedError, match=f"process {os.getpid()}"):
            runs.OutputLock(tmp_path).acquire()
    assert not (tmp_path / runs.LOCK).exists()
    dead = _dead_pid()
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


def test_a_pair_matches_only_the_model_it_was_saved_with(tmp_path):
    def write_model(folder):
        return runs.atomic_write(folder / runs.MODEL, lambda f: f.write(b"weights 1"))

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
