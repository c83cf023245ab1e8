"""Unpacking a downloaded file into its folder: a zip is checked, then extracted; any other
file is copied, unless it is a web page that the server sent instead.

A zip is checked from its central directory before anything is extracted: no member may
land outside the folder, and the unpacked size must fit the size cap, the compression-ratio
cap (a zip bomb) and the free disk space. Every refusal is an :class:`ArchiveError` holding
the cause and what to do; :func:`~vitbook.data.download.download_data` names the URL.
"""

from __future__ import annotations

import shutil
import zipfile
import zlib
from pathlib import Path

from vitbook.data.http_fetch import format_size

__all__ = ["ArchiveError", "looks_like_html", "unpack"]

# Below this many unpacked bytes a zip's compression ratio is not checked (harmless).
_RATIO_FLOOR = 16 << 20


class ArchiveError(RuntimeError):
    """A downloaded file cannot be unpacked: ``ArchiveError(cause, todo)``."""


def unpack(archive: Path, destination: Path, max_size: int, max_ratio: float) -> None:
    """Extract ``archive`` into ``destination`` if it is a zip (or named ``.zip``), else
    copy it there; refuse a web page that is not named ``.htm``/``.html``."""
    name = archive.name
    if zipfile.is_zipfile(archive) or name.endswith(".zip"):
        _safe_extract(archive, destination, max_size, max_ratio)
        return
    with open(archive, "rb") as f:
        if looks_like_html(f.read(512)) and not name.endswith((".htm", ".html")):
            raise _web_page(f"the file {name} it names")
    shutil.copy2(archive, destination / name)


def looks_like_html(head: bytes) -> bool:
    """Whether a file's first bytes are a web page's (after a UTF-8 byte order mark)."""
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip().lower()
    return text.startswith((b"<!doctype", b"<html"))


def _web_page(expected: str) -> ArchiveError:
    return ArchiveError(
        f"the server sent a web page (HTML), not {expected}",
        "The URL probably leads to a download or login page; use the file's direct "
        "link. Nothing was kept.",
    )


def _not_a_zip(archive: Path) -> ArchiveError:
    with open(archive, "rb") as f:
        head = f.read(512)
    if looks_like_html(head) or b"<html" in head.lower():
        return _web_page("a zip archive")
    return ArchiveError(
        f"the file is not a valid zip archive (it starts with {head[:16]!r})",
        "It was discarded; check the URL and try again.",
    )


def _safe_extract(
    archive: Path, destination: Path, max_size: int, max_ratio: float
) -> None:
    """Extract a zip into ``destination``, checked first: no member may land outside it,
    and the sizes in its central directory must fit ``max_size``, ``max_ratio`` (unpacked
    / packed bytes) and the free disk space. ``zipfile`` stops each member at that
    declared size, so a member whose header lies ends as a CRC error, not a full disk."""
    if not zipfile.is_zipfile(archive):
        raise _not_a_zip(archive)
    root = destination.resolve()
    try:
        with zipfile.ZipFile(archive) as zf:
            members = zf.infolist()
            _check_member_paths(members, root, destination.name)
            total = sum(member.file_size for member in members)
            _check_unpacked_size(
                total, archive.stat().st_size, root, max_size, max_ratio
            )
            zf.extractall(root)
    except (zipfile.BadZipFile, zlib.error, EOFError) as e:
        raise ArchiveError(
            f"the zip archive is corrupt ({e})",
            "It was discarded; download it again, and if that fails too, the file "
            "upstream is broken.",
        ) from e
    except (NotImplementedError, RuntimeError) as e:  # unknown compression, encryption
        if isinstance(e, ArchiveError):
            raise
        raise ArchiveError(
            f"the zip archive cannot be extracted here ({e})",
            "Extract it by hand into the data folder, or use another copy.",
        ) from e


def _check_member_paths(
    members: list[zipfile.ZipInfo], root: Path, folder_name: str
) -> None:
    """Refuse a member that would land outside ``root``, or a file whose path is also
    a folder of other members (``a`` and ``a/b``), which no disk can hold."""
    files, folders = set(), set()
    for member in members:
        target = (root / member.filename).resolve()
        if target != root and root not in target.parents:
            raise ArchiveError(
                f"the archive member {member.filename!r} would be written outside "
                f"{folder_name}",
                "The archive is unsafe; it was not extracted.",
            )
        (folders if member.is_dir() else files).add(target)
        folders.update(target.parents)
    clash = sorted(files & folders)
    if clash:
        raise ArchiveError(
            f"the archive holds a file and a folder of the same name, "
            f"{clash[0].relative_to(root).as_posix()!r}",
            "The archive is malformed; it was not extracted. Use another copy, or "
            "extract it by hand and rename one of them.",
        )


def _check_unpacked_size(
    total: int, packed: int, root: Path, max_size: int, max_ratio: float
) -> None:
    """Refuse a zip whose declared contents are too large, too compressed or bigger than
    the free disk space, before anything is extracted."""
    if total > max_size:
        raise ArchiveError(
            f"the archive would unpack to {format_size(total)}, above "
            f"max_size={max_size:,} bytes",
            "If you expect that much, pass a larger max_size=; nothing was kept.",
        )
    if total > _RATIO_FLOOR and total > max_ratio * packed:
        raise ArchiveError(
            f"the archive would unpack {format_size(packed)} into {format_size(total)}, "
            f"a compression ratio of {total / packed:,.0f} above max_ratio={max_ratio:g} "
            "(a zip bomb?)",
            "If you trust it, pass a larger max_ratio=; nothing was extracted.",
        )
    free = shutil.disk_usage(root).free
    if total > free:
        raise ArchiveError(
            f"the archive would unpack to {format_size(total)} but {root} has "
            f"{format_size(free)} free",
            "Free some disk space, or pass data_dir= to download elsewhere.",
        )
