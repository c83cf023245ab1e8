"""Keep one copy of the explorers' script on each page of the built book.

Every explorer output carries the whole script (``vitbook/book/explorers.js``): on Colab each
output is a page of its own. On the book's pages all outputs share one document, so the
first copy defines ``VitExplorers`` for the explorers after it, and this removes the later
copies (about 20 KB each) of the same version of the script. ``make book`` runs it after
Jupyter Book:

    python scripts/one_script_per_page.py _build/html
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

__all__ = ["keep_first_script", "main"]

# An explorer output's <script>: the script itself, then the call that mounts its data.
SCRIPT = re.compile(
    r"<script>(// The book's explorers: .*?\n)(?=VitExplorers\.mount\()", re.S
)


def keep_first_script(page: str) -> tuple[str, int]:
    """``page`` with every later copy of an explorers' script it already holds removed,
    and how many were."""
    seen: set[str] = set()
    removed = 0

    def drop(match: re.Match) -> str:
        nonlocal removed
        if match.group(1) in seen:
            removed += 1
            return "<script>"
        seen.add(match.group(1))
        return match.group(0)

    return SCRIPT.sub(drop, page), removed


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python scripts/one_script_per_page.py BUILT_HTML_FOLDER")
        return 2
    total = 0
    for path in sorted(Path(argv[0]).rglob("*.html")):
        page, removed = keep_first_script(path.read_text(encoding="utf-8"))
        if removed:
            path.write_text(page, encoding="utf-8")
            total += removed
    print(f"explorers' script: {total} later copies removed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
