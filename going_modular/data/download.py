"""Safe downloads: checked HTTP status, time limits, an optional SHA-256, atomic extraction.

Nothing half-written is ever left in place: a file is streamed into a temporary folder beside
its destination, checked, and extracted into a staging folder that is then renamed into place
(:func:`~going_modular.files.atomic_folder`). A temporary left by a process that was killed is
removed by the next call. A download cannot hang (each read
has a timeout and the whole transfer a deadline) or fill the disk (the size is capped, and a
zip's declared size and compression ratio are checked before anything is extracted). Only
http(s) addresses are fetched. Every failure is a :class:`DownloadError` that names the URL,
the cause and what to do.
"""

from __future__ import annotations

import base64
import dataclasses
import errno
import functools
import http.client
import io
import ipaddress
import math
import os
import re
import shutil
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from pathlib import Path

from tqdm.auto import tqdm

from going_modular.data.files import (
    atomic_folder,
    remove_stale_temporaries,
    sha256_of,
    temporary_folder,
)
from going_modular.data.network import OFFLINE, is_offline
from going_modular.data.paths import data_dir as default_data_dir

__all__ = ["RECORD", "DownloadError", "download_data"]

_CHUNK = 1 << 16
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
# Below this many unpacked bytes a zip's compression ratio is not checked (harmless).
_RATIO_FLOOR = 16 << 20


class DownloadError(RuntimeError):
    """A download or its verification failed; the message says what to do."""


# A URL's ``user:password@`` part, after its scheme if it has one.
_USERINFO = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)?[^/@\s]+@")


def _fail(url: str, cause: str, todo: str) -> DownloadError:
    """The error for ``url`` (shown without a password), its cause and what to do."""
    shown = _USERINFO.sub(r"\1", url)
    return DownloadError(f"Could not download {shown}: {cause}. {todo}")


class _DeadlineReader(io.RawIOBase):
    """A socket's reads, each given at most ``timeout`` seconds and none past ``deadline``
    (a ``time.monotonic()`` value): a server that trickles bytes cannot hold a download."""

    def __init__(self, sock: socket.socket, deadline: float, timeout: float):
        super().__init__()
        self._sock, self._deadline, self._timeout = sock, deadline, timeout
        # Unbuffered, and counted by the socket: it stays open until this is closed.
        self._raw = sock.makefile("rb", buffering=0)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the download's deadline has passed")
        self._sock.settimeout(min(self._timeout, remaining))
        return self._raw.readinto(buffer)

    def close(self) -> None:
        self._raw.close()
        super().close()


class _DeadlineSocket:
    """A connected socket whose responses are read through a :class:`_DeadlineReader`."""

    def __init__(self, sock: socket.socket, deadline: float, timeout: float):
        self._sock, self._deadline, self._timeout = sock, deadline, timeout

    def makefile(self, mode: str = "rb", *args, **kwargs) -> io.BufferedReader:
        return io.BufferedReader(
            _DeadlineReader(self._sock, self._deadline, self._timeout)
        )

    def __getattr__(self, name: str):
        return getattr(self._sock, name)


class _DeadlineMixin:
    """An ``http.client`` connection whose every read ends by ``deadline``."""

    def __init__(self, *args, deadline: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.deadline = deadline

    def connect(self) -> None:
        read_timeout = self.timeout
        self.timeout = max(0.001, min(read_timeout, self.deadline - time.monotonic()))
        super().connect()
        self.timeout = read_timeout
        self.sock = _DeadlineSocket(self.sock, self.deadline, read_timeout)


class _HTTPConnection(_DeadlineMixin, http.client.HTTPConnection):
    pass


class _HTTPSConnection(_DeadlineMixin, http.client.HTTPSConnection):
    pass


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: float):
        super().__init__()
        self.deadline = deadline

    def http_open(self, req):
        connection = functools.partial(_HTTPConnection, deadline=self.deadline)
        return self.do_open(connection, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: float):
        super().__init__()
        self.deadline = deadline

    def https_open(self, req):
        connection = functools.partial(_HTTPSConnection, deadline=self.deadline)
        return self.do_open(connection, req, context=self._context)


def _is_private(host: str) -> bool:
    """Whether ``host`` is, or resolves to, a loopback, private, link-local or otherwise
    non-public address (a cloud's metadata service, a router, this computer)."""
    try:
        found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return False  # unresolvable: the connection fails with its own error
    for *_, address in found:
        ip = ipaddress.ip_address(address[0].split("%")[0])
        if not ip.is_global or ip.is_multicast:
            return True
    return False


class _PublicRedirectHandler(urllib.request.HTTPRedirectHandler):
    """Follows redirects to public addresses only, unless ``allow_private``: a public URL
    must not lead the download to this computer's or its network's services."""

    def __init__(self, url: str, allow_private: bool):
        super().__init__()
        self.url, self.allow_private = url, allow_private

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        host = urllib.parse.urlsplit(
            urllib.parse.urljoin(req.full_url, newurl)
        ).hostname
        if not self.allow_private and host and _is_private(host):
            raise _fail(
                self.url,
                f"it redirects to {host}, a loopback, private or link-local address",
                "If you trust that server, pass allow_private_redirects=True. Nothing "
                "was kept.",
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _opener(
    deadline: float, url: str, allow_private: bool
) -> urllib.request.OpenerDirector:
    """urllib's opener for http(s) only (redirects, proxies), every read ending by
    ``deadline``; no file://, ftp:// or data: handlers, even through a redirect, and no
    redirect to a private address unless ``allow_private``."""
    opener = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.ProxyHandler(),
        urllib.request.UnknownHandler(),
        urllib.request.HTTPDefaultErrorHandler(),
        _PublicRedirectHandler(url, allow_private),
        urllib.request.HTTPErrorProcessor(),
        _HTTPHandler(deadline),
        _HTTPSHandler(deadline),
    ):
        opener.add_handler(handler)
    return opener


@dataclasses.dataclass(frozen=True)
class _Limits:
    """How long and how slow a transfer may be: each wait for data (``timeout``), the whole
    transfer (``deadline``), and the stall rule, curl's ``--speed-limit``/``--speed-time``:
    under ``min_speed`` bytes/s for ``speed_time`` seconds gives up."""

    timeout: float
    deadline: float
    min_speed: float
    speed_time: float
    allow_private: bool


class _Transfer:
    """The bytes received so far, and the stall rule watched in windows of
    ``speed_time`` seconds."""

    def __init__(self, limits: _Limits):
        self.limits, self.received = limits, 0
        self.window_start, self.window_received = time.monotonic(), 0

    def add(self, n: int) -> bool:
        """Count ``n`` more bytes; True when the last window, now over, averaged under
        ``min_speed``."""
        self.received += n
        now = time.monotonic()
        if now - self.window_start < self.limits.speed_time:
            return False
        got = self.received - self.window_received
        slow = got < self.limits.min_speed * (now - self.window_start)
        self.window_start, self.window_received = now, self.received
        return slow


def _stalled(url: str, limits: _Limits, received: int) -> DownloadError:
    return _fail(
        url,
        f"it stalled: under {limits.min_speed:g} bytes/s for {limits.speed_time:g} s "
        f"({_size(received)} received)",
        "The server is too slow or stalled; try again later, or pass a lower "
        "min_speed= or a longer speed_time=. Nothing was kept.",
    )


def _request(url: str, authorization: str | None) -> urllib.request.Request:
    """A GET of ``url`` with basic authentication, which a redirect does not carry on."""
    request = urllib.request.Request(url)
    if authorization is not None:
        request.add_unredirected_header("Authorization", authorization)
    return request


def _fetch(
    url: str,
    target: Path,
    limits: _Limits,
    max_size: int,
    authorization: str | None = None,
) -> None:
    """Stream ``url`` into ``target``, checking the status, the announced length, the
    ``max_size``, the ``deadline`` (seconds for the whole transfer) and the stall rule."""
    end = time.monotonic() + limits.deadline
    transfer, expected = _Transfer(limits), None
    try:
        opener = _opener(end, url, limits.allow_private)
        request = _request(url, authorization)
        with opener.open(request, timeout=limits.timeout) as response:
            expected = _expected_length(url, response, max_size)
            _stream(url, response, target, transfer, expected, max_size)
    except (http.client.HTTPException, OSError, ValueError) as e:
        error = _transfer_error(url, e, limits, transfer.received, end)
        if error is None:
            raise  # the disk, not the network
        raise error from e
    if expected is not None and transfer.received != expected:
        raise _fail(
            url,
            f"the connection closed after {transfer.received} of {expected} bytes",
            "The download was interrupted; run it again.",
        )


def _expected_length(url: str, response, max_size: int) -> int | None:
    """The response's announced length (None without one), after checking its status
    and that the length fits ``max_size``."""
    status = getattr(response, "status", 200)
    if status != 200:
        raise _fail(url, f"HTTP status {status}", "Check the URL and try again later.")
    expected = response.headers.get("Content-Length")
    expected = int(expected) if expected is not None else None
    if expected is not None and expected > max_size:
        raise _too_large(url, f"the server announces {_size(expected)}", max_size)
    return expected


def _stream(
    url: str,
    response,
    target: Path,
    transfer: _Transfer,
    expected: int | None,
    max_size: int,
) -> None:
    """Copy the response's body into ``target`` with a progress bar, stopping at a stall
    or past ``max_size``."""
    with (
        open(target, "wb") as f,
        tqdm(total=expected, unit="B", unit_scale=True, desc=target.name[:30]) as bar,
    ):
        while chunk := response.read1(_CHUNK):
            if transfer.add(len(chunk)):
                raise _stalled(url, transfer.limits, transfer.received)
            if transfer.received > max_size:
                raise _too_large(url, f"it sends more than {_size(max_size)}", max_size)
            f.write(chunk)
            bar.update(len(chunk))


def _transfer_error(
    url: str, e: Exception, limits: _Limits, received: int, end: float
) -> DownloadError | None:
    """The DownloadError that explains ``e``, raised while fetching ``url``; None for an
    error of the disk, which is raised as it is."""
    if isinstance(e, urllib.error.HTTPError):
        return _fail(url, f"HTTP status {e.code} ({e.reason})", "Check the URL.")
    if isinstance(e, ValueError):  # urllib's "unknown url type", a malformed address
        return _fail(url, f"this is not a URL ({e})", "Pass an http(s):// address.")
    if isinstance(e, OSError) and (e.filename is not None or e.errno in _DISK_ERRNOS):
        return None
    if time.monotonic() >= end:
        return _fail(
            url,
            f"it did not finish within its deadline of {limits.deadline:g} s "
            f"({_size(received)} received)",
            "The server is too slow or stalled; try again later, or pass a longer "
            "deadline=.",
        )
    if isinstance(e, http.client.HTTPException):  # IncompleteRead, a bad response
        return _fail(
            url,
            f"the connection broke off mid-transfer ({type(e).__name__})",
            "The download was interrupted; run it again.",
        )
    return _fail(
        url,
        f"network error ({getattr(e, 'reason', e)})",
        "Check your connection and retry.",
    )


def _size(n: int) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 1e5 else f"{n:,} bytes"


def _too_large(url: str, what: str, max_size: int) -> DownloadError:
    return _fail(
        url,
        f"{what}, above max_size={max_size:,} bytes",
        "If you expect that much, pass a larger max_size=; nothing was kept.",
    )


def _looks_like_html(head: bytes) -> bool:
    """Whether a file's first bytes are a web page's (after a UTF-8 byte order mark)."""
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip().lower()
    return text.startswith((b"<!doctype", b"<html"))


def _web_page(url: str, expected: str) -> DownloadError:
    return _fail(
        url,
        f"the server sent a web page (HTML), not {expected}",
        "The URL probably leads to a download or login page; use the file's direct "
        "link. Nothing was kept.",
    )


def _not_a_zip(archive: Path, url: str) -> DownloadError:
    with open(archive, "rb") as f:
        head = f.read(512)
    if _looks_like_html(head) or b"<html" in head.lower():
        return _web_page(url, "a zip archive")
    return _fail(
        url,
        f"the file is not a valid zip archive (it starts with {head[:16]!r})",
        "It was discarded; check the URL and try again.",
    )


def _safe_extract(
    archive: Path, destination: Path, url: str, max_size: int, max_ratio: float
) -> None:
    """Extract a zip into ``destination``, checked first: no member may land outside it,
    and the sizes in its central directory must fit ``max_size``, ``max_ratio`` (unpacked
    / packed bytes) and the free disk space. ``zipfile`` stops each member at that
    declared size, so a member whose header lies ends as a CRC error, not a full disk."""
    if not zipfile.is_zipfile(archive):
        raise _not_a_zip(archive, url)
    root = destination.resolve()
    try:
        with zipfile.ZipFile(archive) as zf:
            members = zf.infolist()
            for member in members:
                target = (root / member.filename).resolve()
                if target != root and root not in target.parents:
                    raise _fail(
                        url,
                        f"the archive member {member.filename!r} would be written outside "
                        f"{destination.name}",
                        "The archive is unsafe; it was not extracted.",
                    )
            total = sum(member.file_size for member in members)
            _check_unpacked_size(
                url, total, archive.stat().st_size, root, max_size, max_ratio
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


def _check_unpacked_size(
    url: str, total: int, packed: int, root: Path, max_size: int, max_ratio: float
) -> None:
    """Refuse a zip whose declared contents are too large, too compressed or bigger than
    the free disk space, before anything is extracted."""
    if total > max_size:
        raise _too_large(url, f"the archive would unpack to {_size(total)}", max_size)
    if total > _RATIO_FLOOR and total > max_ratio * packed:
        raise _fail(
            url,
            f"the archive would unpack {_size(packed)} into {_size(total)}, a compression "
            f"ratio of {total / packed:,.0f} above max_ratio={max_ratio:g} (a zip bomb?)",
            "If you trust it, pass a larger max_ratio=; nothing was extracted.",
        )
    free = shutil.disk_usage(root).free
    if total > free:
        raise _fail(
            url,
            f"the archive would unpack to {_size(total)} but {root} has {_size(free)} free",
            "Free some disk space, or pass data_dir= to download elsewhere.",
        )


def _check_source(source: str) -> None:
    """Refuse anything but an http(s) address, before any work."""
    scheme = urllib.parse.urlsplit(source).scheme.lower() if source else ""
    if not scheme or "://" not in source:
        raise _fail(source, "this is not a URL", "Pass an http(s):// address.")
    if scheme not in ("http", "https"):
        raise _fail(
            source,
            f"only http:// and https:// addresses are downloaded, not {scheme}://",
            "For a file already on this computer, copy or extract it into the data "
            "folder yourself.",
        )


def _split_credentials(source: str) -> tuple[str, str | None]:
    """``source`` without a ``user:password@`` part (the only form that is ever shown),
    and the HTTP basic ``Authorization`` value made from that part (None without one)."""
    parts = urllib.parse.urlsplit(source)
    if "@" not in parts.netloc:
        return source, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    shown = urllib.parse.urlunsplit(parts._replace(netloc=hostport))
    user, _, password = userinfo.partition(":")
    pair = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
    return shown, "Basic " + base64.b64encode(pair.encode()).decode("ascii")


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


def _check_numbers(url: str, **values: tuple[float, float]) -> None:
    """Refuse a limit that is not a finite number above its floor, ``name=(value, low)``
    (a floor of 0 for ``min_speed`` itself allows 0: no stall rule)."""
    for name, (value, low) in values.items():
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
        DownloadError: offline (:func:`~going_modular.data.network.set_offline`), a bad
            URL or argument, a bad HTTP status, a network error, a missed deadline, a
            stall, an interrupted transfer, an empty body or a web page instead of the
            file, a wrong checksum, an unsafe, corrupt or too large archive, or a folder
            that cannot be written. In every case nothing is left in ``data_dir``.
    """
    _check_source(source)
    url, authorization = _split_credentials(source)
    _check_destination(url, destination)
    sha256 = _check_sha256(url, sha256)
    _check_numbers(
        url,
        timeout=(timeout, 0),
        deadline=(deadline, 0),
        min_speed=(min_speed, 0),
        speed_time=(speed_time, 0),
        max_size=(max_size, 0),
        max_ratio=(max_ratio, 1),
    )
    limits = _Limits(timeout, deadline, min_speed, speed_time, allow_private_redirects)
    root = Path(data_dir) if data_dir is not None else default_data_dir()
    try:
        folder = _download_folder(
            (url, authorization),
            root,
            destination,
            sha256,
            limits,
            max_size,
            max_ratio,
            remove_source,
        )
    except OSError as e:
        raise _fail(
            url,
            f"could not write to {root} ({e.strerror or e})",
            "Check that the folder is writable and the disk has free space, or pass "
            "data_dir= to download elsewhere.",
        ) from e
    return folder


def _download_folder(
    source: tuple[str, str | None],
    root: Path,
    destination: str,
    sha256: str | None,
    limits: _Limits,
    max_size: int,
    max_ratio: float,
    remove_source: bool,
) -> Path:
    """``root/destination``: checked if it is there already, else downloaded into place
    (see :func:`download_data`)."""
    url, folder = source[0], root / destination
    if root.is_dir():
        remove_stale_temporaries(root, destination)
    if folder.is_dir() and any(folder.iterdir()):
        if sha256 is not None:
            _verify_existing(folder, url, sha256)
        print(f"[INFO] {folder} already exists, skipping download.")
        return folder
    if is_offline():
        raise _fail(
            url,
            f"the library is {OFFLINE}, which forbids network access",
            "Call set_offline(False), or unset BOOK_OFFLINE for the book, to download.",
        )
    with (
        temporary_folder(root, destination) as workdir,
        atomic_folder(folder) as staged,
    ):
        archive = _download_into(
            source, workdir, staged, sha256, limits, max_size, max_ratio
        )
        if not remove_source and archive.suffix == ".zip":
            os.replace(archive, root / archive.name)
    print(f"[INFO] Ready: {folder}")
    return folder


def _download_into(
    source: tuple[str, str | None],
    workdir: Path,
    staged: Path,
    sha256: str | None,
    limits: _Limits,
    max_size: int,
    max_ratio: float,
) -> Path:
    """Fetch ``source`` (the URL and its authorization) into ``workdir`` and verify it,
    then extract it (a zip) or copy it into ``staged``, with its SHA-256 recorded; return
    the downloaded file."""
    url, authorization = source
    filename = Path(urllib.parse.urlsplit(url).path).name
    filename = "download" if filename in ("", ".", "..") else filename
    archive = workdir / filename
    print(f"[INFO] Downloading {url} ...")
    _fetch(url, archive, limits, max_size, authorization)
    if archive.stat().st_size == 0:
        raise _fail(
            url,
            "the server sent an empty file (0 bytes)",
            "Check the URL, or try again later; nothing was kept.",
        )
    actual = sha256_of(archive)
    if sha256 is not None and actual != sha256:
        raise _fail(
            url,
            f"SHA-256 mismatch (expected {sha256}, got {actual})",
            "The file is corrupt or has changed upstream; it was discarded.",
        )
    if zipfile.is_zipfile(archive) or filename.endswith(".zip"):
        _safe_extract(archive, staged, url, max_size, max_ratio)
    else:
        with open(archive, "rb") as f:
            if _looks_like_html(f.read(512)) and not filename.endswith(
                (".htm", ".html")
            ):
                raise _web_page(url, f"the file {filename} it names")
        shutil.copy2(archive, staged / filename)
    (staged / RECORD).write_text(actual + "\n")
    return archive
