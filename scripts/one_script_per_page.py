"""Keep one copy of the explorers' script on each page of the built book.

Every explorer output carries the whole script (``vitbook/book/explorers.js``): on Colab each
output is a page of its own. On the book's pages all outputs share one document, so the
first copy defines ``VitExplorers`` for the explorers after it, and this removes the later
copies (about 20 KB each). ``make book`` runs it after Jupyter Book:

    python scripts/one_script_per_page.py _build/html
"""

from __future__ import annotations

import sys
from importlib.resources import files
from pathlib import Path

__all__ = ["keep_first_script", "main"]


def keep_first_script(page: str, script: str) -> tuple[str, int]:
    """``page`` with every copy of ``script`` after the first removed, and how many were."""
    first = page.find(script)
    if first < 0:
        return page, 0
    start = first + len(script)
    removed = page.count(script, start)
    return page[:start] + page[start:].replace(script, ""), removed


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python scripts/one_script_per_page.py BUILT_HTML_FOLDER")
        return 2
    script = files("vitbook.book").joinpath("explorers.js").read_text(encoding="utf-8")
    total = 0
    for path in sorted(Path(argv[0]).rglob("*.html")):
        page, removed = keep_first_script(path.read_text(encoding="utf-8"), script)
        if removed:
            path.write_text(page, encoding="utf-8")
            total += removed
    print(f"explorers' script: {total} later copies removed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
