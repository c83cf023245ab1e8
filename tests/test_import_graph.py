"""The package's layers (issue 26), read from the source with ``ast``: arrows point down only.

book -> top-level course modules and the CLI -> training -> data / models. The library never
reads the book (its module or its ``BOOK_*`` environment variables), a subpackage never
imports a top-level module, and data and models never import training.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "going_modular"
TOP_LEVEL = {"data_setup", "engine", "utils", "predictions", "train", "cli"}
# The command line: the entry point and its parts (the only modules besides going_modular/book/
# that may import the book).
CLI = {"train.py", *(f"cli/{p.name}" for p in (PACKAGE / "cli").glob("*.py"))}

# Modules that still break a rule in this branch, each with what it still does. The lead
# removes a mark once the helper owning the module has merged its fix (a strict xfail fails
# as soon as the module obeys).
STILL_BROKEN: dict[str, dict[str, str]] = {
    "imports_book": {},
    "reads_book_env": {},
    "imports_top_level": {},
}


def _modules() -> list[str]:
    return sorted(
        p.relative_to(PACKAGE).as_posix()
        for p in PACKAGE.rglob("*.py")
        if "__pycache__" not in p.parts
    )


def _tree(module: str) -> ast.Module:
    return ast.parse((PACKAGE / module).read_text(), filename=module)


def _package_of(module: str) -> str:
    """``going_modular.data.gpu_augment`` for ``data/gpu_augment/ops.py``; for resolving
    relative imports."""
    parts = ["going_modular", *Path(module).parts[:-1]]
    return ".".join(parts)


def imported(module: str) -> set[str]:
    """Every module name ``module`` imports (``from a import b`` gives ``a`` and ``a.b``),
    at any depth, including imports under ``if TYPE_CHECKING`` and inside functions."""
    names = set()
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = _package_of(module).split(".")
                package = package[: len(package) - node.level + 1]
                base = ".".join([*package, base] if base else package)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def _string(node: ast.AST, constants: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None


def _is_environ(node: ast.AST) -> bool:
    """``os.environ`` or a bare ``environ``."""
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def environment_names(module: str) -> set[str]:
    """The environment variables ``module`` reads or writes: ``os.environ[...]``,
    ``os.environ.get/pop/setdefault(...)``, ``os.getenv(...)``, ``... in os.environ``,
    with the name given as a string or a module-level string constant."""
    tree = _tree(module)
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    keys = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_environ(node.value):
            keys.append(node.slice)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            getenv = isinstance(func, ast.Attribute | ast.Name) and (
                getattr(func, "attr", None) == "getenv"
                or getattr(func, "id", None) == "getenv"
            )
            environ_method = isinstance(func, ast.Attribute) and _is_environ(func.value)
            if getenv or environ_method:
                keys.append(node.args[0])
        elif isinstance(node, ast.Compare) and any(
            _is_environ(c) for c in node.comparators
        ):
            keys.append(node.left)
    return {name for key in keys if (name := _string(key, constants)) is not None}


def _cases(rule: str, modules: list[str]) -> list:
    broken = STILL_BROKEN[rule]
    return [
        pytest.param(
            m,
            marks=pytest.mark.xfail(
                strict=True, reason=f"{m} still breaks the rule: {broken[m]}"
            ),
        )
        if m in broken
        else m
        for m in modules
    ]


LIBRARY = [m for m in _modules() if not m.startswith("book/")]
SUBPACKAGES = [
    m for m in _modules() if m.split("/")[0] in ("models", "data", "training")
]


@pytest.mark.parametrize(
    "module", _cases("imports_book", [m for m in LIBRARY if m not in CLI])
)
def test_the_library_never_imports_the_book(module):
    assert not any(
        name == "going_modular.book" or name.startswith("going_modular.book.")
        for name in imported(module)
    )


@pytest.mark.parametrize("module", _cases("reads_book_env", LIBRARY))
def test_only_the_book_reads_book_variables(module):
    assert not {n for n in environment_names(module) if n.startswith("BOOK_")}


@pytest.mark.parametrize("module", _cases("imports_top_level", SUBPACKAGES))
def test_subpackages_never_import_the_top_level_modules(module):
    top = {f"going_modular.{name}" for name in TOP_LEVEL}
    assert (
        not {  # also ``from going_modular import utils`` and the cli/ package's modules
            name
            for name in imported(module)
            if name in top or name.startswith("going_modular.cli.")
        }
    )


@pytest.mark.parametrize(
    "module", [m for m in SUBPACKAGES if m.split("/")[0] in ("data", "models")]
)
def test_data_and_models_never_import_training(module):
    assert not any(
        name == "going_modular.training" or name.startswith("going_modular.training.")
        for name in imported(module)
    )


def test_the_rules_see_what_they_look_for(tmp_path, monkeypatch):
    """The parsers find each kind of import and environment read (else the rules pass
    vacuously)."""
    source = (
        "import os\nfrom os import environ\nfrom going_modular.book import settings\n"
        "from .. import utils\nVAR = 'BOOK_X'\n"
        "def f():\n    from going_modular.training import recipe\n"
        "    return (os.environ.get(VAR), os.getenv('BOOK_Y'), environ['BOOK_Z'],\n"
        "            'BOOK_W' in os.environ, os.environ.setdefault('HOME', ''))\n"
    )
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "probe.py").write_text(source)
    monkeypatch.setattr(f"{__name__}.PACKAGE", tmp_path)
    names = imported("data/probe.py")
    assert {"going_modular.book.settings", "going_modular.utils"} <= names
    assert "going_modular.training.recipe" in names
    assert environment_names("data/probe.py") == {
        "BOOK_X",
        "BOOK_Y",
        "BOOK_Z",
        "BOOK_W",
        "HOME",
    }
