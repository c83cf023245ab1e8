"""Run every chapter alone, as a reader does on a fresh Colab runtime (``make colab-check``).

1. A virtual environment (``.venv-colab``) holds only Colab's preinstalled packages that
   ``colab/preinstalled.txt`` lists, at Colab's versions (their dependencies too, from
   ``colab/pip-freeze.gpu.txt``, where this Python can install them); torch and
   torchvision at the versions of ``make install`` (pip reuses the files it has).
2. Each chapter is copied alone into an empty folder and executed (quick setting,
   ``BOOK_OFFLINE=1``) in a kernel of that environment. Its setup cell installs the book's
   package as on Colab, ``pip install "vit-from-scratch @ git+<repository>"``: git fetches
   that address from a clean copy of this working tree instead of GitHub (git's
   ``url.<copy>.insteadOf``), so the check runs the cell's own install, chapter 12's
   ``tracking`` extra included.
3. After each chapter the environment goes back to Colab's packages, and a table reports
   chapter, seconds, result and the packages its setup cell installed.

Usage: ``python scripts/colab_check.py [CHAPTER ...]`` (default: all; e.g. ``00 12``).
Exit status 1 if any chapter fails. Executed notebooks land in ``_build/colab-check/``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import nbformat
import yaml
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

ROOT = Path(__file__).resolve().parents[1]
PREINSTALLED = ROOT / "colab" / "preinstalled.txt"
FREEZE = ROOT / "colab" / "pip-freeze.gpu.txt"  # all of Colab's packages, for versions
VENV = ROOT / ".venv-colab"
STAMP = VENV / ".colab-check.json"
OUTPUT = ROOT / "_build" / "colab-check"
KERNEL = "colab-check"
PACKAGE = "vit-from-scratch"
NEVER_REINSTALLED = ("torch", "torchvision")
CELL_TIMEOUT = 1800  # seconds; the quick setting needs far less
ENV = {
    "BOOK_SETTING": "quick",
    "BOOK_OFFLINE": "1",
    "PYTHONHASHSEED": "0",
    "PYDEVD_DISABLE_FILE_VALIDATION": "1",  # ipykernel's debugger warning
}


def _run(*args: str | Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], check=True, **kwargs)


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str:
    return _normalise(re.split(r"[\s\[=<>~!;(@]", requirement)[0])


def colab_requirements() -> list[str]:
    """The list's requirements, torch and torchvision at this environment's versions."""
    specs = []
    for line in PREINSTALLED.read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        name = _requirement_name(line)
        if name in NEVER_REINSTALLED:
            line = f"{name}=={metadata.version(name)}"
        specs.append(line)
    return specs


def colab_versions() -> dict[str, str]:
    """Every package of Colab's freeze pinned to a public version: name -> version."""
    pins = (line.split("==") for line in FREEZE.read_text().splitlines())
    return {_normalise(p[0]): p[1] for p in pins if len(p) == 2 and "+" not in p[1]}


def _closure(names: tuple[str, ...]) -> set[str]:
    """``names`` and their dependencies, recursively, as installed here (normalised)."""
    found: set[str] = set()
    todo = [_normalise(n) for n in names]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        try:
            requirements = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [_requirement_name(r) for r in requirements if "extra ==" not in r]
    return found


def _relaxed(spec: str) -> str:
    """``numpy==2.1.3`` -> ``numpy~=2.1.0`` (the newest 2.1.x); torch stays exact."""
    name, _, version = spec.partition("==")
    if name in NEVER_REINSTALLED or version.count(".") < 1:
        return spec
    major, minor = version.split(".")[:2]
    return f"{name}~={major}.{minor}.0"


def build_venv() -> Path:
    """``.venv-colab`` with Colab's packages (rebuilt when the lists change); its python."""
    python = VENV / "bin" / "python"
    specs = colab_requirements()
    ours = _closure(NEVER_REINSTALLED)  # torch, torchvision and theirs: as in .venv
    pinned = {n: v for n, v in colab_versions().items() if n not in ours}
    if STAMP.exists() and json.loads(STAMP.read_text()) == [specs, pinned]:
        return python
    shutil.rmtree(VENV, ignore_errors=True)
    print(f"[colab-check] building {VENV.name}: {len(specs)} packages", flush=True)
    _run(sys.executable, "-m", "venv", VENV)
    # Their dependencies at Colab's versions too, except those pip cannot install here
    # (a version for Colab's newer Python): pip names them as "(constraint)" conflicts.
    constraints = VENV / "colab-constraints.txt"
    install = [str(python), "-m", "pip", "install"]
    usable = dict(pinned)
    for _ in range(10):
        constraints.write_text("".join(f"{n}=={v}\n" for n, v in usable.items()))
        done = subprocess.run(
            [*install, "-c", str(constraints), *specs], capture_output=True, text=True
        )
        conflicts = re.findall(r"\(constraint\) ([\w.-]+)==", done.stdout + done.stderr)
        if done.returncode == 0 or not conflicts:
            break
        print(f"[colab-check] not at Colab's versions here: {conflicts}", flush=True)
        for name in conflicts:
            usable.pop(_normalise(name), None)
    if done.returncode != 0:
        relaxed = [_relaxed(s) for s in specs]
        print(done.stderr[-2000:], file=sys.stderr)
        print(f"[colab-check] exact versions failed; trying {relaxed}", flush=True)
        _run(*install, "-q", *relaxed)
    STAMP.write_text(json.dumps([specs, pinned]))
    return python


def installed(python: Path) -> dict[str, str]:
    """Distribution name (normalised) -> version, in the environment of ``python``."""
    listing = _run(
        python, "-m", "pip", "list", "--format=json", capture_output=True, text=True
    ).stdout
    return {_normalise(p["name"]): p["version"] for p in json.loads(listing)}


def restore(python: Path, baseline: dict[str, str]) -> None:
    """Uninstall what a chapter added and put back any version it changed."""
    now = installed(python)
    added = sorted(set(now) - set(baseline))
    changed = [f"{n}=={v}" for n, v in baseline.items() if now.get(n) != v]
    if added:
        _run(python, "-m", "pip", "uninstall", "-q", "-y", *added)
    if changed:
        _run(python, "-m", "pip", "install", "-q", "--no-deps", *changed)


def clean_copy(destination: Path) -> Path:
    """This working tree's files (tracked or not ignored) as a one-commit git repository."""
    files = ["ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    listed = _run("git", *files, cwd=ROOT, capture_output=True).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file() and not source.is_relative_to(VENV):
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    identity = ["-c", "user.name=colab-check", "-c", "user.email=colab-check@localhost"]
    _run("git", "init", "-q", cwd=destination)
    _run("git", "add", "-A", cwd=destination)
    _run("git", *identity, "commit", "-q", "-m", "working tree", cwd=destination)
    return destination


def use_kernel_environment(python: Path, copy: Path, jupyter: Path) -> None:
    """The kernels' environment (they inherit this process's): quick, offline, the Colab
    environment's python first on PATH, nothing from this checkout on sys.path, and
    GitHub's address served by ``copy``; plus the kernel spec that starts them."""
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    for name in ("PYTHONPATH", "VIRTUAL_ENV", "BOOK_DATA_DIR"):
        os.environ.pop(name, None)
    os.environ.update(ENV)
    os.environ["PATH"] = f"{python.parent}{os.pathsep}{os.environ['PATH']}"
    os.environ["GIT_CONFIG_COUNT"] = "1"
    os.environ["GIT_CONFIG_KEY_0"] = f"url.{copy.as_uri()}.insteadOf"
    os.environ["GIT_CONFIG_VALUE_0"] = url
    os.environ["JUPYTER_PATH"] = str(jupyter)
    spec = jupyter / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    kernel = {"argv": argv, "display_name": KERNEL, "language": "python"}
    (spec / "kernel.json").write_text(json.dumps(kernel))


def package_names() -> set[str]:
    """The book's package and every requirement of it and its extras (normalised)."""
    requirements = metadata.requires(PACKAGE) or []
    return {_requirement_name(r) for r in requirements} | {PACKAGE}


@dataclass
class Result:
    chapter: str
    seconds: float = 0.0
    error: str = ""
    added: dict[str, str] = field(default_factory=dict)
    changed: list[str] = field(default_factory=list)

    def row(self, direct: set[str], on_colab: set[str]) -> str:
        mine = sorted(n for n in self.added if n in direct)
        others = [n for n in self.added if n not in direct]
        packages = ", ".join(f"{n} {self.added[n]}" for n in mine) or "none"
        if others:
            known = sum(n in on_colab for n in others)
            packages += f" + {len(others)} dependencies ({known} of them on Colab)"
        if self.changed:
            packages += "; CHANGED Colab's " + ", ".join(self.changed)
        result = "pass" if not self.error else "FAIL"
        return f"| {self.chapter} | {self.seconds:.0f} | {result} | {packages} |"


def run_chapter(path: Path, python: Path, baseline: dict[str, str]) -> Result:
    result = Result(path.stem)
    with tempfile.TemporaryDirectory(prefix=f"colab-{path.stem[:2]}-") as folder:
        alone = Path(folder) / path.name
        shutil.copy2(path, alone)
        prepared = (
            ROOT / "data" / "FashionMNIST" / "raw"
        )  # `make data`, if it was needed
        if prepared.is_dir():
            (Path(folder) / "data").mkdir()
            (Path(folder) / "data" / "fashion-mnist").symlink_to(prepared)
        nb = nbformat.read(alone, as_version=4)
        client = NotebookClient(
            nb,
            kernel_name=KERNEL,
            timeout=CELL_TIMEOUT,
            resources={"metadata": {"path": folder}},
        )
        start = time.perf_counter()
        try:
            client.execute()
        except (CellExecutionError, CellTimeoutError, DeadKernelError) as error:
            result.error = _first_error(nb) or str(error).strip().splitlines()[-1]
        result.seconds = time.perf_counter() - start
    OUTPUT.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, OUTPUT / path.name)
    now = installed(python)
    result.added = {n: v for n, v in now.items() if n not in baseline}
    result.changed = [
        f"{n} {v} -> {now.get(n, 'removed')}"
        for n, v in baseline.items()
        if now.get(n) != v
    ]
    if any(c.split()[0] in NEVER_REINSTALLED for c in result.changed):
        result.error = result.error or "the setup cell reinstalled torch or torchvision"
    return result


def _first_error(nb) -> str:
    for index, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                return f"cell {index}: {out['ename']}: {out['evalue']}"
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapters", nargs="*", help="chapter numbers, e.g. 00 12")
    args = parser.parse_args(argv)
    chapters = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
    if args.chapters:
        chapters = [p for p in chapters if p.name[:2] in args.chapters]
    with _only_check_running():
        return _check(chapters)


@contextlib.contextmanager
def _only_check_running():
    """Hold .venv-colab for this check alone: a second check at the same time would
    uninstall (restore) the packages this one's chapter is importing, from under its
    kernel and the processes the kernel starts."""
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(ROOT / ".venv-colab.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            sys.exit("Another colab-check is running in this checkout; wait for it.")
        yield


def _check(chapters: list[Path]) -> int:
    python = build_venv()
    baseline = installed(python)
    direct, on_colab = package_names(), set(colab_versions())
    results = []
    with tempfile.TemporaryDirectory(prefix="colab-check-") as work:
        copy = clean_copy(Path(work) / "vision-transformers-from-scratch")
        use_kernel_environment(python, copy, Path(work) / "jupyter")
        for path in chapters:
            print(f"[colab-check] {path.name} ...", flush=True)
            results.append(run_chapter(path, python, baseline))
            print(f"[colab-check] {results[-1].row(direct, on_colab)}", flush=True)
            restore(python, baseline)
    print("\n| chapter | seconds | result | packages the setup cell installed |")
    print("|---|---:|---|---|")
    for result in results:
        print(result.row(direct, on_colab))
    for result in results:
        if result.error:
            print(f"{result.chapter}: {result.error}")
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
