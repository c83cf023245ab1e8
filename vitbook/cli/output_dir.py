"""The ``--output-dir``: refused before any work when it cannot hold the runs (a file, a
broken or looping link, too long a path, a folder inside the images), then created, checked
writable and locked for the run."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from vitbook.cli.errors import UsageError
from vitbook.cli.resume import Resumed
from vitbook.training import runs

__all__ = ["check_output_dir", "locked_output_dir"]


def _check_link(out: Path) -> None:
    """Refuse an output folder that is a symbolic link in a loop, or going nowhere."""
    try:
        out.resolve(strict=True)
        return
    except RuntimeError:  # a loop, before Python 3.13
        looped = True
    except OSError as error:  # a loop (Python 3.13+), or a path that does not exist yet
        looped = error.errno == errno.ELOOP
    if looped:
        raise UsageError(
            f"--output-dir {out} is a symbolic link that leads back to itself (a loop): "
            "remove or fix the link, or choose another path"
        )
    if out.is_symlink():
        raise UsageError(
            f"--output-dir {out} is a symbolic link to {os.readlink(out)}, which does "
            "not exist: create that folder, remove the link, or choose another path"
        )


def check_output_dir(out: Path, data_dir: Path | None) -> None:
    """Refuse an output folder that is a file, a broken link, too long a path, or inside
    the images."""
    try:
        runs.check_path_length(out)
    except ValueError as error:
        raise UsageError(f"--output-dir: {error}") from None
    _check_link(out)
    if out.exists() and not out.is_dir():
        raise UsageError(
            f"--output-dir {out} is an existing file, not a folder: choose another path"
        )
    for split in ("train", "test") if data_dir is not None else ():
        images = (data_dir / split).resolve()
        if images == out.resolve() or images in out.resolve().parents:
            raise UsageError(
                f"--output-dir {out} is inside {data_dir / split}: its files would "
                f"be read as {split} images (or as a class). Choose a folder outside "
                f"{data_dir}'s train/ and test/"
            )


@contextlib.contextmanager
def locked_output_dir(out: Path, resumed: Resumed | None = None) -> Iterator[None]:
    """Create ``out``, check that it is writable and hold its lock (see
    :class:`~vitbook.training.runs.OutputLock`; a lock file that is a link or not a
    regular file is refused) for the duration of the block. A lock held by another
    process refuses the ``resumed`` run (of ``out``) by its folder."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as error:
        raise UsageError(
            f"--output-dir {out} cannot be used: {error.strerror or error}. Choose a "
            "folder you can write to"
        ) from None
    lock = runs.OutputLock(out)
    try:
        lock.acquire()
    except runs.RunLockedError as error:
        if resumed is None:
            raise UsageError(f"--output-dir {error}") from None
        raise UsageError(
            f"--resume {resumed.run_dir}: that run folder is in use: {error.holder} is "
            f"training in {out}, where a run writes alone ({lock.path} is locked). "
            "Wait for that run to end, then resume"
        ) from None
    except runs.UnsafeLockError as error:
        raise UsageError(f"--output-dir {error}") from None
    try:
        yield
    finally:
        lock.release()
