"""vitbook.data.files: atomic files and folders, and only this code's stale temporaries."""

from __future__ import annotations

import hashlib
import json
import os
import stat

import pytest

from vitbook.data import files


def test_atomic_write_replaces_whole_or_not_at_all(tmp_path):
    path = tmp_path / "results.json"
    files.write_json(path, {"epochs": 1})
    with pytest.raises(ValueError, match="Out of range float values"):
        files.write_json(path, {"loss": float("nan")})  # strict JSON: never written

    def cut_short(f):
        f.write(b'{"half": ')
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError) as info:
        files.atomic_write(path, cut_short)
    assert info.value.filename == str(path)  # the message names the file
    assert json.loads(path.read_text()) == {"epochs": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]  # no temporary


def test_a_write_removes_only_this_codes_temporaries_of_ended_processes(
    tmp_path, dead_pid
):
    prefix = ".results.json.partial-"
    dead = tmp_path / f"{prefix}{dead_pid}-abcd1234"
    ours = tmp_path / f"{prefix}{os.getpid()}-zzzz9999"  # a write in progress
    users = [
        ".results.json-20240101",  # the backups the earlier cleanup deleted
        ".results.json-k2j3h4_x",
        f"{prefix}notes.txt",
        f"{prefix}{dead_pid}-abcd1234.bak",
    ]
    for path in (dead, ours, *(tmp_path / name for name in users)):
        path.write_bytes(b"partial")
    files.write_json(tmp_path / "results.json", {"epochs": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [ours.name, *users, "results.json"]
    )


def test_an_atomic_folder_appears_whole_with_the_umask_permissions(tmp_path, dead_pid):
    stale = tmp_path / f".photos.partial-{dead_pid}-abcd1234"
    stale.mkdir()
    previous = os.umask(0o027)
    try:
        with files.atomic_folder(tmp_path / "photos") as staging:
            (staging / "a.txt").write_text("a")
            assert not (tmp_path / "photos").exists()  # nothing visible yet
    finally:
        os.umask(previous)
    assert [p.name for p in tmp_path.iterdir()] == ["photos"]  # the stale one is gone
    assert (tmp_path / "photos" / "a.txt").read_text() == "a"
    assert stat.S_IMODE((tmp_path / "photos").stat().st_mode) == 0o750


def test_a_failed_atomic_folder_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError, match="half-way"):
        with files.atomic_folder(tmp_path / "photos") as staging:
            (staging / "a.txt").write_text("a")
            raise RuntimeError("stopped half-way")
    assert list(tmp_path.iterdir()) == []


def test_an_atomic_folder_replaces_an_empty_one_and_keeps_a_finished_one(tmp_path):
    (tmp_path / "empty").mkdir()
    with files.atomic_folder(tmp_path / "empty") as staging:
        (staging / "new.txt").write_text("new")
    assert [p.name for p in (tmp_path / "empty").iterdir()] == ["new.txt"]
    with files.atomic_folder(tmp_path / "done") as staging:
        (staging / "ours.txt").write_text("ours")
        (tmp_path / "done").mkdir()  # another process finishes first
        (tmp_path / "done" / "theirs.txt").write_text("theirs")
    assert [p.name for p in (tmp_path / "done").iterdir()] == ["theirs.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["done", "empty"]


def test_a_temporary_folder_is_removed_afterwards(tmp_path):
    with files.temporary_folder(tmp_path / "new", "apt") as scratch:
        assert scratch.name.startswith(files.temporary_prefix("apt"))
        (scratch / "package.deb").write_bytes(b"deb")
    assert list((tmp_path / "new").iterdir()) == []


def test_another_machines_temporaries_are_kept_for_a_day(tmp_path, dead_pid):
    """Two computers (or containers) sharing a data volume: a process id of one means
    nothing on the other, so a download's scratch folder was deleted under it."""
    me = files.machine_id()
    other = "0" * 8 if me != "0" * 8 else "1" * 8
    prefix = ".photos.partial-"
    theirs = tmp_path / f"{prefix}{dead_pid}@{other}-abcd1234"  # dead here, not there
    old = tmp_path / f"{prefix}{dead_pid}@{other}-efgh5678"
    mine = tmp_path / f"{prefix}{dead_pid}@{me}-ijkl9012"
    for folder in (theirs, old, mine):
        (folder / "part").mkdir(parents=True)
    day_ago = os.path.getmtime(old) - 86401
    for path in (old, old / "part"):
        os.utime(path, (day_ago, day_ago))
    assert files.remove_stale_temporaries(tmp_path, "photos") == sorted([old, mine])
    assert [p.name for p in tmp_path.iterdir()] == [theirs.name]
    with files.temporary_folder(tmp_path, "x") as scratch:
        assert scratch.name.startswith(f".x.partial-{os.getpid()}@{me}-")


def test_a_listing_hashes_names_as_bytes_even_when_not_utf8(tmp_path):
    """A name that is not UTF-8 (``b'caf\\xe9.png'``) raised UnicodeEncodeError (issue
    53); a UTF-8 one hashes as before, so runs begun earlier still resume."""
    root = os.fsencode(tmp_path)
    for name in (b"caf\xe9.png", "café.png".encode()):
        with open(root + b"/" + name, "wb") as f:
            f.write(b"12345")
    odd, utf8 = (
        os.fsdecode(root + b"/" + n) for n in (b"caf\xe9.png", b"caf\xc3\xa9.png")
    )
    assert files.listing_sha256(tmp_path, [(odd, 0)]) != files.listing_sha256(
        tmp_path, [(odd, 1)]
    )
    before = hashlib.sha256("café.png\x000\x005\n".encode()).hexdigest()
    assert files.listing_sha256(tmp_path, [(utf8, 0)]) == before
    assert files.shown(odd) == f"{tmp_path}/caf\\xe9.png"
