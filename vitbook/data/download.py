"""Safe downloads: checked HTTP status, time limits, an optional SHA-256, atomic extraction.

Nothing half-written is ever left in place: a file is streamed into a temporary folder beside
its destination, checked, and extracted into a staging folder that is then renamed into place
(:func:`~vitbook.data.files.atomic_folder`). A temporary left by a process that was
killed is removed by the next call. Only http(s) addresses are fetched. The transfer and its
rules (deadlines, the stall rule, redirects, the size cap) are in ``http_fetch``; the checks
on an archive before it is extracted (members, zip bombs, free space) in ``archives``. Here
are the entry point, its argument checks and the folder's life. Every failure is a
:class:`DownloadError` that names the URL, the cause and what to do.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import re
import urllib.parse
from pathlib import Path

from vitbook.data.archives import ArchiveError, unpack
from vitbook.data.files import (
    atomic_folder,
    remove_stale_temporaries,
    sha256_of,
    temporary_folder,
)
from vitbook.data.http_fetch import FetchError, Limits, fetch
from vitbook.data.network import OFFLINE, is_offline
from vitbook.data.paths import data_dir as default_data_dir

__all__ = ["RECORD", "DownloadError", "download_data"]

# Inside a downloaded folder: the SHA-256 of the file it came from (hidden: never a class).
RECORD = ".source.sha256"


class DownloadError(RuntimeError):
    """A download or its verification failed; the message says what to do."""


# A URL's ``user:password@`` part, after its scheme if it has one.
_USERINFO = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)?[^/@\s]+@")


def _fail(url: str, cause: str, todo: str) -> DownloadError:
    """The error for ``url`` (shown without a password), its cause and what to do."""
    shown = _USERINFO.sub(r"\1", url)
    return DownloadError(f"Could not download {shown}: {cause}. {todo}")


def _check_source(source: str) -> None:
    """Refuse anything but an http(s) address, before any work."""
    try:
        scheme = urllib.parse.urlsplit(source).scheme.lower() if source else ""
    except ValueError:  # such as an unclosed [ of an IPv6 address
        scheme = ""
    if not scheme or "://" not in source:
        raise _fail(source, "this is not a URL", "Pass an http(s):// address.")
    if scheme not in ("http", "https"):
        raise _fail(
            source,
            f"only http:// and https:// addresses are downloaded, not {scheme}://",
            "For a file already on this computer, copy or extract it into the data "
            "folder yourself.",
        )


def _split_credentials(source: str) -> tuple[str, tuple[bytes, bytes] | None]:
    """``source`` without a ``user:password@`` part (the only form that is ever shown),
    and that part's user and password in UTF-8 for HTTP basic authentication (None
    without one)."""
    parts = urllib.parse.urlsplit(source)
    if "@" not in parts.netloc:
        return source, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    shown = urllib.parse.urlunsplit(parts._replace(netloc=hostport))
    user, _, password = userinfo.partition(":")
    pair = (urllib.parse.unquote(user), urllib.parse.unquote(password))
    return shown, (pair[0].encode(), pair[1].encode())


def _check_destination(url: str, destination: str) -> None:
    """Refuse a destination that is not one plain folder name (``..``, a path, NUL)."""
    if (
        not isinstance(destination, str)
        or destination in ("", ".", "..")
        or "\0" in destination
        or Path(destination).name != destination
        or "/" in destination
        or os.sep in destination
    ):
        raise _fail(
            url,
            f"destination {destination!r} is not a plain folder name",
            "Pass a name such as 'pizza_steak_sushi'; data_dir= chooses where it goes.",
        )


def _check_sha256(url: str, sha256: str | None) -> str | None:
    """``sha256`` in lower case without surrounding white space; refused unless it is 64
    hexadecimal digits."""
    if sha256 is None:
        return None
    digest = str(sha256).strip().lower()
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise _fail(
            url,
            f"sha256={sha256!r} is not a SHA-256 (64 hexadecimal digits)",
            "Copy the digest again, e.g. from the output of sha256sum.",
        )
    return digest


# The floor each limit must be above (``min_speed`` may also be 0: no stall rule).
_FLOORS = dict(
    timeout=0, deadline=0, min_speed=0, speed_time=0, max_size=0, max_ratio=1
)


def _check_numbers(url: str, values: dict[str, float]) -> None:
    """Refuse a limit that is not a finite number above its floor in ``_FLOORS``."""
    for name, value in values.items():
        low = _FLOORS[name]
        if isinstance(value, bool) or not (
            isinstance(value, int | float)
            and math.isfinite(value)
            and (value > low or (name == "min_speed" and value == low))
        ):
            floor = "of 0 or more" if name == "min_speed" else f"above {low}"
            raise _fail(
                url,
                f"{name}={value!r} is not a number {floor}",
                f"Pass a positive {name}= (the default is usually right).",
            )


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


@dataclasses.dataclass(frozen=True)
class _Job:
    """One checked call of :func:`download_data`: what to fetch and the rules it obeys."""

    url: str  # without its credentials
    auth: tuple[bytes, bytes] | None  # HTTP basic, from the URL's ``user:password@``
    sha256: str | None
    limits: Limits
    max_size: int
    max_ratio: float
    remove_source: bool


def download_data(
    source: str,
    destination: str,
    remove_source: bool = True,
    *,
    sha256: str | None = None,
    data_dir: str | Path | None = None,
    timeout: float = 30.0,
    deadline: float = 7200.0,
    min_speed: float = 1024.0,
    speed_time: float = 60.0,
    max_size: int = 16 << 30,
    max_ratio: float = 100.0,
    allow_private_redirects: bool = False,
) -> Path:
    """Download ``source`` into ``data_dir/destination`` and return that folder.

    A ``.zip`` is extracted into the folder; any other file is stored in it. If the folder
    already exists and is not empty, nothing is downloaded; with ``sha256`` it is still
    checked, against the digest recorded in it (``.source.sha256``) when it was made.
    ``remove_source=False`` keeps the downloaded zip beside the folder.

    Only ``http://`` and ``https://`` addresses are fetched; a ``user:password@`` in the
    address is sent as HTTP basic authentication (to that host only) and never printed. A
    redirect to a loopback, private or link-local address is refused unless
    ``allow_private_redirects``. ``timeout`` bounds each wait for data, ``deadline`` the
    whole transfer (seconds), and a transfer under ``min_speed`` bytes/s for ``speed_time``
    seconds is abandoned as stalled (curl's ``--speed-limit``/``--speed-time``).
    ``max_size`` caps the bytes downloaded and a zip's unpacked size; a zip unpacking to
    more than ``max_ratio`` times its size (above 16 MB) is refused as a likely zip bomb.
    Both are checked from the zip's directory before anything is extracted.

    Raises:
        DownloadError: offline (:func:`~vitbook.data.network.set_offline`), a bad
            URL or argument, a bad HTTP status, a network error, a missed deadline, a
            stall, an interrupted transfer, an empty body or a web page instead of the
            file, a wrong checksum, an unsafe, corrupt or too large archive, or a folder
            that cannot be written. In every case nothing is left in ``data_dir``.
    """
    _check_source(source)
    url, auth = _split_credentials(source)
    _check_destination(url, destination)
    sha256 = _check_sha256(url, sha256)
    numbers = dict(timeout=timeout, deadline=deadline, min_speed=min_speed)
    numbers |= dict(speed_time=speed_time, max_size=max_size, max_ratio=max_ratio)
    _check_numbers(url, numbers)
    limits = Limits(timeout, deadline, min_speed, speed_time, allow_private_redirects)
    job = _Job(url, auth, sha256, limits, max_size, max_ratio, remove_source)
    root = Path(data_dir) if data_dir is not None else default_data_dir()
    try:
        return _download_folder(job, root, destination)
    except (FetchError, ArchiveError) as e:  # name the URL; keep the cause
        raise _fail(url, *e.args) from e.__cause__
    except OSError as e:
        raise _unwritable(url, root, e) from e


def _unwritable(url: str, root: Path, e: OSError) -> DownloadError:
    return _fail(
        url,
        f"could not write to {root} ({e.strerror or e})",
        "Check that the folder is writable and the disk has free space, or pass "
        "data_dir= to download elsewhere.",
    )


def _download_folder(job: _Job, root: Path, destination: str) -> Path:
    """``root/destination``: checked if it is there already, else downloaded into place
    (see :func:`download_data`)."""
    folder = root / destination
    if root.is_dir():
        remove_stale_temporaries(root, destination)
    if folder.is_dir() and any(folder.iterdir()):
        if job.sha256 is not None:
            _verify_existing(folder, job.url, job.sha256)
        print(f"[INFO] {folder} already exists, skipping download.")
        return folder
    if is_offline():
        raise _fail(
            job.url,
            f"the library is {OFFLINE}, which forbids network access",
            "Call set_offline(False) (the book: unset BOOK_OFFLINE; the command line: "
            "leave out --offline) to download.",
        )
    with (
        temporary_folder(root, destination) as workdir,
        atomic_folder(folder) as staged,
    ):
        archive = _download_into(job, workdir, staged)
        if not job.remove_source and archive.suffix == ".zip":
            os.replace(archive, root / archive.name)
    print(f"[INFO] Ready: {folder}")
    return folder


# The longest local file name kept as the URL gives it (bytes): most file systems refuse
# names above 255 bytes, eCryptfs above 143.
_MAX_NAME = 128


def _local_name(url: str) -> str:
    """The URL's file name ("download" without one); one longer than ``_MAX_NAME``
    bytes is cut and made unique with a hash of the whole, keeping a short suffix."""
    name = Path(urllib.parse.urlsplit(url).path).name
    if name in ("", ".", ".."):
        return "download"
    if len(name.encode()) <= _MAX_NAME:
        return name
    suffix = Path(name).suffix if len(Path(name).suffix.encode()) <= 16 else ""
    digest = hashlib.sha256(name.encode()).hexdigest()[:12]
    room = _MAX_NAME - len(digest) - 1 - len(suffix.encode())
    short = f"{name.encode()[:room].decode(errors='ignore')}-{digest}{suffix}"
    print(f"[INFO] The URL's file name has {len(name)} characters; saved as {short}")
    return short


def _download_into(job: _Job, workdir: Path, staged: Path) -> Path:
    """Fetch the job's URL into ``workdir`` and verify it, then unpack it into ``staged``
    with its SHA-256 recorded; return the downloaded file."""
    archive = workdir / _local_name(job.url)
    print(f"[INFO] Downloading {job.url} ...")
    fetch(job.url, archive, job.limits, job.max_size, job.auth)
    if archive.stat().st_size == 0:
        raise _fail(
            job.url,
            "the server sent an empty file (0 bytes)",
            "Check the URL, or try again later; nothing was kept.",
        )
    actual = sha256_of(archive)
    if job.sha256 is not None and actual != job.sha256:
        raise _fail(
            job.url,
            f"SHA-256 mismatch (expected {job.sha256}, got {actual})",
            "The file is corrupt or has changed upstream; it was discarded.",
        )
    unpack(archive, staged, job.max_size, job.max_ratio)
    (staged / RECORD).write_text(actual + "\n")
    return archive
