"""The two packages' rules, read from the source with ``ast``.

``going_modular`` is the course's package: it never imports ``vitbook`` (the book's
machinery) and reads no environment variable. Inside ``vitbook`` arrows point down only:
book -> the command line -> training -> data, models; only ``vitbook.book`` reads ``BOOK_*``
variables and ``CI``. Every dotted module path that a docstring, a message,
a chapter or the README names exists.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COURSE, BOOK = ROOT / "going_modular", ROOT / "vitbook"
# vitbook's layers, lowest first: a module may import its own layer and those below.
LAYERS = {"data": 0, "models": 0, "training": 1, "cli": 2, "train.py": 2, "book": 3}


def _sources(package: Path) -> list[Path]:
    return sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts)


def imported(path: Path) -> set[str]:
    """Every absolute module name ``path`` imports, at any depth (functions included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def environment_reads(path: Path) -> set[str]:
    """The names of the environment variables ``path`` reads (``os.environ[...]``,
    ``os.environ.get(...)``, ``os.getenv(...)``), or ``"?"`` for a name it computes."""
    reads = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        key = None
        if isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ":
            key = node.slice
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in (
            "os.environ.get",
            "os.getenv",
        ):
            key = node.args[0] if node.args else None
        if key is not None:
            reads.add(key.value if isinstance(key, ast.Constant) else "?")
    return reads


@pytest.mark.parametrize("path", _sources(COURSE), ids=lambda p: p.name)
def test_the_course_package_never_imports_the_book_package(path):
    assert not {n for n in imported(path) if n.split(".")[0] == "vitbook"}


@pytest.mark.parametrize("path", _sources(COURSE), ids=lambda p: p.name)
def test_the_course_package_reads_no_environment_variable(path):
    assert not environment_reads(path)


def _layer(path: Path) -> int:
    first = path.relative_to(BOOK).parts[0]
    return LAYERS.get(first, -1)


@pytest.mark.parametrize(
    "path", [p for p in _sources(BOOK) if _layer(p) >= 0], ids=lambda p: p.name
)
def test_the_book_package_imports_only_downward(path):
    above = {
        name
        for name in imported(path)
        if name.split(".")[0] == "vitbook"
        and len(name.split(".")) > 1
        and LAYERS.get(name.split(".")[1], LAYERS.get(name.split(".")[1] + ".py", -1))
        > _layer(path)
    }
    assert not above


@pytest.mark.parametrize("path", _sources(BOOK), ids=lambda p: p.name)
def test_only_the_book_part_reads_book_variables_and_ci(path):
    if path.relative_to(BOOK).parts[0] != "book":
        reads = environment_reads(path)
        assert not {r for r in reads if r in ("?", "CI") or r.startswith("BOOK_")}


def test_the_checks_can_fail():
    """The rules above see an import, an import inside a function and a read."""
    source = ROOT / "tests" / "test_import_graph.py"
    assert "importlib" in imported(source)
    sample = Path(__file__).with_name("_probe_import_graph.py")
    sample.write_text(
        "import os\ndef f():\n    from vitbook.book import settings\n"
        "    return os.environ.get('BOOK_OFFLINE'), os.getenv('CI')\n"
    )
    try:
        assert "vitbook.book" in imported(sample)
        assert environment_reads(sample) == {"BOOK_OFFLINE", "CI"}
    finally:
        sample.unlink()


# Stale names: every dotted path the project names must import.
DOTTED = re.compile(r"\b(?:going_modular|vitbook)(?:\.[A-Za-z_]\w*)+")


def _texts() -> dict[str, str]:
    texts = {}
    for path in [*_sources(COURSE), *_sources(BOOK), *sorted(ROOT.glob("*.py"))]:
        texts[str(path.relative_to(ROOT))] = path.read_text()
    for path in [ROOT / "README.md", *sorted((ROOT / "book").glob("*.md"))]:
        texts[str(path.relative_to(ROOT))] = path.read_text()
    for path in sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        texts[path.name] = "\n".join("".join(c["source"]) for c in cells)
    return texts


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` is a module, or an attribute reached from the longest module."""
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        for name in parts[k:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def test_every_dotted_name_the_project_gives_exists():
    stale = sorted(
        {
            f"{where}: {name}"
            for where, text in _texts().items()
            for name in DOTTED.findall(text)
            if not resolves(name.rstrip("."))
        }
    )
    assert not stale, "\n".join(stale)


def test_a_stale_name_is_caught():
    assert resolves("going_modular.engine.train_step")
    assert not resolves("going_modular.engine.fit")
    assert not resolves("going_modular." + "datasets.get_food_data")  # moved long ago
