"""Run folders that never overwrite each other: one per run, a lock, a ``latest`` pointer.

Each training run of the CLI gets its own new folder ``<output-dir>/<timestamp>-<id>/`` (as
MLflow and Lightning version their runs); nothing a later run does deletes or moves it. A
lock file (``<output-dir>/.going_modular-train.lock``, a name no user's file has, never
opened through a symbolic link) refuses a second run into the same folder while one is
running, and ``<output-dir>/latest`` points to
the newest run that saved a model (a symlink, or a text file holding the run's name where
symlinks are not possible).

Files are written atomically with :mod:`vitbook.data.files` (a temporary beside the
target, renamed into place; a cleanup only ever removes temporaries that this code wrote and
whose process has ended, never a user's ``.model.pth-20240101``).
A run's ``model.pth`` is saved first and its ``results.json`` last, holding the model file's
SHA-256: the two belong together exactly when :func:`pair_matches`.

SIGTERM and SIGHUP stop a run as Ctrl-C does (:func:`stop_signals`; one ignored at the start,
as ``nohup`` ignores SIGHUP, stays ignored), and all three are held back while a run's files
are written (:func:`signals_held`) and once its last epoch is done.

:class:`Run` is one run's folder as the CLI fills it: the record (id, status, options), the
model saved with its results, the optional steps after a save (the curves, MLflow, the
``latest`` pointer; each failure only a warning), and what is kept when a run stops
early: never fewer finished epochs than its ``results.json`` already holds.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import re
import signal
import stat
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import matplotlib.pyplot as plt
from torch import nn

from vitbook.data.files import (
    HeldFolder,
    atomic_write,
    open_file,
    sha256_of,
    shown,
    temporary_prefix,
    write_json,
)
from vitbook.training.checkpoint import CHECKPOINT_NAME, read_checkpoint
from vitbook.training.model_files import save_model
from vitbook.training.plots import plot_loss_curves

try:
    import fcntl
except ImportError:  # Windows: runs go ahead unlocked
    fcntl = None

__all__ = [
    "LATEST",
    "LOCK",
    "MODEL",
    "RESULTS",
    "STOP_SIGNALS",
    "Kept",
    "OutputLock",
    "Run",
    "RunLockedError",
    "StopSignal",
    "StopSignals",
    "UnsafeLockError",
    "check_path_length",
    "describe_error",
    "exit_code",
    "new_run_dir",
    "optional_step",
    "pair_matches",
    "resolve_run",
    "save_pair",
    "signals_held",
    "stop_signals",
    "update_latest",
]

LATEST = "latest"
LOCK = ".going_modular-train.lock"  # not a user's own .lock
MODEL = "model.pth"
RESULTS = "results.json"
# SIGTERM and SIGHUP stop a run as Ctrl-C (SIGINT) does; each exits with 128 + its number.
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)
RUN_NAME = re.compile(r"\d{8}-\d{6}-[0-9a-f]{8}")  # what new_run_dir names a run
NAME_MAX = 255  # bytes in one file or folder name, on the usual file systems
PATH_MAX = 4095  # bytes in a whole path (Linux; macOS allows 1023)
# The longest path this module writes below a run folder: "/" + "<run id>" + "/" + a
# temporary of "results.json" (the longest file name a run writes).
_LONGEST_INSIDE = len(
    "/20240101-000000-abcd1234/.results.json.partial-4194304-abcdefgh"
)


class RunLockedError(RuntimeError):
    """Another process (``holder``, e.g. "process 123") is writing a run into the same
    output folder."""

    def __init__(self, message: str, holder: str):
        super().__init__(message)
        self.holder = holder


class UnsafeLockError(RuntimeError):
    """The lock file's place holds a symbolic link, a second link to a file, or
    something other than a regular file: it is not opened (it could be anyone's)."""


class StopSignal(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread as Ctrl-C raises KeyboardInterrupt."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def exit_code(interrupt: KeyboardInterrupt) -> int:
    """128 + the number of the signal that raised ``interrupt`` (130 for Ctrl-C)."""
    return 128 + getattr(interrupt, "signum", signal.SIGINT)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


class StopSignals:
    """The stop signals' handler while a run trains (see :func:`stop_signals`).

    The first Ctrl-C, SIGTERM or SIGHUP raises KeyboardInterrupt (:class:`StopSignal` for
    the last two) in the main thread; once :meth:`finish` says that the last epoch is
    done, or once a stop is under way, a signal is only noted in ``received``, so that the
    save it would cut short goes on and no second traceback is printed.
    """

    def __init__(self) -> None:
        self.finishing = False
        self.received: int | None = None

    def finish(self) -> None:
        """The last epoch is done: from now on a signal waits for the save."""
        self.finishing = True

    def __call__(self, signum: int, frame) -> None:
        if self.finishing or self.received is not None:
            self.received = self.received or signum
            return
        self.received = signum
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise StopSignal(signum)


@contextlib.contextmanager
def stop_signals(exiting: bool = False) -> Iterator[StopSignals]:
    """Within the block, Ctrl-C, SIGTERM and SIGHUP stop the run through the
    :class:`StopSignals` it yields (main thread only). A signal that was ignored when the
    block began stays ignored: ``nohup`` ignores SIGHUP, a shell's background job SIGINT.
    With ``exiting`` (the process ends after the block), once a stop came the three stay
    ignored after the block, so that more of them cannot cut the exit short."""
    stops = StopSignals()
    if not _in_main_thread():
        yield stops
        return
    previous = {
        signum: signal.getsignal(signum) for signum in (signal.SIGINT, *STOP_SIGNALS)
    }
    for signum, handler in previous.items():
        if handler != signal.SIG_IGN:
            signal.signal(signum, stops)
    try:
        yield stops
    finally:
        for signum, handler in previous.items():
            if exiting and stops.received is not None:
                signal.signal(signum, signal.SIG_IGN)
            elif handler is not None:  # None: a handler not set from Python, left as is
                signal.signal(signum, handler)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Ignore Ctrl-C, SIGTERM and SIGHUP within the block (main thread only), so that a
    stop cannot cut a save short."""
    if not _in_main_thread():
        yield
        return
    previous = {
        signum: signal.signal(signum, signal.SIG_IGN)
        for signum in (signal.SIGINT, *STOP_SIGNALS)
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def save_pair(
    run_dir: str | Path,
    save_model: Callable[[Path], Path],
    record: dict[str, Any],
    results: dict[str, Any],
) -> None:
    """Save a run's model (``save_model(run_dir)`` writes it atomically and returns its
    path), then ``results.json`` (``record | results`` plus the model file's SHA-256), with
    stop signals held back."""
    run_dir = Path(run_dir)
    with signals_held():
        path = save_model(run_dir)
        write_json(
            run_dir / RESULTS, record | {"model_sha256": sha256_of(path)} | results
        )


def pair_matches(run_dir: str | Path) -> bool:
    """Whether ``run_dir``'s ``results.json`` describes the ``model.pth`` beside it."""
    run_dir = Path(run_dir)
    try:
        recorded = json.loads((run_dir / RESULTS).read_text()).get("model_sha256")
        return recorded == sha256_of(run_dir / MODEL)
    except (OSError, ValueError, AttributeError):
        return False


def check_path_length(folder: str | Path) -> None:
    """Raise ValueError when a run folder inside ``folder`` would need a name or path longer
    than file systems allow (each name 255 bytes, a path 4095)."""
    absolute = Path(os.path.abspath(folder))
    for part in absolute.parts:
        if len(os.fsencode(part)) > NAME_MAX:
            raise ValueError(
                f"the folder name {part[:40]}... is {len(os.fsencode(part))} bytes long; "
                f"file systems allow {NAME_MAX}. Choose a shorter name"
            )
    length = len(os.fsencode(str(absolute))) + _LONGEST_INSIDE
    if length > PATH_MAX:
        raise ValueError(
            f"the path is {len(os.fsencode(str(absolute)))} bytes long, and the files of a "
            f"run inside it would exceed the {PATH_MAX}-byte limit. Choose a shorter path"
        )


def new_run_dir(output_dir: str | Path) -> Path:
    """Create and return a new, empty run folder ``output_dir/<YYYYmmdd-HHMMSS>-<8 hex>``."""
    run_dir = Path(output_dir) / (
        f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
    )
    run_dir.mkdir(parents=True)
    return run_dir


def _ours(latest: Path) -> bool:
    """Whether ``latest`` is absent or a pointer :func:`update_latest` made (a link or a
    text file naming a run folder), so that replacing it loses nothing of a user's."""
    try:
        if latest.is_symlink():
            return RUN_NAME.fullmatch(os.readlink(latest)) is not None
        if not latest.is_file():
            return not os.path.lexists(latest)
        with open(latest, "rb") as f:
            text = f.read(64)
    except OSError:
        return False
    return RUN_NAME.fullmatch(text.decode("utf-8", "replace").strip()) is not None


def update_latest(run_dir: str | Path) -> Path:
    """Point ``<output-dir>/latest`` at ``run_dir`` in one step (a relative symlink, or a text
    file with the run's name where symlinks fail); return the pointer.

    Raises OSError, leaving it as it is, when ``latest`` is not such a pointer (a folder,
    a user's file or link).
    """
    run_dir = Path(run_dir)
    latest = run_dir.parent / LATEST
    if not _ours(latest):
        folder = latest.is_dir() and not latest.is_symlink()
        error = IsADirectoryError if folder else FileExistsError
        raise error(
            errno.EISDIR if folder else errno.EEXIST,
            f"{latest} is {'a folder, not' if folder else 'not'} a pointer this "
            "program made; it was left as it is",
        )
    tmp = run_dir.parent / f"{temporary_prefix(LATEST)}{uuid.uuid4().hex[:8]}"
    try:
        os.symlink(run_dir.name, tmp, target_is_directory=True)
    except OSError:  # no symlinks here (some FUSE mounts, Windows without rights)
        return atomic_write(latest, lambda f: f.write(f"{run_dir.name}\n".encode()))
    try:
        os.replace(tmp, latest)
    finally:
        if os.path.lexists(tmp):
            os.remove(tmp)
    return latest


def resolve_run(path: str | Path) -> Path:
    """The run folder ``path`` names: the folder itself, or the one a ``latest`` symlink or
    text pointer refers to."""
    path = Path(path)
    if path.is_file() and path.name == LATEST:
        return path.parent / path.read_text().strip()
    return path.resolve()


class OutputLock:
    """Hold the lock file ``<folder>/.going_modular-train.lock`` (:data:`LOCK`) while a run
    writes into ``folder`` (a context manager).

    A second process meets :class:`RunLockedError`, which names the holder's process id.
    The lock is an advisory ``flock``, which the kernel releases when its process dies, so
    the lock file left by a killed run is simply taken over (``took_over`` is then that
    run's process id, and one line says so). Where the file system has no ``flock`` (some
    network mounts, Windows), ``locked`` is False and a warning says the run goes ahead
    unlocked.
    """

    def __init__(self, folder: str | Path):
        self.path = Path(folder) / LOCK
        self.fd: int | None = None
        self.locked = False
        self.took_over: int | None = None

    def _holder(self, fd: int) -> int | None:
        """The process id the open lock file names, if any."""
        try:
            return int(os.pread(fd, 64, 0).split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def _refuse(self, what: str) -> UnsafeLockError:
        """The error for a lock file's place that holds ``what``."""
        return UnsafeLockError(
            f"{self.path} is {what}, not this program's lock file; it was left as it "
            "is. Remove it and try again, or choose another output folder"
        )

    def _open(self) -> int:
        """The lock file, created if need be, opened without following a symbolic link
        (which could make it truncate any file); :class:`UnsafeLockError` if its place
        holds a link or anything but a regular file of one name."""
        try:
            before = os.lstat(self.path)
        except FileNotFoundError:
            before = None
        if before is not None and stat.S_ISLNK(before.st_mode):
            raise self._refuse(f"a symbolic link (to {shown(os.readlink(self.path))})")
        if before is not None and not stat.S_ISREG(before.st_mode):
            raise self._refuse("not a regular file")
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
        try:
            fd = os.open(self.path, flags, 0o644)
        except OSError as error:
            if error.errno == errno.ELOOP:  # a link put there since the lstat
                raise self._refuse("a symbolic link") from None
            raise
        opened = os.fstat(fd)
        # no link at all is a file its last holder removed meanwhile: tried again below
        if not stat.S_ISREG(opened.st_mode) or opened.st_nlink > 1:
            os.close(fd)
            raise self._refuse(
                "a second name of another file (a hard link)"
                if stat.S_ISREG(opened.st_mode)
                else "not a regular file"
            )
        return fd

    def _unlockable(self) -> OutputLock:
        print(
            f"[WARNING] {self.path.parent} cannot be locked on this file system: a second "
            "run into it at the same time would not be refused.",
            file=sys.stderr,
        )
        return self

    def acquire(self) -> OutputLock:
        """Take the lock, or raise :class:`RunLockedError`; say when it was taken over
        or cannot be taken here. A lock file that is a link or not a regular file is
        never opened (:class:`UnsafeLockError`)."""
        if fcntl is None:
            return self._unlockable()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = self._open()
            before = self._holder(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                who = f"process {before}" if before else "another process"
                raise RunLockedError(
                    f"{self.path.parent} is in use: {who} is training into it "
                    f"({self.path} is locked). Wait for that run to end, or choose "
                    "another output folder",
                    who,
                ) from None
            except OSError:  # e.g. ENOLCK: this file system has no flock
                os.close(fd)
                return self._unlockable()
            try:
                same = os.fstat(fd).st_ino == os.lstat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:  # not a file that its last holder removed while we opened it
                break
            os.close(fd)
        self.fd, self.locked = fd, True
        if before is not None and before != os.getpid():
            self.took_over = before  # a clean exit removes the file: that run died
            print(f"[INFO] {self.path} was left by process {before}, which has ended.")
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
        return self

    def release(self) -> None:
        """Give the lock up (removing its file)."""
        if self.fd is None:
            return
        try:
            os.remove(self.path)  # while still holding it, so no one is in between
        except FileNotFoundError:
            pass
        os.close(self.fd)
        self.fd, self.locked = None, False

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


# --- One run's folder, as the CLI fills it ------------------------------------------------------


def optional_step(what: str, step: Callable[[], Any]) -> None:
    """Run ``step``; if it fails, print one warning that the run itself is unchanged."""
    try:
        step()
    except Exception as error:  # noqa: BLE001  (whatever failed, the run is saved)
        print(
            f"[WARNING] {what} failed ({type(error).__name__}: {error}); the run itself "
            "is saved and its status is unchanged.",
            file=sys.stderr,
        )


def describe_error(error: BaseException) -> str:
    """One line for the error that stopped a run (a full disk said plainly)."""
    if isinstance(error, OSError) and error.strerror:
        where = f" while writing {error.filename}" if error.filename else ""
        return f"{error.strerror}{where}: free some space (or fix the folder)."
    return str(error)


class Kept(NamedTuple):
    """What :meth:`Run.keep_stopped` kept of a stopped run: its ``record`` as saved, a
    ``sentence`` saying what was kept, and whether they come ``from_checkpoint`` (else
    from results.json, the checkpoint being damaged, missing or behind it)."""

    record: dict
    sentence: str
    from_checkpoint: bool


class Run:
    """One run's folder: its record (id, model, data, options, status), its model and the
    class names, saved together as ``model.pth`` and ``results.json``."""

    def __init__(self, run_dir: Path, record: dict, model: nn.Module, img_size: int):
        self.dir, self.record, self.model = run_dir, record, model
        try:  # what the run writes goes into this folder, even if it is moved
            self.folder: HeldFolder | None = HeldFolder(run_dir)
        except OSError:  # another machine's rank, which writes nothing
            self.folder = None
        self.img_size = img_size
        self.class_names: list[str] | None = None  # known once the data is prepared
        self.extra = {"img_size": img_size, "dataset": record["data"]}
        self.title = f"{record['model']} on {shown(record['data'])}"

    def write_results(self, record: dict, results: dict) -> None:
        """Write ``results.json`` alone (no model yet, or none to save)."""
        write_json(self.dir / RESULTS, record | results)

    def save(self, record: dict, results: dict) -> None:
        """Save ``model.pth`` and ``results.json`` as a pair (:func:`save_pair`)."""
        save_pair(
            self.dir,
            lambda folder: save_model(
                self.model,
                folder,
                MODEL,
                class_names=self.class_names,
                extra=self.extra | record,
            ),
            record,
            results,
        )

    def finish(
        self,
        record: dict,
        results: dict,
        log: Callable[[dict, dict], None] | None = None,
    ) -> None:
        """The optional steps after a save: the curves, ``log(record, results)`` (e.g. to
        MLflow), the ``latest`` pointer. Each failure is a warning and changes nothing in
        the saved run."""
        if results.get("train_loss"):
            optional_step("Plotting loss_curves.png", lambda: self._plot(results))
        if log is not None:
            optional_step("Logging to MLflow", lambda: log(record, results))
        if self.in_place():  # else the path names another folder now
            optional_step(
                "Updating the 'latest' pointer", lambda: update_latest(self.dir)
            )

    def in_place(self) -> bool:
        """Whether the run folder's path still names the folder the run writes into."""
        return self.folder is None or self.folder.in_place()

    def _plot(self, results: dict) -> None:
        figure = plot_loss_curves(results, title=self.title)
        image = io.BytesIO()
        try:
            figure.savefig(image, format="png", dpi=100)
        finally:
            plt.close(figure)
        atomic_write(self.dir / "loss_curves.png", lambda f: f.write(image.getvalue()))

    def _saved_record(self) -> dict:
        """``results.json`` as it is now, or {} when it cannot be read."""
        try:
            with open_file(self.dir / RESULTS) as f:
                saved = json.loads(f.read())
        except (OSError, ValueError):
            return {}
        return saved if isinstance(saved, dict) else {}

    def _keep_saved(self, saved: dict, stop: dict, why: str) -> Kept:
        """Mark ``saved`` (results.json, the last good record) with the ``stop``'s
        status, its results left as they are: the checkpoint (``why``) has fewer
        epochs."""
        record = {"epochs_completed": 0} | saved | stop
        problem = None
        if saved:  # an unreadable results.json is left alone too
            with signals_held():
                try:
                    write_json(self.dir / RESULTS, record)
                except OSError as error:
                    problem = error.strerror or str(error)
        marked = (
            f"marked {stop['status']}"
            if problem is None
            else f"marking it {stop['status']} failed ({problem})"
        )
        sentence = (
            f"{self.dir / CHECKPOINT_NAME} {why}, so what was trained since "
            f"{RESULTS} was last saved is lost; {self.dir / RESULTS} keeps the last "
            f"good record ({record['epochs_completed']} epoch(s)), {marked}. Put "
            f"back a good copy of {CHECKPOINT_NAME} to continue, or start a new run"
        )
        return Kept(record, sentence, from_checkpoint=False)

    def keep_stopped(self, error: BaseException) -> Kept:
        """Save the epochs completed before ``error`` stopped the run (from the engine's
        checkpoint) and mark the run interrupted (a KeyboardInterrupt) or failed; return
        what was kept. Finished epochs are never lost to a checkpoint that is damaged,
        missing or older than ``results.json``: that record is then kept as it is, only
        its status changed."""
        interrupted = isinstance(error, KeyboardInterrupt)
        stop = {"status": "interrupted" if interrupted else "failed"}
        if not interrupted:
            stop["error"] = describe_error(error)
        last = self._saved_record()
        try:
            checkpoint = read_checkpoint(self.dir)
        except ValueError:
            return self._keep_saved(last, stop, "is damaged (it cannot be read)")
        epochs = checkpoint["epoch"] if checkpoint is not None else 0
        recorded = last.get("epochs_completed", 0)
        if isinstance(recorded, int) and epochs < recorded:
            why = f"holds {epochs} epoch(s)" if epochs else "is missing"
            return self._keep_saved(last, stop, why)
        record = self.record | stop | {"epochs_completed": epochs}
        problem, saved = None, False
        results = checkpoint["results"] if checkpoint is not None else {}
        with signals_held():
            try:
                if epochs and self.class_names is not None:
                    self.model.load_state_dict(checkpoint["model"])
                    self.save(record, results)
                    saved = True
                    self.finish(record, results)
                else:
                    self.write_results(record, results)
            except OSError as save_error:
                problem = save_error.strerror or str(save_error)
                with contextlib.suppress(OSError):  # at least the status, if it fits
                    self.write_results(record, results)
        status = record["status"]
        if not epochs:
            kept = (
                f"no epoch was complete; {self.dir / RESULTS} marks the run {status}"
                if problem is None
                else f"no epoch was complete, and marking the run {status} failed "
                f"({problem})"
            )
        elif saved:
            where = f"{self.dir}/" if self.in_place() else "the run's own folder"
            kept = (
                f"saved epoch {epochs}'s checkpoint and the results so far (marked "
                f"{status}) to {where}"
            )
        elif problem is None:  # a resumed run that stopped before training again
            kept = f"its {epochs} earlier epoch(s) in {self.dir}/ are kept (marked {status})"
        else:
            kept = (
                f"epoch {epochs}'s training state is in "
                f"{self.dir / CHECKPOINT_NAME}, but saving model.pth failed too "
                f"({problem})"
            )
        return Kept(record, kept, from_checkpoint=True)
