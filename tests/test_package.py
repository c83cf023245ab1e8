"""The package's declared API: every module listed in its docstring and declaring ``__all__``."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import going_modular

PACKAGE = Path(going_modular.__file__).parent
ROOT = PACKAGE.parent


def _modules() -> dict[str, Path]:
    """Every module of the package by its dotted name below ``going_modular``."""
    return {
        ".".join(path.relative_to(PACKAGE).with_suffix("").parts): path
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "__init__.py"
    }


def test_the_package_docstring_lists_every_module():
    missing = [
        name for name in _modules() if f"``{name}``" not in going_modular.__doc__
    ]
    assert missing == []


def test_every_module_declares_its_names():
    for path in [PACKAGE / "__init__.py", *_modules().values()]:
        tree = ast.parse(path.read_text())
        declared = [
            target.id
            for node in tree.body
            if isinstance(node, (ast.Assign, ast.AnnAssign))
            for target in (
                node.targets if isinstance(node, ast.Assign) else [node.target]
            )
            if isinstance(target, ast.Name)
        ]
        assert "__all__" in declared, path.relative_to(PACKAGE)


def _package_map_columns() -> list[tuple[str, str, list[str]]]:
    spec = importlib.util.spec_from_file_location(
        "draw_package_map", ROOT / "scripts" / "draw_package_map.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script.COLUMNS


def test_the_architecture_page_and_its_picture_name_every_module():
    page = (ROOT / "book" / "package.md").read_text()
    assert [name for name in _modules() if f"`{name}" not in page] == []
    drawn = [name for _, _, names in _package_map_columns() for name in names]
    assert sorted(drawn) == sorted(_modules())
