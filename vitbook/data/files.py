"""Files that are whole or absent: atomic writes, atomic folders, and their temporaries.

Everything the package writes goes first to a temporary beside its target and is renamed into
place in one step, so a reader, or a process killed half-way, sees the old file or the whole
new one, never half of it. Temporaries are named
``.<name>.partial-<pid>@<machine>-<8 random characters>``; the next write of the same target
removes those whose process has ended, and only those, never a user's ``.model.pth-20240101``.
``<machine>`` tells apart computers (or containers) sharing one data volume, whose process
ids mean nothing to each other: another machine's temporary is left alone for a day.

* :func:`atomic_write` and :func:`write_json`: one file;
* :class:`HeldFolder`: a folder held open, so that what is written into it by path
  (:func:`atomic_write`, :func:`open_file`) lands there even once it is moved or replaced;
* :func:`atomic_folder`: a folder filled beside its place, then renamed into it;
* :func:`temporary_folder`: a scratch folder named the same way, removed afterwards;
* :func:`sha256_of`: a file's SHA-256, read in chunks;
* :func:`listing_sha256`: the SHA-256 of a labelled file list (names, labels and sizes);
* :func:`shown`: a path as text that always prints (bytes that are not UTF-8 escaped).
"""

from __future__ import annotations

import contextlib
import functools
import glob
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import stat
import tempfile
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

__all__ = [
    "FolderMovedError",
    "HeldFolder",
    "atomic_folder",
    "atomic_write",
    "listing_sha256",
    "machine_id",
    "open_file",
    "remove_file",
    "remove_stale_temporaries",
    "sha256_of",
    "shown",
    "temporary_folder",
    "temporary_prefix",
    "umask",
    "write_json",
]

_CHUNK = 1 << 16
_TEMP_MARKER = ".partial-"
# What follows ``.<name>.partial-``: a process id, "@" and the machine's id (absent in
# names written before there was one: this machine's), "-", and 8 random characters.
_TEMP_SUFFIX = re.compile(r"(\d+)(?:@([0-9a-f]{8}))?-[a-z0-9_]{8}")
# Another machine's temporary younger than this (seconds) may still be in use.
_FOREIGN_GRACE = 86400


def sha256_of(path: str | Path) -> str:
    """The SHA-256 hex digest of a file, read in chunks."""
    digest = hashlib.sha256()
    with open_file(path) as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def listing_sha256(root: str | Path, files: list[tuple[str, int]]) -> str:
    """The SHA-256 of ``files`` (``(path, label)`` pairs, as an ImageFolder's ``samples``):
    each path below ``root``, its label and its size in bytes. A file added, removed,
    renamed, moved to another label or resized changes it; the contents are not read.
    Names are hashed as the file system's bytes, so one that is not UTF-8 counts too."""
    digest = hashlib.sha256()
    for path, label in sorted(files):
        name = os.fsencode(os.path.relpath(path, root))
        digest.update(name + f"\0{label}\0{os.stat(path).st_size}\n".encode())
    return digest.hexdigest()


def shown(path: str | bytes | os.PathLike) -> str:
    """``path`` as text that any terminal or log prints: a name whose bytes are not
    UTF-8 (``b'caf\\xe9.png'`` on Linux) shows them as escapes (``caf\\xe9.png``)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def umask() -> int:
    """The process's umask (reading it means setting it, so it is set straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@functools.cache
def machine_id() -> str:
    """8 hex digits naming this computer and its process-id namespace (a container has
    its own), so that process ids in temporaries' names are only judged where they mean
    something."""
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        namespace = 0
    return hashlib.sha256(f"{socket.gethostname()}:{namespace}".encode()).hexdigest()[
        :8
    ]


def temporary_prefix(name: str) -> str:
    """The prefix of this process's temporaries for ``name``:
    ``.<name>.partial-<pid>@<machine>-``."""
    return f".{name}{_TEMP_MARKER}{os.getpid()}@{machine_id()}-"


def _last_touched(path: Path) -> float:
    """The newest modification time of ``path`` and, for a folder, of what it holds."""
    times = [path.stat().st_mtime]
    if path.is_dir() and not path.is_symlink():
        times += [child.stat().st_mtime for child in path.iterdir()]
    return max(times)


def _still_in_use(path: Path, pid: int, machine: str | None) -> bool:
    if machine not in (None, machine_id()) or os.name != "posix":
        # another machine's process, or no cheap liveness test: trust it for a day
        return time.time() - _last_touched(path) < _FOREIGN_GRACE
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True


def remove_stale_temporaries(folder: str | Path, name: str) -> list[Path]:
    """Remove the temporaries for ``name`` in ``folder`` left by processes that have ended.

    Only exact temporary names count (a user's ``.<name>-20240101`` is never touched), and
    those of a process still running are kept. Returns what was removed.
    """
    folder, prefix = Path(folder), f".{name}{_TEMP_MARKER}"
    removed = []
    for path in sorted(folder.glob(glob.escape(prefix) + "*")):
        match = _TEMP_SUFFIX.fullmatch(path.name[len(prefix) :])
        if match is None:  # another name that starts alike
            continue
        try:
            if _still_in_use(path, int(match.group(1)), match.group(2)):
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError:  # vanished meanwhile, or not ours to remove: leave it
            continue
        removed.append(path)
    return removed


class FolderMovedError(OSError):
    """A :class:`HeldFolder`'s path no longer names it (moved away, or replaced)."""


class HeldFolder:
    """A folder opened once, never through a symbolic link: the files written or read
    in it by path (:func:`atomic_write`, :func:`open_file`) are those of this very
    folder, even once its path was moved away or replaced (say, by a link to another
    folder), so nothing is ever written elsewhere. The first write after such a move
    raises :class:`FolderMovedError` once it is done; later ones (keeping what can be
    kept) go on quietly. Closed when it is garbage-collected, or by :meth:`close`."""

    _held: weakref.WeakValueDictionary[str, HeldFolder] = weakref.WeakValueDictionary()

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        self.close = weakref.finalize(self, os.close, self.fd)
        self.moved_said = False
        HeldFolder._held[os.path.abspath(self.path)] = self

    @classmethod
    def holding(cls, path: Path) -> HeldFolder | None:
        """The held folder that ``path`` is directly in, if any."""
        return cls._held.get(os.path.abspath(path.parent))

    def in_place(self) -> bool:
        """Whether the path still names this folder (not a link, not another one)."""
        try:
            now, held = os.lstat(self.path), os.fstat(self.fd)
        except OSError:
            return False
        return stat.S_ISDIR(now.st_mode) and (now.st_dev, now.st_ino) == (
            held.st_dev,
            held.st_ino,
        )

    def _opener(self, name: str, flags: int) -> int:
        return os.open(name, flags | os.O_NOFOLLOW, 0o666, dir_fd=self.fd)

    def open(self, name: str, mode: str = "rb") -> BinaryIO:
        """The file ``name`` in this folder, opened in binary ``mode``."""
        return open(name, mode, opener=self._opener)  # noqa: SIM115

    def write(self, name: str, write: Callable[[BinaryIO], None]) -> None:
        """Write ``name`` in this folder in one step, as :func:`atomic_write` does."""
        if self.in_place():  # else the path is someone else's: nothing removed there
            remove_stale_temporaries(self.path, name)
        tmp = f"{temporary_prefix(name)}{secrets.token_hex(4)}"
        try:
            with self.open(tmp, "xb") as f:  # the umask's permissions
                write(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=self.fd)
        if not self.moved_said and not self.in_place():
            self.moved_said = True
            raise FolderMovedError(
                f"{self.path} was moved or replaced while this run was writing into it; "
                f"nothing was written to what that path names now: {name} and the "
                "run's other files are in the folder the run created, wherever it was "
                "moved (continue the run from there)"
            )


def open_file(path: str | Path) -> BinaryIO:
    """``path`` opened for reading bytes: in a :class:`HeldFolder`, that folder's file."""
    held = HeldFolder.holding(Path(path))
    return open(path, "rb") if held is None else held.open(Path(path).name)


def remove_file(path: str | Path) -> None:
    """Remove ``path`` if it is there: in a :class:`HeldFolder`, that folder's file."""
    held = HeldFolder.holding(Path(path))
    with contextlib.suppress(FileNotFoundError):
        if held is None:
            os.unlink(path)
        else:
            os.unlink(Path(path).name, dir_fd=held.fd)


def atomic_write(path: str | Path, write: Callable[[BinaryIO], None]) -> Path:
    """Write ``path`` in one step: ``write(f)`` fills a temporary file beside it (open for
    binary writing), which is flushed to disk and renamed into place, so ``path`` is always
    either the old file or the whole new one.

    Stale temporaries of ended processes are removed first; on any error the temporary is
    removed and ``path`` is left as it was (an OSError such as a full disk then names
    ``path``). The file gets the umask's permissions. In a :class:`HeldFolder`, it is
    written into that folder, wherever it now is.
    """
    path = Path(path)
    held = HeldFolder.holding(path)
    if held is not None:
        try:
            held.write(path.name, write)
        except FolderMovedError:
            raise
        except OSError as error:
            error.filename = error.filename or str(path)
            raise
        return path
    remove_stale_temporaries(path.parent, path.name)
    fd, tmp = tempfile.mkstemp(prefix=temporary_prefix(path.name), dir=path.parent)
    os.close(fd)
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~umask())
        os.replace(tmp, path)
    except OSError as error:
        error.filename = error.filename or str(path)
        raise
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def write_json(path: str | Path, data: dict[str, Any]) -> Path:
    """Write ``data`` to ``path`` atomically as strict JSON (NaN is refused, not written)."""
    text = json.dumps(data, indent=2, allow_nan=False).encode()
    return atomic_write(path, lambda f: f.write(text))


@contextlib.contextmanager
def temporary_folder(parent: str | Path, name: str) -> Iterator[Path]:
    """A new, empty folder in ``parent`` named as a temporary of ``name`` (``parent`` is made
    if needed), removed with its contents when the block ends. Stale temporaries of ``name``
    are removed first."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(parent, name)
    folder = Path(tempfile.mkdtemp(prefix=temporary_prefix(name), dir=parent))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def atomic_folder(path: str | Path) -> Iterator[Path]:
    """A folder that appears at ``path`` whole, or not at all.

    The block fills the yielded staging folder (a :func:`temporary_folder` beside ``path``).
    When it ends without an error, the folder gets the umask's permissions and is renamed to
    ``path`` in one step, replacing an empty folder there; if another process completed
    ``path`` meanwhile, its copy is kept and this one dropped. On an error nothing is left.
    """
    path = Path(path)
    with temporary_folder(path.parent, path.name) as staging:
        yield staging
        os.chmod(staging, 0o777 & ~umask())
        if path.is_dir() and not path.is_symlink() and not any(path.iterdir()):
            path.rmdir()  # an empty leftover (renaming onto it fails on Windows)
        try:
            os.replace(staging, path)
        except OSError:
            if not (path.is_dir() and any(path.iterdir())):
                raise
