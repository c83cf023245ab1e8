"""Safe downloads: checked HTTP status, a timeout, an optional SHA-256, atomic extraction.

Nothing half-written is ever left in place: a file is streamed into a temporary folder beside
its destination, checked, extracted there and only then moved into place. A temporary left
by a process that was killed is removed by the next call. Every failure is a
:class:`DownloadError` that names the URL, the cause and what to do.
"""

from __future__ import annotations

import errno
import glob
import hashlib
import http.client
import os
import re
import shutil
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
import zlib
from pathlib import Path

from tqdm.auto import tqdm

from .paths import data_dir as default_data_dir
from .settings import is_offline

CHUNK = 1 << 16
# Inside a downloaded folder: the SHA-256 of the file it came from (hidden: never a class).
RECORD = ".source.sha256"
# errno values that mean the disk, not the network, failed.
_DISK_ERRNOS = {
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EROFS,
    errno.EACCES,
    errno.EPERM,
    errno.EFBIG,
}
# What tempfile appends to a prefix (8 characters), after ``<pid>-`` in this module's names.
_TEMP_SUFFIX = re.compile(r"(?:(\d+)-)?[a-z0-9_]{8}")


class DownloadError(RuntimeError):
    """A download or its verification failed; the message says what to do."""


def _fail(url: str, cause: str, todo: str) -> DownloadError:
    return DownloadError(f"Could not download {url}: {cause}. {todo}")


def sha256_of(path: str | Path) -> str:
    """The SHA-256 hex digest of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def temporary_prefix(name: str) -> str:
    """The prefix of this process's temporary files for ``name``: ``.<name>-<pid>-``."""
    return f".{name}-{os.getpid()}-"


def _still_in_use(path: Path, pid: int | None) -> bool:
    if pid is None:  # written before temporaries carried a process id
        return False
    if pid == os.getpid():
        return True
    if os.name != "posix":  # no cheap liveness test: trust anything younger than a day
        return time.time() - path.stat().st_mtime < 86400
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True


def remove_stale_temporaries(folder: str | Path, name: str) -> list[Path]:
    """Remove the ``.<name>-*`` temporaries in ``folder`` left by processes that have ended.

    Downloads and :func:`going_modular.utils.save_model` write to such names and rename the
    result into place; a kill -9 in between leaves them behind. Temporaries of a process that
    is still running are kept. Returns what was removed.
    """
    folder, prefix = Path(folder), f".{name}-"
    removed = []
    for path in sorted(folder.glob(glob.escape(prefix) + "*")):
        match = _TEMP_SUFFIX.fullmatch(path.name[len(prefix) :])
        if match is None:  # another name that starts alike, e.g. ".food-extra-..."
            continue
        pid = int(match.group(1)) if match.group(1) else None
        try:
            if _still_in_use(path, pid):
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError:  # vanished meanwhile, or not ours to remove: leave it
            continue
        removed.append(path)
    return removed


def _fetch(url: str, target: Path, timeout: float) -> None:
    """Stream ``url`` into ``target``, checking the status and the announced length."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            status = getattr(response, "status", 200)
            if status != 200:
                raise _fail(
                    url, f"HTTP status {status}", "Check the URL and try again later."
                )
            expected = response.headers.get("Content-Length")
            expected = int(expected) if expected is not None else None
            received = 0
            with (
                open(target, "wb") as f,
                tqdm(
                    total=expected, unit="B", unit_scale=True, desc=target.name[:30]
                ) as bar,
            ):
                for chunk in iter(lambda: response.read(CHUNK), b""):
                    f.write(chunk)
                    received += len(chunk)
                    bar.update(len(chunk))
    except urllib.error.HTTPError as e:
        raise _fail(url, f"HTTP status {e.code} ({e.reason})", "Check the URL.") from e
    except ValueError as e:  # urllib's "unknown url type"
        raise _fail(
            url, f"this is not a URL ({e})", "Pass an http(s):// address."
        ) from e
    except http.client.HTTPException as e:  # IncompleteRead, a malformed response, ...
        raise _fail(
            url,
            f"the connection broke off mid-transfer ({type(e).__name__})",
            "The download was interrupted; run it again.",
        ) from e
    except OSError as e:
        if e.filename is not None or e.errno in _DISK_ERRNOS:  # the disk, not the net
            raise
        reason = getattr(e, "reason", e)
        if "unknown url type" in str(reason):
            raise _fail(
                url, f"this is not a URL ({reason})", "Pass an http(s) address."
            ) from e
        raise _fail(
            url, f"network error ({reason})", "Check your connection and retry."
        ) from e
    if expected is not None and received != expected:
        raise _fail(
            url,
            f"the connection closed after {received} of {expected} bytes",
            "The download was interrupted; run it again.",
        )


def _not_a_zip(archive: Path, url: str) -> DownloadError:
    with open(archive, "rb") as f:
        head = f.read(512)
    if b"<html" in head.lower() or head.lstrip().lower().startswith(b"<!doctype"):
        return _fail(
            url,
            "the server sent a web page (HTML), not a zip archive",
            "The URL probably leads to a download or login page; use the file's direct "
            "link. Nothing was kept.",
        )
    return _fail(
        url,
        f"the file is not a valid zip archive (it starts with {head[:16]!r})",
        "It was discarded; check the URL and try again.",
    )


def _safe_extract(archive: Path, destination: Path, url: str) -> None:
    """Extract a zip, refusing any member that would land outside ``destination``."""
    if not zipfile.is_zipfile(archive):
        raise _not_a_zip(archive, url)
    root = destination.resolve()
    try:
        with zipfile.ZipFile(archive) as zf:
            for member in zf.infolist():
                target = (root / member.filename).resolve()
                if target != root and root not in target.parents:
                    raise _fail(
                        url,
                        f"the archive member {member.filename!r} would be written outside "
                        f"{destination.name}",
                        "The archive is unsafe; it was not extracted.",
                    )
            zf.extractall(root)
    except (zipfile.BadZipFile, zlib.error, EOFError) as e:
        raise _fail(
            url,
            f"the zip archive is corrupt ({e})",
            "It was discarded; download it again, and if that fails too, the file "
            "upstream is broken.",
        ) from e
    except (NotImplementedError, RuntimeError) as e:  # unknown compression, encryption
        if isinstance(e, DownloadError):
            raise
        raise _fail(
            url,
            f"the zip archive cannot be extracted here ({e})",
            "Extract it by hand into the data folder, or use another copy.",
        ) from e


def _verify_existing(folder: Path, url: str, sha256: str) -> None:
    """Check an existing ``folder`` against ``sha256`` through the digest recorded in it."""
    record = folder / RECORD
    recorded = record.read_text().strip() if record.is_file() else None
    if recorded is None:
        raise _fail(
            url,
            f"{folder} exists but no SHA-256 was recorded when it was made, so it cannot "
            f"be checked against {sha256}",
            "Delete the folder to download and verify it again, or call without sha256 "
            "to use it as it is.",
        )
    if recorded != sha256.lower():
        raise _fail(
            url,
            f"{folder} came from a file with SHA-256 {recorded}, not the expected {sha256}",
            "Delete the folder to download the expected file.",
        )


def download_data(
    source: str,
    destination: str,
    remove_source: bool = True,
    *,
    sha256: str | None = None,
    data_dir: str | Path | None = None,
    timeout: float = 30.0,
) -> Path:
    """Download ``source`` into ``data_dir/destination`` and return that folder.

    A ``.zip`` is extracted into the folder; any other file is stored in it. If the folder
    already exists and is not empty, nothing is downloaded; with ``sha256`` it is still
    checked, against the digest recorded in it (``.source.sha256``) when it was made.
    ``remove_source=False`` keeps the downloaded zip beside the folder.

    Raises:
        DownloadError: offline (``BOOK_OFFLINE=1``), a bad HTTP status, a network error,
            an interrupted transfer, a wrong checksum, an unsafe or corrupt archive, or a
            folder that cannot be written. In every case nothing is left in ``data_dir``.
    """
    if not destination or Path(destination).name != destination or destination in ".":
        raise _fail(
            source,
            f"destination {destination!r} is not a plain folder name",
            "Pass a name such as 'pizza_steak_sushi'; data_dir= chooses where it goes.",
        )
    root = Path(data_dir) if data_dir is not None else default_data_dir()
    folder = root / destination
    try:
        if root.is_dir():
            remove_stale_temporaries(root, destination)
        if folder.is_dir() and any(folder.iterdir()):
            if sha256 is not None:
                _verify_existing(folder, source, sha256)
            print(f"[INFO] {folder} already exists, skipping download.")
            return folder
        if is_offline():
            raise _fail(
                source,
                "BOOK_OFFLINE=1 forbids network access",
                "Unset it to download.",
            )
        root.mkdir(parents=True, exist_ok=True)
        workdir = Path(tempfile.mkdtemp(prefix=temporary_prefix(destination), dir=root))
        try:
            _download_into(
                source, destination, root, workdir, sha256, remove_source, timeout
            )
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    except OSError as e:
        raise _fail(
            source,
            f"could not write to {root} ({e.strerror or e})",
            "Check that the folder is writable and the disk has free space, or pass "
            "data_dir= to download elsewhere.",
        ) from e
    print(f"[INFO] Ready: {folder}")
    return folder


def _download_into(
    source: str,
    destination: str,
    root: Path,
    workdir: Path,
    sha256: str | None,
    remove_source: bool,
    timeout: float,
) -> None:
    """Fetch, verify and extract ``source`` in ``workdir``, then move it into place."""
    filename = Path(source.split("?")[0]).name or "download"
    archive = workdir / filename
    print(f"[INFO] Downloading {source} ...")
    _fetch(source, archive, timeout)
    actual = sha256_of(archive)
    if sha256 is not None and actual != sha256.lower():
        raise _fail(
            source,
            f"SHA-256 mismatch (expected {sha256}, got {actual})",
            "The file is corrupt or has changed upstream; it was discarded.",
        )
    staged = workdir / "contents"
    staged.mkdir()
    if zipfile.is_zipfile(archive) or filename.endswith(".zip"):
        _safe_extract(archive, staged, source)
    else:
        shutil.copy2(archive, staged / filename)
    (staged / RECORD).write_text(actual + "\n")
    folder = root / destination
    if folder.exists():  # an empty leftover folder
        folder.rmdir()
    os.replace(staged, folder)
    if not remove_source and filename.endswith(".zip"):
        os.replace(archive, root / filename)
