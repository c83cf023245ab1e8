"""One repository address everywhere: _config.yml (launch buttons), every chapter's setup
cell and the README agree, and scripts/set_repo_url.py rewrites them all from one value,
changing nothing else, and nothing at all the second time (on a copy in tmp_path)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "set_repo_url.py"
SETUP_URL = re.compile(r'REPO_URL = \\"([^"\\]+)\\"')
# A name may hold dots, but a sentence's full stop after an address is not part of it
GITHUB_URL = re.compile(r"https://github\.com/[\w.-]+/[\w-]+(?:\.[\w-]+)*")
PAGES_URL = re.compile(r"https://[\w-]+\.github\.io/[\w-]+(?:\.[\w-]+)*")
COLAB_URL = re.compile(
    r"https://colab\.research\.google\.com/github/([\w.-]+/[\w.-]+)/"
)


def _addresses(root: Path) -> dict[str, set[str]]:
    """Every repository (and Pages) address, by file."""
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    found = {"_config.yml": {config["repository"]["url"]}}
    for notebook in sorted((root / "book").glob("*.ipynb")):
        text = notebook.read_text("utf-8")
        found[notebook.name] = set(SETUP_URL.findall(text))
        colab = {f"https://github.com/{repo}" for repo in COLAB_URL.findall(text)}
        if colab:  # the "Open this chapter in Colab" link
            found[f"{notebook.name} (Colab)"] = colab
    readme = (root / "README.md").read_text(encoding="utf-8")
    found["README.md"] = set(GITHUB_URL.findall(readme))
    found["README.md (Pages)"] = set(PAGES_URL.findall(readme))
    return found


def _run(root: Path, url: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), url, "--root", str(root)],
        capture_output=True,
        text=True,
    )


def _copy(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "_config.yml", tmp_path)
    shutil.copytree(
        ROOT / "book", tmp_path / "book", ignore=shutil.ignore_patterns("_*")
    )
    shutil.copy(ROOT / "README.md", tmp_path)
    return tmp_path


def test_the_book_uses_one_repository_address():
    found = _addresses(ROOT)
    url = next(iter(found["_config.yml"]))
    setup_cells = [name for name in found if name.endswith(".ipynb")]
    links = [name for name in found if name.endswith("(Colab)")]
    assert len(links) >= 8  # chapters converted for Colab (issue 49) link to it
    for name in links:
        assert found[name] == {url}, name
    assert len(setup_cells) >= 14
    for name in setup_cells:
        assert found[name] == {url}, name
    assert found["README.md"] <= {url}
    owner, repo = url.removeprefix("https://github.com/").split("/")
    assert found["README.md (Pages)"] <= {f"https://{owner.lower()}.github.io/{repo}"}


def test_script_rewrites_every_copy_and_only_them(tmp_path):
    root = _copy(tmp_path)
    old = next(iter(_addresses(root)["_config.yml"]))
    owner, repo = old.removeprefix("https://github.com/").split("/")
    readme = root / "README.md"
    readme.write_text(  # the README's links, as a published book would have them
        readme.read_text("utf-8")
        + f"\nSource: {old}. Read it at https://{owner}.github.io/{repo}/.\n",
        encoding="utf-8",
    )
    before = {p: p.read_text("utf-8") for p in [readme, *root.rglob("*.ipynb")]}
    before[root / "_config.yml"] = (root / "_config.yml").read_text("utf-8")
    new = "https://github.com/Someone/vit-book"
    result = _run(root, new + ".git/")  # normalised to the bare address
    assert result.returncode == 0, result.stderr
    found = _addresses(root)
    assert all(urls == {new} for name, urls in found.items() if "Pages" not in name)
    assert found["README.md (Pages)"] == {"https://someone.github.io/vit-book"}
    # Only the addresses changed, byte for byte
    for path, text in before.items():
        expected = (
            text.replace(old, new)
            .replace(
                f"https://{owner}.github.io/{repo}",
                "https://someone.github.io/vit-book",
            )
            .replace(f"/github/{owner}/{repo}/", "/github/Someone/vit-book/")
        )
        assert path.read_text("utf-8") == expected, path.name
    after = {p: p.read_text("utf-8") for p in before}
    again = _run(root, new)
    assert again.returncode == 0 and "0 file(s) changed" in again.stdout
    assert {p: p.read_text("utf-8") for p in before} == after


@pytest.mark.parametrize(
    "url", ["https://gitlab.com/a/b", "github.com/a/b", "https://github.com/a"]
)
def test_script_refuses_what_is_not_a_github_repository(tmp_path, url):
    root = _copy(tmp_path)
    config = (root / "_config.yml").read_text("utf-8")
    result = _run(root, url)
    assert result.returncode == 2 and "OWNER/REPO" in result.stderr
    assert (root / "_config.yml").read_text("utf-8") == config
