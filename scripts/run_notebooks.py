"""Execute chapters in place and clean their outputs, so they can be committed.

Usage: ``python scripts/run_notebooks.py book/03_*.ipynb`` (``make notebooks NB=...``).

Cleaning: progress bars (tqdm's lines) are removed, machine paths become relative, memory
addresses are masked, and a notebook that raises is not written back (the run fails).

Stored outputs must come from an idle machine: the script refuses to start while the load
average is above ``MAX_LOAD`` (``--force`` overrides it, for a look that is not committed).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parents[1]
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]{6,}")
# A tqdm line: "desc: 100%|#####| 16/16 [02:45<00:00, 10.31s/it]" (any bar, any rate).
PROGRESS_BAR = re.compile(r"^.*\|\s*\d+/\d+ \[[\d:]+<[\d:?]+.*\]\s*$")
MAX_LOAD = 1.5
# A glued NumPy scalar is stored as its repr, "np.float64(0.5)", which myst-nb cannot format
# with a format spec; keep the number alone, as float() or int() of it would give.
NUMPY_SCALAR = re.compile(r"^np\.(?:float|int|uint|bool_)\w*\((.*)\)$", re.S)


def _collapse_carriage_returns(text: str) -> str:
    """Keep what a terminal would show: the text after the last carriage return of each line."""
    return "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n"))


def clean_text(text: str) -> str:
    """Remove machine-specific details from one output text."""
    text = _collapse_carriage_returns(text)
    text = "\n".join(line for line in text.split("\n") if not PROGRESS_BAR.match(line))
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
    """Execute ``path`` with its folder as the working directory; return seconds taken.

    A chapter that raises is not written back; its outputs up to the error are kept in
    the temporary folder, for a look at what the run printed before it stopped.
    """
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    try:
        NotebookClient(
            nb,
            timeout=1800,
            kernel_name="python3",
            resources={"metadata": {"path": str(path.parent)}},
        ).execute()
    except CellExecutionError:
        failed = Path(tempfile.gettempdir()) / f"{path.stem}.failed.ipynb"
        clean(nb)
        nbformat.write(nb, failed)
        print(f"{path}: failed; its outputs so far are in {failed}", file=sys.stderr)
        raise
    seconds = time.perf_counter() - start
    clean(nb)
    nbformat.write(nb, path)
    return seconds


def check_idle(max_load: float = MAX_LOAD, wait_s: float = 180) -> None:
    """Refuse to store outputs from a busy machine: its timings would mislead readers.

    After a chapter the load average still counts that chapter's own threads, so this
    waits up to ``wait_s`` seconds for the 1-minute average to settle below 1.
    """
    deadline = time.monotonic() + wait_s
    while os.getloadavg()[0] > 1.0 and time.monotonic() < deadline:
        time.sleep(10)
    load = os.getloadavg()[0]
    if load > max_load:
        sys.exit(
            f"The load average is {load:.2f} (> {max_load}): stored outputs must come from an "
            "idle machine. Stop other jobs and wait, or pass --force for a run you will not "
            "commit."
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--force", action="store_true", help="run on a busy machine")
    args = parser.parse_args(argv)
    for path in args.notebooks:
        if not args.force:
            check_idle()
        seconds = run(path)
        print(
            f"{path}: executed in {seconds:.0f} s (load average now {os.getloadavg()[0]:.2f})"
        )


if __name__ == "__main__":
    main()
