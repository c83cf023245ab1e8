"""download_data against a real HTTP server on 127.0.0.1: success and every failure mode."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import shutil
import struct
import sys
import threading
import time
import traceback
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

import pytest

from vitbook.data import archives
from vitbook.data.download import DownloadError, download_data
from vitbook.data.files import sha256_of


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, content in members.items():
            zf.writestr(name, content)
    return buffer.getvalue()


def _corrupt_member() -> bytes:
    """A zip whose directory is fine but whose member's stored bytes were altered."""
    data = bytearray(_zip({"a.txt": b"pizza " * 100}))
    start = data.index(b"pizza")
    data[start : start + 5] = b"PIZZA"
    return bytes(data)


def _deflated(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, content in members.items():
            zf.writestr(name, content)
    return buffer.getvalue()


def _lying_header() -> bytes:
    """A zip whose directory declares 10 bytes for a member that unpacks to 100 KB."""
    data = bytearray(_deflated({"a.bin": bytes(100_000)}))
    struct.pack_into("<I", data, 22, 10)  # local header's uncompressed size
    struct.pack_into("<I", data, data.index(b"PK\x01\x02") + 24, 10)  # directory's
    return bytes(data)


GOOD = _zip({"train/pizza/a.txt": b"pizza", "test/sushi/b.txt": b"sushi"})
BOMB = _deflated({"zeros.bin": bytes(32 << 20)})  # 32 MB in about 32 KB
LYING = _lying_header()
CSV = b"label,text\n1,pizza\n0,sushi\n"
EVIL = _zip({"ok.txt": b"fine", "../escaped.txt": b"gotcha"})
BAD_CRC = _corrupt_member()
CLASH = _zip({"a": b"a file", "a/b": b"a file in a folder a"})
CLASH_REVERSED = _zip({"a/b": b"a file in a folder a", "a": b"a file"})
LONG_NAME = "n" * 300 + ".csv"  # 304 characters: above a file system's 255 bytes
HTML = b"<!DOCTYPE html><html><body>Sign in to download</body></html>"
USER, PASSWORD = "reader", "p@ss word"  # sent as basic authentication to /secret.zip
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.path == "/good.zip":
            self._send(GOOD)
        elif self.path == "/evil.zip":
            self._send(EVIL)
        elif self.path == "/notzip.zip":
            self._send(b"this is not a zip archive")
        elif self.path == "/page.zip":
            self._send(HTML)
        elif self.path == "/badcrc.zip":
            self._send(BAD_CRC)
        elif self.path == "/clash.zip":
            self._send(CLASH)
        elif self.path == "/clash-reversed.zip":
            self._send(CLASH_REVERSED)
        elif self.path == f"/{LONG_NAME}":
            self._send(CSV)
        elif self.path.startswith("/length/"):  # /length/abc/x.zip: that Content-Length
            self.send_response(200)
            self.send_header("Content-Length", unquote(self.path.split("/")[2]))
            self.end_headers()
            self.wfile.write(GOOD)
        elif self.path == "/bomb.zip":
            self._send(BOMB)
        elif self.path == "/lying.zip":
            self._send(LYING)
        elif self.path == "/data.csv":
            self._send(CSV)
        elif self.path == "/login.csv":
            self._send(HTML)
        elif self.path == "/bom.csv":  # a web page behind a UTF-8 byte order mark
            self._send(b"\xef\xbb\xbf" + HTML)
        elif self.path == "/hang-up.zip":  # as when the client closed first
            raise ConnectionResetError(104, "Connection reset by peer")
        elif self.path == "/empty.csv":
            self._send(b"")
        elif self.path == "/secret.zip":
            if self.headers.get("Authorization") == BASIC:
                self._send(GOOD)
            else:
                self.send_error(401, "Unauthorized")
        elif self.path.startswith("/to-"):  # /to-127.0.0.1/good.zip redirects there
            host = self.path.split("/")[1].removeprefix("to-")
            self.send_response(302)
            location = f"http://{host}:{self.server.server_address[1]}/good.zip"
            self.send_header("Location", location)
            self.end_headers()
        elif self.path == "/endless.csv":  # no Content-Length, 64 KB chunks for ~1 MB
            self.send_response(200)
            self.end_headers()
            for _ in range(16):
                self.wfile.write(b"x" * 65536)
        elif self.path == "/file.zip":
            self.send_response(302)
            self.send_header("Location", "file:///etc/passwd")
            self.end_headers()
        elif self.path.startswith("/trickle"):  # one byte every 0.25 s, 8 s at most
            if self.path == "/trickle-body.zip":
                self.send_response(200)
                self.send_header("Content-Length", "1000")
                self.end_headers()
            for _ in range(32):
                try:
                    self.wfile.write(b"H")
                    self.wfile.flush()
                except OSError:  # the client gave up
                    return
                time.sleep(0.25)
        elif self.path == "/chunked-cut.zip":  # no Content-Length: only IncompleteRead
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"%x\r\n" % len(GOOD) + GOOD[:10])
            self.wfile.flush()
            self.close_connection = True
        elif self.path == "/interrupted.zip":
            self.send_response(200)
            self.send_header("Content-Length", str(len(GOOD)))
            self.end_headers()
            self.wfile.write(GOOD[: len(GOOD) // 2])
            self.wfile.flush()
            self.close_connection = True
        else:
            self.send_error(404, "Not Found")

    def _send(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class _Server(ThreadingHTTPServer):
    """The test server: a client that hangs up (a download giving up on a trickle, as
    it should) is expected and silent; any other error in a handler is kept, and fails
    the module's tests at the end, instead of a traceback printed on stderr."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.errors: list[str] = []

    def handle_error(self, request, client_address):
        error = sys.exc_info()[1]
        if not isinstance(error, ConnectionResetError | BrokenPipeError):
            self.errors.append("".join(traceback.format_exception(error)))


@pytest.fixture(scope="module")
def server():
    httpd = _Server()
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    assert httpd.errors == []


def _leftovers(root):
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def test_good_zip_with_checksum(server, online, tmp_path):
    folder = download_data(
        f"{server}/good.zip",
        "food",
        sha256=hashlib.sha256(GOOD).hexdigest(),
        data_dir=tmp_path,
    )
    assert folder == tmp_path / "food"
    assert (folder / "train" / "pizza" / "a.txt").read_bytes() == b"pizza"
    assert (folder / "test" / "sushi" / "b.txt").read_bytes() == b"sushi"
    assert _leftovers(tmp_path) == ["food"]  # no zip, no temporary folder


def test_existing_folder_is_not_downloaded_again(server, online, tmp_path, capsys):
    download_data(f"{server}/good.zip", "food", data_dir=tmp_path)
    download_data(
        f"{server}/missing.zip", "food", data_dir=tmp_path
    )  # would 404 if fetched
    assert "skipping download" in capsys.readouterr().out


def test_keep_source_zip(server, online, tmp_path):
    download_data(f"{server}/good.zip", "food", remove_source=False, data_dir=tmp_path)
    assert _leftovers(tmp_path) == ["food", "good.zip"]
    assert sha256_of(tmp_path / "good.zip") == hashlib.sha256(GOOD).hexdigest()


@pytest.mark.parametrize(
    ("path", "sha256", "message"),
    [
        ("/good.zip", "0" * 64, "SHA-256 mismatch"),
        ("/missing.zip", None, "HTTP status 404"),
        ("/evil.zip", None, "outside"),
        ("/interrupted.zip", None, "interrupted|network error"),
        ("/notzip.zip", None, "not a valid zip"),
        ("/page.zip", None, r"a web page \(HTML\), not a zip archive.*direct link"),
        ("/badcrc.zip", None, r"the zip archive is corrupt \(Bad CRC-32"),
        ("/chunked-cut.zip", None, r"broke off mid-transfer \(IncompleteRead\)"),
    ],
)
def test_failures_leave_nothing_behind(server, online, tmp_path, path, sha256, message):
    with pytest.raises(DownloadError, match=message) as info:
        download_data(f"{server}{path}", "food", sha256=sha256, data_dir=tmp_path)
    assert f"{server}{path}" in str(info.value)  # the error names the URL
    assert _leftovers(tmp_path) == []
    assert not (tmp_path.parent / "escaped.txt").exists()


def test_unreachable_host_names_the_cause(online, tmp_path):
    with pytest.raises(DownloadError, match="network error"):
        download_data("http://127.0.0.1:9/none.zip", "x", data_dir=tmp_path, timeout=2)
    assert _leftovers(tmp_path) == []


def test_offline_refuses_before_touching_the_network(server, tmp_path):
    with pytest.raises(
        DownloadError,
        match=r"offline \(vitbook\.data\.network\.set_offline\(True\)",
    ):
        download_data(f"{server}/good.zip", "food", data_dir=tmp_path)
    assert _leftovers(tmp_path) == []


def test_existing_folder_is_still_checked_against_a_given_sha256(
    server, online, tmp_path
):
    url, right = f"{server}/good.zip", hashlib.sha256(GOOD).hexdigest()
    download_data(url, "food", data_dir=tmp_path)
    assert download_data(url, "food", sha256=right, data_dir=tmp_path).is_dir()
    with pytest.raises(DownloadError, match=f"came from a file with SHA-256 {right}"):
        download_data(url, "food", sha256="ab" * 32, data_dir=tmp_path)
    (tmp_path / "own" / "x").mkdir(parents=True)  # made by hand: nothing recorded
    with pytest.raises(
        DownloadError, match="no SHA-256 was recorded.*Delete the folder"
    ):
        download_data(url, "own", sha256=right, data_dir=tmp_path)


def test_filesystem_errors_are_download_errors(server, online, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with pytest.raises(DownloadError) as info:
        download_data(f"{server}/good.zip", "food", data_dir=blocker / "data")
    message = str(info.value)
    assert f"{server}/good.zip" in message and "could not write to" in message
    assert "data_dir=" in message


def test_temporaries_of_a_killed_download_are_removed(tmp_path, dead_pid):
    dead = tmp_path / f".food.partial-{dead_pid}-abcd1234"
    ours = tmp_path / f".food.partial-{os.getpid()}-abcd1234"  # a download in progress
    other = tmp_path / ".food-extra.partial-1-abcd1234"  # another destination's name
    backups = [tmp_path / ".food-20240101", tmp_path / ".food-x1y2z3_w"]  # a user's
    for folder in (dead, ours, other, *backups):
        (folder / "contents").mkdir(parents=True)
    (tmp_path / "food" / "train").mkdir(parents=True)
    download_data("http://127.0.0.1:9/food.zip", "food", data_dir=tmp_path)
    assert _leftovers(tmp_path) == sorted(
        p.name for p in (ours, other, *backups, tmp_path / "food")
    )


@pytest.mark.parametrize(
    ("source", "destination", "message"),
    [
        ("", "food", "this is not a URL"),
        ("ftp2://host/x.zip", "food", "only http:// and https://"),
        ("file:///etc/passwd", "food", "not file://.*copy or extract it"),
        ("C:/data/x.zip", "food", "this is not a URL"),
        ("www.example.com/x.zip", "food", "this is not a URL"),
        ("http://[::1/x.zip", "food", "this is not a URL"),
        ("http://127.0.0.1:9/x.zip", "../outside", "not a plain folder name"),
        ("http://127.0.0.1:9/x.zip", "", "not a plain folder name"),
    ],
)
def test_bad_url_or_destination(online, tmp_path, source, destination, message):
    with pytest.raises(DownloadError, match=message):
        download_data(source, destination, data_dir=tmp_path / "data")
    assert not (tmp_path / "outside").exists()


@pytest.mark.parametrize("path", ["/trickle-body.zip", "/trickle-headers.zip"])
def test_a_trickling_server_fails_at_the_deadline(server, online, tmp_path, path):
    """FAIL 10: one byte now and then, each within the read timeout, held the call forever."""
    start = time.monotonic()
    with pytest.raises(
        DownloadError, match=r"deadline of 1.5 s.*pass a longer deadline"
    ):
        download_data(
            f"{server}{path}", "food", data_dir=tmp_path, timeout=3, deadline=1.5
        )
    assert time.monotonic() - start < 3  # at the deadline, not after the server's 8 s
    assert _leftovers(tmp_path) == []


def test_a_zip_bomb_is_refused_before_extraction(server, online, tmp_path, monkeypatch):
    """FAIL 11: a 298 KB zip was extracted to 300 MB."""
    extracted = []
    monkeypatch.setattr(zipfile.ZipFile, "extractall", lambda *a: extracted.append(a))
    with pytest.raises(DownloadError, match=r"ratio of 1,0\d\d above max_ratio=100"):
        download_data(f"{server}/bomb.zip", "food", data_dir=tmp_path)
    with pytest.raises(DownloadError, match=r"unpack to 33.6 MB, above max_size=1,000"):
        download_data(f"{server}/bomb.zip", "food", data_dir=tmp_path, max_size=10**6)
    assert extracted == [] and _leftovers(tmp_path) == []


def test_a_trusted_highly_compressed_zip_can_be_allowed(server, online, tmp_path):
    folder = download_data(
        f"{server}/bomb.zip", "zeros", data_dir=tmp_path, max_ratio=2000
    )
    assert (folder / "zeros.bin").stat().st_size == 32 << 20


def test_a_zip_larger_than_the_free_space_is_refused(
    server, online, tmp_path, monkeypatch
):
    free = {"bytes": 9}  # GOOD unpacks to 10 bytes
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(
        archives.shutil, "disk_usage", lambda path: usage._replace(free=free["bytes"])
    )
    with pytest.raises(
        DownloadError, match=r"unpack to 10 bytes but .* has 9 bytes free"
    ):
        download_data(f"{server}/good.zip", "food", data_dir=tmp_path)
    assert _leftovers(tmp_path) == []
    free["bytes"] = 10
    assert download_data(f"{server}/good.zip", "food", data_dir=tmp_path).is_dir()


def test_a_member_that_unpacks_beyond_its_header_is_stopped(server, online, tmp_path):
    with pytest.raises(DownloadError, match="corrupt.*Bad CRC-32"):
        download_data(f"{server}/lying.zip", "food", data_dir=tmp_path)
    assert _leftovers(tmp_path) == []


def test_downloads_are_capped_in_size(server, online, tmp_path):
    with pytest.raises(DownloadError, match=r"announces 1,000 bytes, above max_size"):
        download_data(
            f"{server}/trickle-body.zip", "food", data_dir=tmp_path, max_size=999
        )
    with pytest.raises(
        DownloadError, match=r"sends more than 0.1 MB, above max_size=100,000"
    ):
        download_data(
            f"{server}/endless.csv", "food", data_dir=tmp_path, max_size=100_000
        )
    assert _leftovers(tmp_path) == []


def test_a_web_page_served_for_a_csv_is_reported(server, online, tmp_path):
    with pytest.raises(
        DownloadError, match=r"a web page \(HTML\), not the file login.csv"
    ):
        download_data(f"{server}/login.csv", "food", data_dir=tmp_path)
    assert _leftovers(tmp_path) == []
    folder = download_data(f"{server}/data.csv", "text", data_dir=tmp_path)
    assert (folder / "data.csv").read_bytes() == CSV


def test_a_redirect_to_a_local_file_is_refused(server, online, tmp_path):
    with pytest.raises(DownloadError, match="Redirection to url 'file:///etc/passwd'"):
        download_data(f"{server}/file.zip", "food", data_dir=tmp_path)
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("timeout", 0),
        ("timeout", float("nan")),
        ("deadline", -1),
        ("deadline", float("inf")),
        ("max_size", 0),
        ("max_ratio", 0.5),
    ],
)
def test_nonsense_limits_are_named(online, tmp_path, option, value):
    with pytest.raises(DownloadError, match=rf"{option}=.* is not a number above"):
        download_data(
            "http://127.0.0.1:9/x.zip", "food", data_dir=tmp_path, **{option: value}
        )


def test_a_stalled_transfer_is_abandoned_before_the_deadline(server, online, tmp_path):
    """Four bytes a second, within every limit but the stall rule's (curl's
    --speed-limit/--speed-time), used to run until the two-hour deadline."""
    start = time.monotonic()
    with pytest.raises(DownloadError, match=r"stalled: under 100 bytes/s for 1 s"):
        download_data(
            f"{server}/trickle-body.zip",
            "food",
            data_dir=tmp_path,
            timeout=3,
            min_speed=100,
            speed_time=1,
        )
    assert time.monotonic() - start < 3
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/bom.csv", r"a web page \(HTML\), not the file bom.csv"),
        ("/empty.csv", r"an empty file \(0 bytes\)"),
    ],
)
def test_an_empty_body_or_a_page_behind_a_bom_is_not_kept(
    server, online, tmp_path, path, message
):
    with pytest.raises(DownloadError, match=message):
        download_data(f"{server}{path}", "text", data_dir=tmp_path)
    assert _leftovers(tmp_path) == []


def test_credentials_in_the_url_are_sent_but_never_shown(
    server, online, tmp_path, capsys
):
    host = server.removeprefix("http://")
    userinfo = f"{USER}:{PASSWORD.replace('@', '%40').replace(' ', '%20')}"
    folder = download_data(
        f"http://{userinfo}@{host}/secret.zip", "food", data_dir=tmp_path
    )
    assert (folder / "train" / "pizza" / "a.txt").read_bytes() == b"pizza"
    with pytest.raises(DownloadError, match="HTTP status 401") as info:
        download_data(f"http://{USER}:wrong@{host}/secret.zip", "x", data_dir=tmp_path)
    shown = capsys.readouterr()
    assert f"{server}/secret.zip" in shown.out + str(info.value)
    for secret in (PASSWORD, "p%40ss", "wrong", USER):
        assert secret not in shown.out + shown.err + str(info.value)
    with pytest.raises(
        DownloadError, match=r"^Could not download ftp://host/x\.zip: only"
    ):
        download_data("ftp://user:secret@host/x.zip", "x", data_dir=tmp_path)


@pytest.mark.parametrize("destination", ["..", "a\0b", "a/b", "."])
def test_a_destination_must_be_a_plain_name(online, tmp_path, destination):
    with pytest.raises(DownloadError, match="is not a plain folder name"):
        download_data("http://127.0.0.1:9/x.zip", destination, data_dir=tmp_path / "d")
    assert not (tmp_path / "d").exists()


def test_a_sha256_is_taken_without_white_space_and_checked_for_form(
    server, online, tmp_path
):
    digest = hashlib.sha256(GOOD).hexdigest().upper() + " \n"
    assert download_data(f"{server}/good.zip", "a", sha256=digest, data_dir=tmp_path)
    with pytest.raises(DownloadError, match=r"sha256='abc' is not a SHA-256"):
        download_data(f"{server}/good.zip", "b", sha256="abc", data_dir=tmp_path)
    assert _leftovers(tmp_path) == ["a"]


@pytest.mark.parametrize("host", ["127.0.0.1", "169.254.169.254", "10.1.2.3"])
def test_a_redirect_to_a_private_address_is_refused(server, online, tmp_path, host):
    with pytest.raises(
        DownloadError, match=f"redirects to {host}, a loopback, private or link-local"
    ):
        download_data(f"{server}/to-{host}/good.zip", "food", data_dir=tmp_path)
    assert _leftovers(tmp_path) == []


def test_a_redirect_to_a_private_address_can_be_allowed(server, online, tmp_path):
    """Loopback is private too: this test's own server is allowed explicitly."""
    folder = download_data(
        f"{server}/to-127.0.0.1/good.zip",
        "food",
        data_dir=tmp_path,
        allow_private_redirects=True,
    )
    assert (folder / "test" / "sushi" / "b.txt").read_bytes() == b"sushi"


def test_a_client_hanging_up_prints_no_traceback(server, online, tmp_path, capfd):
    """The server thread printed a ConnectionResetError traceback into ``make test``."""
    with pytest.raises(DownloadError, match="broke off|network error"):
        download_data(f"{server}/hang-up.zip", "food", data_dir=tmp_path)
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize("length", ["abc", "-5", "5,%206"])
def test_an_invalid_content_length_is_named(server, online, tmp_path, length):
    """It was taken for a bad URL ("this is not a URL (invalid literal for int()") or,
    at -5, for a transfer cut short."""
    with pytest.raises(
        DownloadError, match=r"the server sent an invalid (header \()?Content-Length"
    ):
        download_data(f"{server}/length/{length}/x.zip", "food", data_dir=tmp_path)
    assert _leftovers(tmp_path) == []


def test_a_file_name_too_long_for_the_disk_is_shortened(
    server, online, tmp_path, capsys
):
    """A 304-character name from the URL failed as "could not write to ... check that
    the folder is writable"."""
    folder = download_data(f"{server}/{LONG_NAME}", "text", data_dir=tmp_path)
    (stored,) = folder.glob("*.csv")
    assert stored.read_bytes() == CSV
    assert stored.name.startswith("nnnn") and len(stored.name) <= 128
    assert f"has 304 characters; saved as {stored.name}" in capsys.readouterr().out


@pytest.mark.parametrize("path", ["/clash.zip", "/clash-reversed.zip"])
def test_a_zip_holding_a_file_and_a_folder_of_one_name_is_refused(
    server, online, tmp_path, path
):
    """It was reported as a disk problem: "could not write to ... free space"."""
    with pytest.raises(
        DownloadError, match="holds a file and a folder of the same name, 'a'"
    ):
        download_data(f"{server}{path}", "food", data_dir=tmp_path)
    assert _leftovers(tmp_path) == []
