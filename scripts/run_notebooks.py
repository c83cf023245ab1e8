"""Execute chapters in place and clean their outputs, so they can be committed.

Usage: ``python scripts/run_notebooks.py book/03_*.ipynb`` (``make notebooks NB=...``).

Cleaning: progress bars keep only their final state, machine paths become relative, memory
addresses are masked, and a notebook that raises is not written back (the run fails).
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]{6,}")
# A glued NumPy scalar is stored as its repr, "np.float64(0.5)", which myst-nb cannot format
# with a format spec; keep the number alone, as float() or int() of it would give.
NUMPY_SCALAR = re.compile(r"^np\.(?:float|int|uint|bool_)\w*\((.*)\)$", re.S)


def _collapse_carriage_returns(text: str) -> str:
    """Keep what a terminal would show: the text after the last carriage return of each line."""
    return "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n"))


def clean_text(text: str) -> str:
    """Remove machine-specific details from one output text."""
    text = _collapse_carriage_returns(text)
    text = text.replace(str(ROOT) + "/", "").replace(str(ROOT), ".")
    text = text.replace(str(Path.home()), "~")
    return ADDRESS.sub("", text)


def _merge_streams(outputs: list) -> list:
    """Join consecutive outputs of the same stream, as a notebook front end shows them."""
    merged: list = []
    for out in outputs:
        previous = merged[-1] if merged else None
        if (
            out.output_type == "stream"
            and previous is not None
            and previous.output_type == "stream"
            and previous.name == out.name
        ):
            previous.text += out.text
        else:
            merged.append(out)
    return merged


def clean(nb: nbformat.NotebookNode) -> None:
    """Clean every output of ``nb`` in place; drop empty stream outputs."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        kept = []
        for out in _merge_streams(cell.get("outputs", [])):
            if out.output_type == "stream":
                out.text = clean_text(out.text)
                if not out.text.strip():
                    continue
            elif "data" in out and "text/plain" in out.data:
                out.data["text/plain"] = clean_text(out.data["text/plain"])
            for key, value in out.get("data", {}).items():
                if key.endswith("text/plain") and isinstance(value, str):
                    out.data[key] = NUMPY_SCALAR.sub(r"\1", value)
            kept.append(out)
        cell.outputs = kept


def run(path: Path) -> float:
    """Execute ``path`` with its folder as the working directory; return seconds taken."""
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(
        nb,
        timeout=1800,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    seconds = time.perf_counter() - start
    clean(nb)
    nbformat.write(nb, path)
    return seconds


def main(paths: list[str]) -> None:
    for name in paths:
        seconds = run(Path(name))
        print(f"{name}: executed in {seconds:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
