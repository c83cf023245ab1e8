"""The package's declared API: every module listed in its docstring and declaring ``__all__``;
the chapters import each name from the module that defines it, and ``helper_functions``
holds the course's five helpers and nothing else."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import json
from pathlib import Path

import pytest

import going_modular
import helper_functions
from vitbook.data import network
from vitbook.data.download import DownloadError

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


# The course's helpers, where a reader of the course looks for them.
COURSE_HELPERS = {
    "download_data",
    "plot_loss_curves",
    "pred_and_plot_image",
    "set_seeds",
    "walk_through_dir",
}
# The course's own modules (learnpytorch's engine.py and utils.py) re-export what their
# readers call through them: the training loop, and saving, loading, seeds and the device.
COURSE_REEXPORTS = {
    ("going_modular.engine", "fit"),
    ("going_modular.engine", "evaluate"),
    ("going_modular.utils", "get_device"),
    ("going_modular.utils", "load_model"),
    ("going_modular.utils", "save_model"),
    ("going_modular.utils", "set_seeds"),
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
        if module.split(".")[0] == "going_modular"
        and (module, name) not in COURSE_REEXPORTS
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
