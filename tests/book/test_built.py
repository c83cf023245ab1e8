"""The classes saved in ``vitbook/book/built/`` are the chapters' own (issue 51): each
module ``chNN.py`` holds a class exactly as chapter NN's code cell that starts with the
comment ``# Saved in vitbook.book.built.chNN: ...`` defines it, so an edit to either
side fails here."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILT = ROOT / "vitbook" / "book" / "built"
MODULES = sorted(BUILT.glob("ch[0-9][0-9].py"))
SAVED = "# Saved in vitbook.book.built.{}: "  # then who imports it from there


def _classes(source: str) -> dict[str, str]:
    """Each top-level class of ``source``: name -> ``ast.dump`` of its definition."""
    return {
        node.name: ast.dump(node)
        for node in ast.parse(source).body
        if isinstance(node, ast.ClassDef)
    }


def _saved_cells(notebook: Path, module: str) -> list[str]:
    """The code cells of ``notebook`` whose first line says they are saved in
    ``module``."""
    cells = json.loads(notebook.read_text())["cells"]
    sources = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    return [s for s in sources if s.startswith(SAVED.format(module))]


def _chapter(module: Path) -> Path:
    (notebook,) = (ROOT / "book").glob(f"{module.stem[2:]}_*.ipynb")
    return notebook


def cells_missing_or_different(module_source: str, cells: list[str]) -> list[str]:
    """What is wrong between a module's classes and its chapter's saved cells."""
    in_cells: dict[str, str] = {}
    for cell in cells:
        in_cells.update(_classes(cell))
    in_module = _classes(module_source)
    problems = [
        f"{name}: no saved cell defines it" for name in in_module.keys() - in_cells
    ]
    problems += [
        f"{name}: saved in a cell, not in the module"
        for name in in_cells.keys() - in_module
    ]
    problems += [
        f"{name}: the module's class differs from its cell's"
        for name in in_module.keys() & in_cells.keys()
        if in_module[name] != in_cells[name]
    ]
    return sorted(problems)


def test_the_comparison_finds_a_missing_an_extra_and_a_changed_class():
    module = "class A:\n    x = 1\n\n\nclass B:\n    pass\n"
    cells = ["# a comment is no difference\nclass A:\n    x = 1\n"]
    assert cells_missing_or_different(module, cells) == ["B: no saved cell defines it"]
    cells.append("class B:\n    y = 2\n\n\nclass C:\n    pass\n")
    assert cells_missing_or_different(module, cells) == [
        "B: the module's class differs from its cell's",
        "C: saved in a cell, not in the module",
    ]


@pytest.mark.parametrize("module", MODULES, ids=lambda p: p.stem)
def test_every_saved_class_is_its_chapter_cell(module):
    cells = _saved_cells(_chapter(module), module.stem)
    assert cells, (
        f"{_chapter(module).name} has no cell starting {SAVED.format(module.stem)!r}"
    )
    problems = cells_missing_or_different(module.read_text(), cells)
    assert not problems, f"{module.name} against {_chapter(module).name}: {problems}"


def test_every_saved_cell_has_its_module():
    for notebook in sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb")):
        module = f"ch{notebook.name[:2]}"
        if _saved_cells(notebook, module):
            assert (BUILT / f"{module}.py").exists(), f"{notebook.name}: no {module}.py"
