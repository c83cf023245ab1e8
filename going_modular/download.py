"""Safe downloads: checked HTTP status, a timeout, an optional SHA-256, atomic extraction.

Nothing half-written is ever left in place: a file is streamed into a temporary name beside
its destination, checked, extracted into a temporary folder and only then moved into place.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

from tqdm.auto import tqdm

from .paths import data_dir as default_data_dir
from .settings import is_offline

CHUNK = 1 << 16


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
    except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
        if isinstance(e, DownloadError):
            raise
        reason = getattr(e, "reason", e)
        raise _fail(
            url, f"network error ({reason})", "Check your connection and retry."
        ) from e
    if expected is not None and received != expected:
        raise _fail(
            url,
            f"the connection closed after {received} of {expected} bytes",
            "The download was interrupted; run the cell again.",
        )


def _safe_extract(archive: Path, destination: Path, url: str) -> None:
    """Extract a zip, refusing any member that would land outside ``destination``."""
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
    except zipfile.BadZipFile as e:
        raise _fail(
            url, "the file is not a valid zip archive", "Delete it and retry."
        ) from e


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
    already exists and is not empty, nothing is downloaded. ``sha256`` verifies the file.
    ``remove_source=False`` keeps the downloaded zip beside the folder.

    Raises:
        DownloadError: offline (``BOOK_OFFLINE=1``), a bad HTTP status, a network error,
            an interrupted transfer, a wrong checksum or an unsafe or corrupt archive. In
            every case nothing is left behind in ``data_dir``.
    """
    root = Path(data_dir) if data_dir is not None else default_data_dir()
    folder = root / destination
    if folder.is_dir() and any(folder.iterdir()):
        print(f"[INFO] {folder} already exists, skipping download.")
        return folder
    if is_offline():
        raise _fail(
            source, "BOOK_OFFLINE=1 forbids network access", "Unset it to download."
        )

    root.mkdir(parents=True, exist_ok=True)
    filename = Path(source.split("?")[0]).name or "download"
    workdir = Path(tempfile.mkdtemp(prefix=f".{destination}-", dir=root))
    try:
        archive = workdir / filename
        print(f"[INFO] Downloading {source} ...")
        _fetch(source, archive, timeout)
        if sha256 is not None:
            actual = sha256_of(archive)
            if actual != sha256.lower():
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
        if folder.exists():  # an empty leftover folder
            folder.rmdir()
        os.replace(staged, folder)
        if not remove_source and filename.endswith(".zip"):
            os.replace(archive, root / filename)
        print(f"[INFO] Ready: {folder}")
        return folder
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
