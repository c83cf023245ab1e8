"""Point the book at its repository: one address, written everywhere it appears.

    python scripts/set_repo_url.py https://github.com/OWNER/REPO   (or: make repo-url URL=...)

Rewrites ``repository.url`` in ``_config.yml`` (the launch and repository buttons), the
``REPO_URL = "..."`` line of every chapter's setup cell (what Colab installs from), the
chapters' "Open this chapter in Colab" links and, in the README, the old repository address and the old GitHub Pages address
(``https://OWNER.github.io/REPO``). Text is replaced in place, so nothing else in any file
changes; running it twice changes nothing the second time. ``--root`` picks another checkout.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

__all__ = ["colab_prefix", "main", "pages_url", "set_repo_url"]

GITHUB = re.compile(r"https://github\.com/([\w.-]+)/([\w.-]+)")
CONFIG_URL = re.compile(
    r"(?m)^(repository:\n(?:[ \t]+.*\n|[ \t]*\n)*?[ \t]+url:[ \t]*)(\S+)"
)
SETUP_URL = re.compile(r'(REPO_URL = \\")([^"\\]+)(\\")')  # inside the notebook's JSON


def pages_url(repo_url: str) -> str:
    """Where GitHub Pages publishes the book of ``https://github.com/OWNER/REPO``."""
    owner, name = GITHUB.fullmatch(repo_url).groups()
    return f"https://{owner.lower()}.github.io/{name}"


def colab_prefix(repo_url: str) -> str:
    """The start of a Colab link that opens a notebook of ``https://github.com/OWNER/REPO``."""
    owner, name = GITHUB.fullmatch(repo_url).groups()
    return f"https://colab.research.google.com/github/{owner}/{name}/"


def _normalise(url: str) -> str:
    url = url.strip().removesuffix("/").removesuffix(".git")
    if not GITHUB.fullmatch(url):
        raise ValueError(f"Expected https://github.com/OWNER/REPO, got {url!r}.")
    return url


def _write(path: Path, text: str, changed: list[Path]) -> None:
    if path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
        changed.append(path)


def set_repo_url(root: Path, url: str) -> list[Path]:
    """Write ``url`` into ``root``'s config, setup cells and README; return the files changed."""
    url = _normalise(url)
    config = root / "_config.yml"
    text = config.read_text(encoding="utf-8")
    found = CONFIG_URL.search(text)
    if found is None:
        raise ValueError(f"{config} has no repository: url: entry.")
    old = found.group(2)
    changed: list[Path] = []
    _write(config, CONFIG_URL.sub(lambda m: m.group(1) + url, text, count=1), changed)
    for notebook in sorted((root / "book").glob("*.ipynb")):
        text = notebook.read_text(encoding="utf-8")
        new = SETUP_URL.sub(lambda m: m.group(1) + url + m.group(3), text)
        if GITHUB.fullmatch(old):
            new = new.replace(colab_prefix(old), colab_prefix(url))
        _write(notebook, new, changed)
    readme = root / "README.md"
    if readme.exists() and old != url:
        text = readme.read_text(encoding="utf-8")
        if GITHUB.fullmatch(old):
            text = text.replace(pages_url(old), pages_url(url))
        _write(readme, text.replace(old, url), changed)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="https://github.com/OWNER/REPO")
    parser.add_argument(
        "--root", type=Path, default=Path(__file__).resolve().parents[1]
    )
    args = parser.parse_args(argv)
    try:
        changed = set_repo_url(args.root, args.url)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    for path in changed:
        print(f"rewrote {path.relative_to(args.root)}")
    print(
        f"{len(changed)} file(s) changed; the book's address is {_normalise(args.url)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
