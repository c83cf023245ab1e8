"""The two packages' declared API: ``going_modular`` (the course's) and ``vitbook`` (the
book's machinery). Every module is listed in its package's docstrings, named on the
architecture page and in its picture, and declares ``__all__``; the chapters import each
name from the module that defines it, and ``helper_functions`` holds the course's five
helpers and nothing else."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import json
import re
from pathlib import Path

import pytest

import going_modular
import helper_functions
import vitbook
from vitbook.data import network
from vitbook.data.download import DownloadError

PACKAGES = {
    package.__name__: Path(package.__file__).parent
    for package in (going_modular, vitbook)
}
ROOT = PACKAGES["going_modular"].parent
# A line of a docstring's listing: a module's name below its package in double
# backticks at the start, two spaces or more, then what it is for, as in
# ``data.loaders``  the DataLoader builder
LISTED = re.compile(r"^ *``([\w.]+)`` {2,}\S", re.MULTILINE)


def _inits(package: str) -> list[Path]:
    return sorted(PACKAGES[package].rglob("__init__.py"))


def _dotted(package: str, path: Path) -> str:
    """The dotted name below ``package`` of a module or a subpackage's ``__init__``."""
    parts = path.relative_to(PACKAGES[package]).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _holds_code(path: Path) -> bool:
    return any(
        isinstance(node, (ast.FunctionDef, ast.ClassDef))
        for node in ast.parse(path.read_text()).body
    )


def _modules(package: str) -> dict[str, Path]:
    """Every module of ``package`` by its dotted name below it; a subpackage whose
    ``__init__`` holds code (``data.gpu_augment``) is a module of its own too."""
    return {
        _dotted(package, path): path
        for path in sorted(PACKAGES[package].rglob("*.py"))
        if path.name != "__init__.py"
        or (path.parent != PACKAGES[package] and _holds_code(path))
    }


def _listings(package: str) -> list[tuple[str, str]]:
    """(subpackage, name) for each listing line of the package's ``__init__``
    docstrings, the subpackage being where the docstring is ("" for the package's own)."""
    return [
        (_dotted(package, init), name)
        for init in _inits(package)
        for name in LISTED.findall(ast.get_docstring(ast.parse(init.read_text())) or "")
    ]


def test_a_listing_line_is_a_name_then_what_it_is_for():
    text = (
        "``engine``  the loop\n(``data``)  and ``utils``\n``train``\n"
        "  ``dim`` (the token width)\n    ``cli.ranks``   who speaks"
    )
    assert LISTED.findall(text) == ["engine", "cli.ranks"]


@pytest.mark.parametrize("package", PACKAGES)
def test_the_package_docstrings_list_every_module_once(package):
    listed = [name for _, name in _listings(package)]
    modules = _modules(package)
    assert [name for name in modules if listed.count(name) != 1] == []
    # What a listing names exists: below the package, or below the docstring's subpackage.
    known = {*modules, *(_dotted(package, init) for init in _inits(package))}
    gone = [
        name
        for where, name in _listings(package)
        if name not in known and f"{where}.{name}" not in known
    ]
    assert gone == []


@pytest.mark.parametrize("package", PACKAGES)
def test_every_module_declares_its_names(package):
    for path in sorted(PACKAGES[package].rglob("*.py")):
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
        assert "__all__" in declared, path.relative_to(ROOT)


def _package_map_layers() -> list[tuple[str, str, str, str, list[str]]]:
    spec = importlib.util.spec_from_file_location(
        "draw_package_map", ROOT / "scripts" / "draw_package_map.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script.LAYERS


def test_the_architecture_page_and_its_picture_name_every_module():
    # Both name a module in full, its package first: going_modular.engine, vitbook.train.
    modules = sorted(
        f"{package}.{name}" for package in PACKAGES for name in _modules(package)
    )
    page = (ROOT / "book" / "package.md").read_text()
    assert [name for name in modules if f"`{name}`" not in page] == []
    layers = _package_map_layers()
    drawn = [name for *_, names in layers for name in names]
    not_drawn = [name for name in modules if name not in drawn]
    assert not_drawn == [], f"not in the picture: {not_drawn}"
    gone = [name for name in drawn if name not in modules]
    assert gone == [], f"drawn, but not in the packages: {gone}"
    assert sorted(drawn) == sorted(set(drawn)), "a module drawn twice"
    # Each layer holds one package's modules, vitbook's layers above going_modular's.
    packages = [package for package, *_ in layers]
    assert packages == sorted(packages, key=["vitbook", "going_modular"].index)
    misplaced = [
        name
        for package, *_, names in layers
        for name in names
        if name.split(".")[0] != package
    ]
    assert misplaced == []


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


# The course's helpers, where a reader of the course looks for them.
COURSE_HELPERS = {
    "download_data",
    "plot_loss_curves",
    "pred_and_plot_image",
    "set_seeds",
    "walk_through_dir",
}


def _assigned_at_top(module: str) -> set[str]:
    """The names a module's own top level assigns (constants, aliases), not imports."""
    path = Path(importlib.import_module(module).__file__)
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        names |= {
            name.id  # a, or each name of a, b = ...
            for target in targets
            for name in ast.walk(target)
            if isinstance(name, ast.Name)
        }
    return names


def defines(module: str, name: str) -> bool:
    """True if ``module`` is where ``name`` is defined: a function or class whose
    ``__module__`` it is, or a value its top level assigns."""
    obj = getattr(importlib.import_module(module), name)
    if inspect.isclass(obj) or inspect.isfunction(obj):
        return obj.__module__ == module
    return name in _assigned_at_top(module)


def test_defines_tells_the_home_of_a_name_from_a_re_export():
    assert defines("going_modular.models.registry", "build_model")
    assert not defines("going_modular.models", "build_model")  # re-exported there
    assert defines("vitbook.book.settings", "DRY_RUN_STEPS")
    assert defines("vitbook.data.text_data", "UNK_ID")  # PAD_ID, UNK_ID = 0, 1
    assert not defines("helper_functions", "set_seeds")


def test_chapters_import_each_package_name_from_the_module_that_defines_it():
    misplaced = [
        (chapter, f"from {module} import {name}")
        for chapter, module, name in _chapter_imports()
        if module.split(".")[0] in PACKAGES
        and (name is None or not defines(module, name))
    ]
    assert misplaced == []


def test_chapters_take_only_the_course_helpers_from_helper_functions():
    taken = {
        name for _, module, name in _chapter_imports() if module == "helper_functions"
    }
    assert taken <= COURSE_HELPERS
    assert taken, "the chapters use the course helpers where a reader expects them"


def test_helper_functions_holds_the_course_helpers_and_no_more():
    assert sorted(helper_functions.__all__) == sorted(COURSE_HELPERS)
    public = {name for name in vars(helper_functions) if not name.startswith("_")}
    assert public == COURSE_HELPERS


def test_each_helper_name_is_the_package_name_from_the_module_that_defines_it():
    imported = [
        (node.module, alias) for node in _helper_imports() for alias in node.names
    ]
    assert sorted(a.name for _, a in imported) == sorted(helper_functions.__all__)
    for module, alias in imported:
        assert alias.asname is None, f"{alias.name}: no second names"
        assert alias.name in importlib.import_module(module).__all__, alias.name
        assert defines(module, alias.name), f"{alias.name} is not defined in {module}"


def test_download_data_has_the_course_signature_and_fails_clearly_offline(tmp_path):
    parameters = inspect.signature(helper_functions.download_data).parameters
    assert list(parameters)[:3] == ["source", "destination", "remove_source"]
    assert parameters["remove_source"].default is True
    was_offline = network.is_offline()
    network.set_offline(True)
    try:
        with pytest.raises(DownloadError, match="OFFLINE"):
            helper_functions.download_data(
                "https://example.com/pizza_steak_sushi.zip",
                "pizza_steak_sushi",
                data_dir=tmp_path,
            )
    finally:
        network.set_offline(was_offline)
    assert list(tmp_path.iterdir()) == []
