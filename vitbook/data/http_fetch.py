"""HTTP(S) fetching with safety rules: a checked status, a time limit on every read and on
the whole transfer, a stall rule, a size cap, redirects to public addresses only, and basic
authentication that a redirect does not carry on.

Every refusal is a :class:`FetchError` holding the cause and what to do;
:func:`~vitbook.data.download.download_data` names the URL.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import http.client
import io
import ipaddress
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from tqdm.auto import tqdm

__all__ = ["FetchError", "Limits", "fetch", "format_size"]

_CHUNK = 1 << 16
# errno values that mean the disk, not the network, failed.
_DISK_ERRNOS = {
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EROFS,
    errno.EACCES,
    errno.EPERM,
    errno.EFBIG,
}


class FetchError(RuntimeError):
    """A fetch failed: ``FetchError(cause, todo)``, the cause and what to do."""


def format_size(n: int) -> str:
    """``n`` bytes for a message: MB from 100 kB, else bytes."""
    return f"{n / 1e6:,.1f} MB" if n >= 1e5 else f"{n:,} bytes"


def _too_large(what: str, max_size: int) -> FetchError:
    return FetchError(
        f"{what}, above max_size={max_size:,} bytes",
        "If you expect that much, pass a larger max_size=; nothing was kept.",
    )


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

    def __init__(self, allow_private: bool):
        super().__init__()
        self.allow_private = allow_private

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        host = urllib.parse.urlsplit(
            urllib.parse.urljoin(req.full_url, newurl)
        ).hostname
        if not self.allow_private and host and _is_private(host):
            raise FetchError(
                f"it redirects to {host}, a loopback, private or link-local address",
                "If you trust that server, pass allow_private_redirects=True. Nothing "
                "was kept.",
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _opener(deadline: float, allow_private: bool) -> urllib.request.OpenerDirector:
    """urllib's opener for http(s) only (redirects, proxies), every read ending by
    ``deadline``; no file://, ftp:// or data: handlers, even through a redirect, and no
    redirect to a private address unless ``allow_private``."""
    opener = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.ProxyHandler(),
        urllib.request.UnknownHandler(),
        urllib.request.HTTPDefaultErrorHandler(),
        _PublicRedirectHandler(allow_private),
        urllib.request.HTTPErrorProcessor(),
        _HTTPHandler(deadline),
        _HTTPSHandler(deadline),
    ):
        opener.add_handler(handler)
    return opener


@dataclasses.dataclass(frozen=True)
class Limits:
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

    def __init__(self, limits: Limits):
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


def _stalled(limits: Limits, received: int) -> FetchError:
    return FetchError(
        f"it stalled: under {limits.min_speed:g} bytes/s for {limits.speed_time:g} s "
        f"({format_size(received)} received)",
        "The server is too slow or stalled; try again later (from Python, "
        "download_data's min_speed= and speed_time= relax the rule). Nothing was kept.",
    )


def _request(url: str, authorization: str | None) -> urllib.request.Request:
    """A GET of ``url`` with basic authentication, which a redirect does not carry on."""
    request = urllib.request.Request(url)
    if authorization is not None:
        request.add_unredirected_header("Authorization", authorization)
    return request


def fetch(
    url: str,
    target: Path,
    limits: Limits,
    max_size: int,
    authorization: str | None = None,
) -> None:
    """Stream ``url`` into ``target``, checking the status, the announced length, the
    ``max_size``, the ``deadline`` (seconds for the whole transfer) and the stall rule."""
    end = time.monotonic() + limits.deadline
    transfer, expected = _Transfer(limits), None
    try:
        opener = _opener(end, limits.allow_private)
        request = _request(url, authorization)
        with opener.open(request, timeout=limits.timeout) as response:
            expected = _expected_length(response, max_size)
            _stream(response, target, transfer, expected, max_size)
    except (http.client.HTTPException, OSError, ValueError) as e:
        error = _transfer_error(e, limits, transfer.received, end)
        if error is None:
            raise  # the disk, not the network
        raise error from e
    if expected is not None and transfer.received != expected:
        raise FetchError(
            f"the connection closed after {transfer.received} of {expected} bytes",
            "The download was interrupted; run it again.",
        )


def _expected_length(response, max_size: int) -> int | None:
    """The response's announced length (None without one), after checking its status
    and that the length fits ``max_size``."""
    status = getattr(response, "status", 200)
    if status != 200:
        raise FetchError(f"HTTP status {status}", "Check the URL and try again later.")
    expected = response.headers.get("Content-Length")
    expected = int(expected) if expected is not None else None
    if expected is not None and expected > max_size:
        raise _too_large(f"the server announces {format_size(expected)}", max_size)
    return expected


def _stream(
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
                raise _stalled(transfer.limits, transfer.received)
            if transfer.received > max_size:
                raise _too_large(
                    f"it sends more than {format_size(max_size)}", max_size
                )
            f.write(chunk)
            bar.update(len(chunk))


def _transfer_error(
    e: Exception, limits: Limits, received: int, end: float
) -> FetchError | None:
    """The FetchError that explains ``e``, raised while fetching; None for an
    error of the disk, which is raised as it is."""
    if isinstance(e, urllib.error.HTTPError):
        return FetchError(f"HTTP status {e.code} ({e.reason})", "Check the URL.")
    if isinstance(e, ValueError):  # urllib's "unknown url type", a malformed address
        return FetchError(f"this is not a URL ({e})", "Pass an http(s):// address.")
    if isinstance(e, OSError) and (e.filename is not None or e.errno in _DISK_ERRNOS):
        return None
    if time.monotonic() >= end:
        return FetchError(
            f"it did not finish within its deadline of {limits.deadline:g} s "
            f"({format_size(received)} received)",
            "The server is too slow or stalled; try again later, or pass a longer "
            "deadline=.",
        )
    if isinstance(e, http.client.HTTPException):  # IncompleteRead, a bad response
        return FetchError(
            f"the connection broke off mid-transfer ({type(e).__name__})",
            "The download was interrupted; run it again.",
        )
    return FetchError(
        f"network error ({getattr(e, 'reason', e)})",
        "Check your connection and retry.",
    )
