"""The book's switches, read from the environment.

* ``BOOK_SETTING`` picks how big every chapter's experiments are:

  - ``quick``: CI. Each chapter at most about 3 minutes on 2 CPU cores; runs only show that
    the code works.
  - ``cpu``: a reader's laptop. Each chapter at most about 10 minutes on 2 CPU cores, sized
    so that every experiment shows its lesson. The book's stored outputs come from it.
  - ``full``: a GPU, the papers' settings.

  Unset, it is ``full`` when a CUDA GPU is present and ``cpu`` otherwise.
* ``BOOK_OFFLINE``: ``1`` means never touch the network; every dataset getter reads local
  files (Fashion-MNIST from Debian's package) or its labelled stand-in. CI sets it.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import TypeVar

import torch

SETTINGS = ("quick", "cpu", "full")
_DESCRIPTIONS = {
    "quick": "QUICK (CI: each chapter <= ~3 min on 2 CPU cores; runs check the code, not lessons)",
    "cpu": "CPU (a laptop: each chapter <= ~10 min on 2 CPU cores, sized to show each lesson)",
    "full": "FULL (a GPU: the papers' settings)",
}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
T = TypeVar("T")
_SAME_AS_QUICK = object()


def setting() -> str:
    """The setting in force: ``"quick"``, ``"cpu"`` or ``"full"`` (see the module's doc)."""
    value = os.environ.get("BOOK_SETTING", "").strip().lower()
    if not value:
        return "full" if torch.cuda.is_available() else "cpu"
    if value not in SETTINGS:
        raise ValueError(
            f"BOOK_SETTING={value!r} is not understood; set it to one of {SETTINGS}."
        )
    return value


def is_quick() -> bool:
    """True in the quick setting (CI)."""
    return setting() == "quick"


def is_offline() -> bool:
    """True when the network must not be touched (``BOOK_OFFLINE=1``)."""
    value = os.environ.get("BOOK_OFFLINE", "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"BOOK_OFFLINE={value!r} is not understood; set it to 1 or 0.")


def pick(quick: T, full: T, cpu: T = _SAME_AS_QUICK) -> T:  # type: ignore[assignment]
    """The value for the setting in force: ``EPOCHS = pick(quick=1, cpu=8, full=200)``.

    Without ``cpu=``, the cpu setting takes the quick value (for cells that are already fast).
    """
    name = setting()
    if name == "full":
        return full
    if name == "cpu" and cpu is not _SAME_AS_QUICK:
        return cpu
    return quick


def hardware() -> str:
    """What this run executes on: the GPU's name, or the CPU's model and core count."""
    if torch.cuda.is_available():
        return f"cuda ({torch.cuda.get_device_name(0)})"
    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"cpu ({model}; {os.cpu_count()} cores, torch uses {torch.get_num_threads()} threads)"


def describe() -> str:
    """The setting, the network switch and the hardware, for a chapter's first output."""
    network = "offline (local data only)" if is_offline() else "online"
    return (
        f"Setting: {_DESCRIPTIONS[setting()]}\n"
        f"Network: {network} | hardware: {hardware()} | torch {torch.__version__}"
    )
