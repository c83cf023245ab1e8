"""HTTP(S) fetching through ``requests``, with the rules it lacks: a checked status and
length, a deadline on the whole transfer, a stall rule, a size cap, and redirects to
public http(s) addresses only.

Every refusal is a :class:`FetchError` holding the cause and what to do;
:func:`~vitbook.data.download.download_data` names the URL.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import ipaddress
import socket
import threading
import time
import urllib.parse
from pathlib import Path

import requests
import urllib3
from tqdm.auto import tqdm

__all__ = ["FetchError", "Limits", "fetch", "format_size"]

_CHUNK = 1 << 16
_MAX_REDIRECTS = 10  # urllib's limit, which the downloads had before requests (30)


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
    ``speed_time`` seconds (requests has no stall rule)."""

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


def _missed_deadline(limits: Limits, received: int) -> FetchError:
    return FetchError(
        f"it did not finish within its deadline of {limits.deadline:g} s "
        f"({format_size(received)} received)",
        "The server is too slow or stalled; try again later, or pass a longer "
        "deadline=.",
    )


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


def _redirect_guard(session: requests.Session, allow_private: bool):
    """A response hook refusing a redirect to anything but http(s), or to a private
    address unless ``allow_private``: a public URL must not lead the download to this
    computer's or its network's services (requests follows any http(s) redirect)."""

    def check(response: requests.Response, **kwargs) -> requests.Response:
        location = session.get_redirect_target(response)
        if location is None:
            return response
        target = urllib.parse.urljoin(response.url, location)
        parts = urllib.parse.urlsplit(target)
        if parts.scheme.lower() not in ("http", "https"):
            response.close()
            raise FetchError(
                f"Redirection to url '{target}' is refused: only http:// and https:// "
                "addresses are followed",
                "Check the URL; nothing was kept.",
            )
        if not allow_private and parts.hostname and _is_private(parts.hostname):
            response.close()
            raise FetchError(
                f"it redirects to {parts.hostname}, a loopback, private or link-local "
                "address",
                "If you trust that server, pass allow_private_redirects=True. Nothing "
                "was kept.",
            )
        return response

    return check


def fetch(
    url: str,
    target: Path,
    limits: Limits,
    max_size: int,
    auth: tuple[bytes, bytes] | None = None,
) -> None:
    """Stream ``url`` into ``target`` (with HTTP basic ``auth``, which requests sends to
    that host only), checking the status, the announced length, the ``max_size``, the
    ``deadline`` (seconds for the whole transfer) and the stall rule."""
    end = time.monotonic() + limits.deadline
    transfer = _Transfer(limits)
    with requests.Session() as session:
        session.max_redirects = _MAX_REDIRECTS
        session.hooks["response"].append(_redirect_guard(session, limits.allow_private))
        try:
            with _get_by(end, session, url, auth, limits) as response:
                expected = _expected_length(response, max_size)
                _stream(response, target, transfer, expected, max_size, end)
        except (requests.RequestException, urllib3.exceptions.HTTPError) as e:
            raise _transfer_error(e, limits, transfer.received, end) from e


def _get_by(
    end: float,
    session: requests.Session,
    url: str,
    auth: tuple[bytes, bytes] | None,
    limits: Limits,
) -> requests.Response:
    """``session``'s streamed GET of ``url``, its headers read by ``end`` (a
    ``time.monotonic()`` value); its body is read by the caller."""
    # requests bounds each wait, never the whole request, so a server that trickles its
    # headers would hold it: it runs in a daemon thread, abandoned at the deadline.
    done: concurrent.futures.Future = concurrent.futures.Future()
    connect = max(0.001, min(limits.timeout, end - time.monotonic()))

    def get() -> None:
        try:
            response = session.get(
                url,
                auth=auth,
                stream=True,
                timeout=(connect, limits.timeout),
                headers={"Accept-Encoding": "identity"},  # the file's bytes, as stored
            )
        except BaseException as e:  # handed to the caller
            done.set_exception(e)
        else:
            done.set_result(response)

    threading.Thread(target=get, name=f"fetch {url}", daemon=True).start()
    try:
        concurrent.futures.wait([done], timeout=max(0.0, end - time.monotonic()))
    except BaseException:  # such as KeyboardInterrupt: the response is not wanted
        done.add_done_callback(_close_response)
        raise
    if not done.done():
        done.add_done_callback(_close_response)  # whenever it comes
        raise _missed_deadline(limits, 0)
    return done.result()


def _close_response(done: concurrent.futures.Future) -> None:
    if done.exception() is None:
        done.result().close()


def _expected_length(response: requests.Response, max_size: int) -> int | None:
    """The response's announced length (None without one), after checking its status
    and that the length is a number that fits ``max_size``."""
    if response.status_code != 200:
        raise FetchError(
            f"HTTP status {response.status_code} ({response.reason})",
            "Check the URL, or try again later.",
        )
    announced = response.headers.get("Content-Length")
    if announced is None:
        return None
    # urllib3 silently ignores a Content-Length that is not a number: it is named here
    if not (announced.strip().isascii() and announced.strip().isdigit()):
        raise FetchError(
            f"the server sent an invalid Content-Length ({announced!r}), not a size in "
            "bytes",
            "The server is at fault; try again later, or tell the site's owner.",
        )
    expected = int(announced)
    if expected > max_size:
        raise _too_large(f"the server announces {format_size(expected)}", max_size)
    return expected


def _stream(
    response: requests.Response,
    target: Path,
    transfer: _Transfer,
    expected: int | None,
    max_size: int,
    end: float,
) -> None:
    """Copy the response's body into ``target`` with a progress bar, stopping at a stall,
    at the deadline ``end`` or past ``max_size``. urllib3 stops a body shorter than its
    Content-Length (IncompleteRead)."""
    with (
        open(target, "wb") as f,
        tqdm(total=expected, unit="B", unit_scale=True, desc=target.name[:30]) as bar,
    ):
        # read1, not iter_content: that waits for a whole chunk, hiding a trickle
        while chunk := response.raw.read1(_CHUNK):
            if transfer.add(len(chunk)):
                raise _stalled(transfer.limits, transfer.received)
            if time.monotonic() >= end:
                raise _missed_deadline(transfer.limits, transfer.received)
            if transfer.received > max_size:
                raise _too_large(
                    f"it sends more than {format_size(max_size)}", max_size
                )
            f.write(chunk)
            bar.update(len(chunk))


def _innermost(error: BaseException) -> BaseException:
    """The exception that requests and urllib3 wrapped (a MaxRetryError's reason, a
    ProtocolError's argument, the cause of a ``raise ... from``)."""
    for _ in range(10):  # a few layers at most; never a cycle
        inner = getattr(error, "reason", None)
        if not isinstance(inner, BaseException):
            inner = next((a for a in error.args if isinstance(a, BaseException)), None)
        inner = inner or error.__cause__
        if inner is None:
            break
        error = inner
    return error


def _transfer_error(
    e: requests.RequestException | urllib3.exceptions.HTTPError,
    limits: Limits,
    received: int,
    end: float,
) -> FetchError:
    """The FetchError that explains ``e``, a network error raised while fetching."""
    inner = _innermost(e)
    if time.monotonic() >= end:
        return _missed_deadline(limits, received)
    if isinstance(e, requests.TooManyRedirects):
        return FetchError(
            f"it redirects more than {_MAX_REDIRECTS} times", "Check the URL."
        )
    if isinstance(e, requests.exceptions.InvalidHeader):
        return FetchError(
            f"the server sent an invalid header ({inner})",
            "The server is at fault; try again later, or tell the site's owner.",
        )
    if isinstance(e, ValueError):  # requests' InvalidURL: a malformed address
        return FetchError(f"this is not a URL ({inner})", "Pass an http(s):// address.")
    broken = (
        requests.exceptions.ChunkedEncodingError,
        urllib3.exceptions.ProtocolError,
    )
    if isinstance(e, broken):  # raised while reading the body
        return FetchError(
            f"the connection broke off mid-transfer ({type(inner).__name__})",
            "The download was interrupted; run it again.",
        )
    return FetchError(
        f"network error ({getattr(inner, 'strerror', None) or inner})",
        "Check your connection and retry.",
    )
