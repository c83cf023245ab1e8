"""The package's declared API: every module listed in its docstring and declaring ``__all__``;
the chapters' one import surface, ``helper_functions``."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
from pathlib import Path

import going_modular
import helper_functions

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


def _package_map_layers() -> list[tuple[str, str, str, list[str]]]:
    spec = importlib.util.spec_from_file_location(
        "draw_package_map", ROOT / "scripts" / "draw_package_map.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script.LAYERS


def test_the_architecture_page_and_its_picture_name_every_module():
    # A package whose __init__ holds code (data.gpu_augment) is a module of its own too.
    packages_with_code = {
        ".".join(init.parent.relative_to(PACKAGE).parts)
        for init in PACKAGE.rglob("__init__.py")
        if any(
            isinstance(node, (ast.FunctionDef, ast.ClassDef))
            for node in ast.parse(init.read_text()).body
        )
    }
    modules = sorted([*_modules(), *packages_with_code])
    page = (ROOT / "book" / "package.md").read_text()
    assert [name for name in modules if f"`{name}`" not in page] == []
    drawn = [name for *_, names in _package_map_layers() for name in names]
    not_drawn = [name for name in modules if name not in drawn]
    assert not_drawn == [], f"not in the picture: {not_drawn}"
    gone = [name for name in drawn if name not in modules]
    assert gone == [], f"drawn, but not in the package: {gone}"
    assert sorted(drawn) == sorted(set(drawn)), "a module drawn twice"


def _chapter_imports() -> list[tuple[str, str, str | None]]:
    """(chapter, module, name) of every import in the chapters' code cells."""
    found = []
    for path in sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] != "code":
                continue
            lines = "".join(cell["source"]).splitlines()
            code = "\n".join(line for line in lines if not line.startswith(("%", "!")))
            for node in ast.walk(ast.parse(code)):
                if isinstance(node, ast.Import):
                    found += [(path.name, alias.name, None) for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    found += [(path.name, node.module, a.name) for a in node.names]
    return found


def _helper_imports() -> list[ast.ImportFrom]:
    tree = ast.parse((ROOT / "helper_functions.py").read_text(encoding="utf-8"))
    return [node for node in tree.body if isinstance(node, ast.ImportFrom)]


def test_chapters_import_the_package_only_through_helper_functions():
    elsewhere = [
        (chapter, module)
        for chapter, module, _ in _chapter_imports()
        if module.split(".")[0] == "going_modular"
    ]
    assert elsewhere == []


def test_helper_functions_holds_the_names_the_chapters_use_and_no_more():
    used = {
        name for _, module, name in _chapter_imports() if module == "helper_functions"
    }
    assert sorted(helper_functions.__all__) == sorted(used)


def test_each_helper_name_is_the_package_name_from_the_module_that_declares_it():
    imported = [
        (node.module, alias) for node in _helper_imports() for alias in node.names
    ]
    assert sorted(a.name for _, a in imported) == sorted(helper_functions.__all__)
    for module, alias in imported:
        assert alias.asname is None, f"{alias.name}: no second names"
        assert alias.name in importlib.import_module(module).__all__, alias.name
        obj = getattr(helper_functions, alias.name)
        if hasattr(obj, "__module__") and callable(obj):
            assert obj.__module__ == module, (
                f"{alias.name} is defined in {obj.__module__}"
            )
