"""Every module a chapter or the package imports is there on a fresh Colab runtime:
in the standard library, in Colab's preinstalled packages (colab/preinstalled.txt), or
installed by the chapter's setup cell (the package, its dependencies and the extras the
cell asks for). Static: the code is parsed, not run (`make colab-check` runs it).

The package itself must import with its own dependencies alone (a laptop's
``pip install``): its module-level imports may not rely on Colab or on an extra; an
extra may only be imported inside a function, and a chapter that imports such a module
must install that extra."""

from __future__ import annotations

import ast
import json
import re
import sys
from functools import cache
from importlib import metadata
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
PACKAGE_FILES = (
    sorted((ROOT / "going_modular").rglob("*.py"))
    + sorted((ROOT / "vitbook").rglob("*.py"))
    + [ROOT / "helper_functions.py"]
)
OWN_MODULES = {"going_modular", "vitbook", "helper_functions"}
# Imported only inside functions that run in a Jupyter kernel (glue), which has IPython.
KERNEL_MODULES = {"IPython"}
# The setup cell's pip argument: f"git+{REPO_URL}" (the package and its dependencies) or
# f"vit-from-scratch[extra,...] @ git+{REPO_URL}" (with extras).
INSTALL = re.compile(r'f"(?:vit-from-scratch(?:\[([\w,\s]+)\])? @ )?git\+\{REPO_URL\}"')


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.split(r"[\s\[=<>~!;@]", requirement)[0]).lower()


@cache
def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def colab_distributions() -> set[str]:
    lines = (ROOT / "colab" / "preinstalled.txt").read_text().splitlines()
    return {_name(line) for line in lines if line.strip() and not line.startswith("#")}


def dependencies(extras: tuple[str, ...] = ()) -> set[str]:
    """The package's own dependencies plus those of ``extras`` (distribution names)."""
    optional = _project().get("optional-dependencies", {})
    names = {_name(r) for r in _project()["dependencies"]}
    for extra in extras:
        names |= {_name(r) for r in optional[extra]}
    return names


@cache
def _distributions_of() -> dict[str, set[str]]:
    """Import name -> distribution names, from the installed packages' metadata."""
    found: dict[str, set[str]] = {}
    for module, dists in metadata.packages_distributions().items():
        found.setdefault(module, set()).update(_name(d) for d in dists)
    return found


def provided_by(module: str, distributions: set[str]) -> bool:
    """True if ``module`` is stdlib, the book's own, or comes from ``distributions``."""
    if module in sys.stdlib_module_names or module in OWN_MODULES:
        return True
    owners = _distributions_of().get(module, set()) | {_name(module)}
    return bool(owners & distributions)


def _imports(tree: ast.AST) -> tuple[set[str], set[str]]:
    """(module-level, inside-function) absolute imports: full dotted names. Imports under
    ``if TYPE_CHECKING:`` never run and are skipped."""
    top: set[str] = set()
    inner: set[str] = set()

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            nested = in_function or isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            )
            names: set[str] = set()
            if isinstance(child, ast.Import):
                names = {alias.name for alias in child.names}
            elif isinstance(child, ast.ImportFrom) and child.level == 0:
                names = {child.module} | {
                    f"{child.module}.{alias.name}" for alias in child.names
                }
            (inner if nested else top).update(names)
            visit(child, nested)

    visit(tree, False)
    return top, inner


def _top(names: set[str]) -> set[str]:
    return {n.split(".")[0] for n in names}


def _code_cells(path: Path) -> list[str]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [
        "\n".join(
            line
            for line in "".join(cell["source"]).splitlines()
            if not line.lstrip().startswith(("!", "%"))
        )
        for cell in cells
        if cell["cell_type"] == "code"
    ]


@cache
def _package_module_imports() -> dict[str, tuple[set[str], set[str]]]:
    """``going_modular.x`` (and ``helper_functions``) -> (module-level, in-function)."""
    modules = {}
    for path in PACKAGE_FILES:
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = _imports(ast.parse(path.read_text(encoding="utf-8")))
    return modules


@cache
def _reexports() -> dict[str, str]:
    """``module.name`` -> the module it imports ``name`` from, for every name a package
    module (or ``helper_functions``) imports at its top level from the package."""
    sources = {}
    for path in PACKAGE_FILES:
        parts = path.relative_to(ROOT).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                if node.module.split(".")[0] in OWN_MODULES:
                    for alias in node.names:
                        sources[f"{module}.{alias.asname or alias.name}"] = (
                            f"{node.module}.{alias.name}"
                        )
    return sources


def defining_modules(names: set[str]) -> set[str]:
    """The modules behind imported ``module.name``s, each name followed through the
    modules that re-export it to the one that defines it (and its package)."""
    found: set[str] = set()
    for name in names:
        seen = {name}  # ``from going_modular.models import cct`` names itself
        while _reexports().get(name, name) not in seen:
            name = _reexports()[name]
            seen.add(name)
            found.add(name.rpartition(".")[0])
    return found


def package_problems(path: Path) -> list[str]:
    """Imports of a package file that a plain ``pip install`` (no extras) cannot meet."""
    top, inner = _imports(ast.parse(path.read_text(encoding="utf-8")))
    core = dependencies()
    every_extra = dependencies(tuple(_project().get("optional-dependencies", {})))
    problems = [
        f"{module} (imported at module level: not a dependency of the package)"
        for module in sorted(_top(top))
        if not provided_by(module, core)
    ]
    problems += [
        f"{module} (imported in a function: neither a dependency nor an extra)"
        for module in sorted(_top(inner) - _top(top) - KERNEL_MODULES)
        if not provided_by(module, every_extra)
    ]
    return problems


def setup_installs(cells: list[str]) -> tuple[tuple[str, ...], set[str]] | None:
    """(extras, modules whose absence triggers the install) of the setup cell, or None."""
    for code in cells:
        match = INSTALL.search(code)
        if match:
            extras = tuple(e.strip() for e in (match.group(1) or "").split(",") if e)
            checked = set(re.findall(r'"(\w+)"', code.split("REPO_URL =")[1]))
            return extras, checked
    return None


def chapter_problems(path: Path) -> list[str]:
    """Modules the chapter imports that a fresh Colab runtime would not have."""
    cells = _code_cells(path)
    installs = setup_installs(cells)
    available = colab_distributions()
    if installs is not None:
        available |= dependencies(installs[0])
    names: set[str] = set()
    for code in cells:
        top, inner = _imports(ast.parse(code))
        names |= top | inner
    # the modules that define the names imported (through any re-export), and what the
    # package modules the chapter uses import lazily (e.g. an extra)
    names |= defining_modules(names)
    package = _package_module_imports()
    for name in list(names):
        if name in package:
            names |= package[name][1]
    problems = []
    for module in sorted(_top(names)):
        if module in OWN_MODULES and installs is None:
            problems.append(f"{module} (the setup cell does not install the package)")
        elif not provided_by(module, available) and module not in KERNEL_MODULES:
            problems.append(module)
    if installs is not None:
        extras, checked = installs
        for dist in sorted(dependencies(extras) - dependencies()):
            modules = {m for m, d in _distributions_of().items() if dist in d}
            if not modules & checked:
                problems.append(
                    f"{dist} (the setup cell installs it but does not check for it, so "
                    "it is skipped when the package is already there)"
                )
    return problems


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name[:2])
def test_chapter_imports_are_on_colab_or_installed_by_its_setup_cell(path):
    assert chapter_problems(path) == []


@pytest.mark.parametrize("path", PACKAGE_FILES, ids=lambda p: p.stem)
def test_package_imports_need_only_its_dependencies(path):
    assert package_problems(path) == []


def test_every_chapter_installs_the_package_from_its_setup_cell():
    for path in CHAPTERS:
        assert setup_installs(_code_cells(path)) is not None, path.name


def test_the_colab_list_names_its_source_and_date():
    header = (ROOT / "colab" / "preinstalled.txt").read_text()
    assert "googlecolab/backend-info" in header
    assert re.search(r"date:\s+\d{4}-\d{2}-\d{2}", header)
    assert {"torch", "torchvision", "numpy", "ipykernel"} <= colab_distributions()


def _notebook(tmp_path: Path, *sources: str) -> Path:
    cells = [
        {"cell_type": "code", "metadata": {}, "source": s, "outputs": []}
        for s in sources
    ]
    path = tmp_path / "99_synthetic.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4}))
    return path


def _setup_cell(extras: str = "", checked: str = '"going_modular"') -> str:
    package = f"vit-from-scratch[{extras}] @ " if extras else ""
    return (
        'REPO_URL = "https://github.com/example/book"\n'
        f"if any(importlib.util.find_spec(m) is None for m in ({checked},)):\n"
        f'    pip_install(f"{package}git+{{REPO_URL}}")\n'
    )


def test_a_chapter_importing_what_colab_lacks_fails(tmp_path):
    path = _notebook(
        tmp_path,
        _setup_cell(),
        "import numpy\nimport not_a_real_module_xyz\nfrom mlflow import MlflowClient",
    )
    assert chapter_problems(path) == ["mlflow", "not_a_real_module_xyz"]


def test_a_chapter_without_the_setup_cell_cannot_import_the_package(tmp_path):
    path = _notebook(tmp_path, "from going_modular import engine\nimport timm")
    problems = chapter_problems(path)
    assert problems == ["going_modular (the setup cell does not install the package)"]


@pytest.mark.parametrize(
    "uses_tracking",
    [
        "from vitbook.training import tracking",
        "from vitbook.training.tracking import fit_logged",
    ],
)
def test_using_tracking_needs_the_extra(tmp_path, uses_tracking):
    without = _notebook(tmp_path, _setup_cell(), uses_tracking)
    assert "mlflow" in chapter_problems(without)
    checked = '"going_modular", "mlflow", "ax"'
    with_extra = _notebook(tmp_path, _setup_cell("tracking", checked), uses_tracking)
    assert chapter_problems(with_extra) == []


def test_a_name_is_followed_through_re_exports_to_its_module():
    assert defining_modules({"helper_functions.set_seeds"}) == {"going_modular.utils"}
    assert defining_modules({"going_modular.models.build_model"}) == {
        "going_modular.models.registry"
    }
    assert defining_modules({"going_modular.data_setup.walk_through_dir"}) == set()


def test_an_extra_the_setup_cell_does_not_check_for_is_flagged(tmp_path):
    cell = _setup_cell("tracking", '"going_modular", "ax"')
    problems = chapter_problems(_notebook(tmp_path, cell, "import ax"))
    assert problems == [
        "mlflow (the setup cell installs it but does not check for it, so it is "
        "skipped when the package is already there)"
    ]


def test_a_package_module_importing_an_extra_at_module_level_fails(tmp_path):
    module = tmp_path / "bad.py"
    module.write_text(
        "import torch\nimport mlflow\n\n\ndef f():\n    import not_a_real_module_xyz\n"
    )
    assert package_problems(module) == [
        "mlflow (imported at module level: not a dependency of the package)",
        "not_a_real_module_xyz (imported in a function: neither a dependency nor an extra)",
    ]


def test_two_colab_checks_never_share_the_environment(monkeypatch):
    """scripts/colab_check.py holds .venv-colab alone: a second check at the same time
    stops at once instead of uninstalling packages from under the first one's chapter."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "colab_check", ROOT / "scripts" / "colab_check.py"
    )
    colab_check = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "colab_check", colab_check)  # for its dataclasses
    spec.loader.exec_module(colab_check)
    with colab_check._only_check_running():
        with pytest.raises(SystemExit, match="Another colab-check is running"):
            with colab_check._only_check_running():
                pass
    with colab_check._only_check_running():  # free again once the first one ends
        pass
