"""The book's switches, read from the environment.

* ``BOOK_SETTING`` picks how big every chapter's experiments are:

  - ``quick``: CI. Each chapter at most about 3 minutes on 2 CPU cores; runs only show that
    the code works.
  - ``cpu``: a reader's laptop. Each chapter at most about 20 minutes on 2 idle CPU cores (a
    recent 8-core laptop runs that in about a quarter of the time), sized so that every
    experiment shows its lesson. The book's stored outputs come from it.
  - ``gpu``: a Colab T4 (16 GB). Each chapter at most about 15 minutes, on the papers'
    datasets (CIFAR-10, pizza/steak/sushi, ImageNet-pretrained ViT-B/16) when online.
  - ``full``: the papers' settings; hours on a GPU. Opt-in only.

  Unset, it is ``gpu`` when a CUDA GPU is present (or in a dry run) and ``cpu`` otherwise.
* ``BOOK_OFFLINE``: ``1`` means never touch the network; every dataset getter reads local
  files (Fashion-MNIST from Debian's package) or its labelled stand-in. CI sets it.
* ``BOOK_DRY_RUN``: ``1`` runs a chapter's code paths with every loop capped at
  :data:`DRY_RUN_STEPS` steps (see :func:`cap`), e.g. the gpu setting on a CPU in CI.
* ``BOOK_FIXTURES``: ``1`` says that the online datasets and weights are small local test
  fixtures (served by ``tests/dry_run_fixtures.py``); every getter says so loudly.
* ``BOOK_CHECKPOINT_DIR``: where the gpu and full settings' training runs keep their
  per-epoch checkpoints (default ``./runs``); point it at Google Drive on Colab.
* ``BOOK_DATA_DIR`` (where datasets land; default the checkout's ``data/``),
  ``BOOK_MIRROR`` (a server with the course's zips), ``BOOK_DEBIAN_FASHION_MNIST`` (where
  Debian's Fashion-MNIST package is installed) and ``BOOK_MLFLOW_URI`` (the MLflow store):
  passed to the library by :func:`apply_to_library`, which never reads them itself.

Importing this module never fails: a value not understood (``BOOK_OFFLINE=maybe``) keeps
the library offline and raises its clear ValueError when the switch is first asked for
(:func:`describe_setting`, which every chapter calls first, asks for each of them). The
command line reads none of these: a chapter passes them as its options
(:func:`cli_options`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch

from vitbook.data import network, paths
from vitbook.training import tracking

__all__ = [
    "SETTINGS",
    "DRY_RUN_STEPS",
    "T4_FP16_PEAK",
    "T4_FP32_PEAK",
    "STEP_OVERHEAD_S",
    "Work",
    "apply_to_library",
    "capped",
    "ClaimError",
    "cap",
    "checkpoint_root",
    "claim",
    "cli_options",
    "describe_setting",
    "dry_run_steps",
    "gpu_plan",
    "hardware",
    "is_dry_run",
    "is_offline",
    "is_quick",
    "pick",
    "run_dir",
    "run_report",
    "setting",
    "uses_fixtures",
]

SETTINGS = ("quick", "cpu", "gpu", "full")
_DESCRIPTIONS = {
    "quick": "QUICK (CI, 2 CPU cores: <= ~3 min a chapter; checks code, not lessons)",
    "cpu": "CPU (2 idle cores: <= ~20 min a chapter, sized to show each lesson)",
    "gpu": "GPU (a Colab T4: <= ~15 min a chapter, the papers' datasets)",
    "full": "FULL (the papers' settings: hours on a GPU)",
}
DRY_RUN_STEPS = 2
# NVIDIA T4 datasheet peaks: fp16/fp32 mixed precision on tensor cores, and plain fp32.
T4_FP16_PEAK = 65e12
T4_FP32_PEAK = 8.1e12
# What a T4 achieves on the book's mid-size models (a judgement, not a measurement here):
# small kernels, attention's softmax and LayerNorms keep a transformer far from peak.
_ACHIEVED = {True: 0.25, False: 0.5}  # amp (fp16 autocast) -> fraction of the fp16 peak
# Small models are launch-bound, not compute-bound: a training step (forward, backward,
# optimiser) launches hundreds of kernels of ~10 us each; a test batch about a third.
STEP_OVERHEAD_S = {True: 5e-3, False: 1.5e-3}  # training -> seconds per batch
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
_WIDTH = 80
T = TypeVar("T")
RecipeT = TypeVar("RecipeT")
_UNSET = object()
# Which value each setting takes in pick(): its own, else the next one given.
_PICK_ORDER = {
    "quick": ("quick",),
    "cpu": ("cpu", "quick"),
    "gpu": ("gpu", "cpu", "quick"),
    "full": ("full",),
}


def _flag(name: str) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{name}={value!r} is not understood; set it to 1 or 0.")


def is_dry_run() -> bool:
    """True when every loop is capped at a few steps (``BOOK_DRY_RUN=1``)."""
    return _flag("BOOK_DRY_RUN")


def dry_run_steps() -> int | None:
    """The step cap of a dry run (:data:`DRY_RUN_STEPS`), or None when this is no dry run."""
    return DRY_RUN_STEPS if is_dry_run() else None


def cap(n: T, at: int | None = None) -> T:
    """``n``, or at most ``at`` (default :data:`DRY_RUN_STEPS`) in a dry run.

    ``n`` is a count (steps, epochs, seconds, images per class), ``None`` for "no limit"
    (``max_steps_per_epoch=cap(None)`` is None normally and the cap in a dry run), or a
    sequence such as the seeds to run over, then cut to its first ``at`` items.
    """
    if not is_dry_run():
        return n
    limit = DRY_RUN_STEPS if at is None else at
    if n is None:
        return limit
    return n[:limit] if isinstance(n, (list, tuple, range)) else min(n, limit)


def capped(recipe: RecipeT) -> RecipeT:
    """``recipe`` as it is, or in a dry run with its training and test passes cut to
    :data:`DRY_RUN_STEPS` batches each: ``fit(model, train, test, capped(recipe))``."""
    if not is_dry_run():
        return recipe
    return dataclasses.replace(
        recipe,
        max_steps_per_epoch=cap(recipe.max_steps_per_epoch),
        max_eval_steps=cap(recipe.max_eval_steps),
    )


def uses_fixtures() -> bool:
    """True when online data and weights come from local test fixtures (``BOOK_FIXTURES=1``)."""
    return _flag("BOOK_FIXTURES")


def apply_to_library() -> None:
    """Pass the book's variables to the library, which never reads the book's environment
    itself: ``BOOK_OFFLINE`` and ``BOOK_FIXTURES`` to :mod:`~vitbook.data.network`,
    ``CI`` (whether a stand-in may replace Fashion-MNIST), ``BOOK_DATA_DIR``, ``BOOK_MIRROR`` and ``BOOK_DEBIAN_FASHION_MNIST`` to
    :mod:`~vitbook.data.paths`, ``BOOK_MLFLOW_URI`` to
    :mod:`~vitbook.training.tracking`. Done when this module is imported.

    Raises ValueError for a switch not understood (``BOOK_OFFLINE=maybe``), after
    passing every other variable, the library left offline."""
    # CI tests real data: no stand-in there
    network.set_stand_ins(os.environ.get("CI", "").lower() != "true")
    paths.set_data_dir(os.environ.get("BOOK_DATA_DIR"))
    paths.set_mirror(os.environ.get("BOOK_MIRROR"))
    paths.set_debian_fashion_mnist(os.environ.get("BOOK_DEBIAN_FASHION_MNIST"))
    tracking.set_tracking_uri(os.environ.get("BOOK_MLFLOW_URI"))
    network.set_offline(True)  # until BOOK_OFFLINE is understood
    network.set_fixtures(uses_fixtures())
    network.set_offline(is_offline())


def cli_options() -> list[str]:
    """The command line's options for the book's switches in force (``python -m
    vitbook.train`` reads no ``BOOK_*`` variable): ``--offline`` and ``--dry-run`` when
    they are on, and ``--data-root`` the library's data folder."""
    switches = {"--offline": is_offline(), "--dry-run": is_dry_run()}
    on = [name for name, value in switches.items() if value]
    return [*on, "--data-root", str(paths.data_dir())]


def setting() -> str:
    """The setting in force: ``"quick"``, ``"cpu"``, ``"gpu"`` or ``"full"`` (see the module)."""
    value = os.environ.get("BOOK_SETTING", "").strip().lower()
    if not value:
        return "gpu" if torch.cuda.is_available() or is_dry_run() else "cpu"
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
    return _flag("BOOK_OFFLINE")


def pick(quick: T, full: T, cpu: T = _UNSET, gpu: T = _UNSET) -> T:  # type: ignore[assignment]
    """The value for the setting in force: ``EPOCHS = pick(quick=1, cpu=8, gpu=30, full=200)``.

    Without ``cpu=``, the cpu setting takes the quick value (for cells that are already fast);
    without ``gpu=``, the gpu setting takes the cpu value.
    """
    values = {"quick": quick, "cpu": cpu, "gpu": gpu, "full": full}
    order = _PICK_ORDER[setting()]
    return next(values[name] for name in order if values[name] is not _UNSET)


def checkpoint_root(chapter: str) -> Path | None:
    """Where ``chapter``'s training runs keep per-epoch checkpoints, or None (quick, cpu).

    ``BOOK_CHECKPOINT_DIR/chapter/setting``, by default ``runs/chapter/gpu``: each setting
    its own runs. On Colab point ``BOOK_CHECKPOINT_DIR`` (or the chapter's
    ``CHECKPOINT_DIR``) at Google Drive, e.g. ``/content/drive/MyDrive/vit-book``, and a
    re-run picks up where a disconnect stopped it.
    """
    name = setting()
    if name not in ("gpu", "full"):
        return None
    return Path(os.environ.get("BOOK_CHECKPOINT_DIR") or "runs") / chapter / name


def run_dir(root: str | Path | None, name: str) -> Path | None:
    """``root/name``, the folder of one training run, or None when ``root`` is None."""
    return None if root is None else Path(root) / name


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
    return f"cpu ({model}; {os.cpu_count()} cores, {torch.get_num_threads()} threads)"


def _fit(line: str) -> str:
    return line if len(line) <= _WIDTH else line[: _WIDTH - 3] + "..."


# When the chapter started (its first describe_setting()) and the machine's load then.
_START: dict[str, float] = {}


def describe_setting() -> str:
    """The setting, network, hardware (and dry run), in at most 3 lines of <= 80 characters.

    The first call also starts the chapter's clock that :func:`run_report` reads.
    """
    if not _START:
        _START.update(time=time.monotonic(), load=_load()[0])
    network = "offline (local data only)" if is_offline() else "online"
    lines = [
        f"Setting: {_DESCRIPTIONS[setting()]}",
        f"Network: {network} | torch {torch.__version__.split('+')[0]} | {hardware()}",
    ]
    if is_dry_run() or uses_fixtures():
        lines.append(
            "DRY RUN: every loop capped at a few steps; "
            + ("data and weights are test FIXTURES" if uses_fixtures() else "real data")
        )
    return "\n".join(_fit(line) for line in lines)


@dataclass(frozen=True)
class Work:
    """One part of a chapter's compute: ``images`` through a model in batches of ``batch``.

    ``training`` parts count forward and backward, about 3x the forward MACs, and one
    optimiser step per batch.
    """

    label: str
    images: int
    macs_per_image: float
    batch: int
    training: bool = True

    @property
    def macs(self) -> float:
        return self.images * self.macs_per_image * (3 if self.training else 1)

    @property
    def overhead_s(self) -> float:
        """Kernel-launch time of its batches (:data:`STEP_OVERHEAD_S`)."""
        return math.ceil(self.images / self.batch) * STEP_OVERHEAD_S[self.training]


def _si(value: float, unit: str) -> str:
    """``value`` with an SI prefix: ``_si(1.46e9, "MAC") == "1.46 GMAC"``."""
    exponent = min(max(int(math.log10(max(value, 1)) // 3), 0), 6)
    return f"{value / 10 ** (3 * exponent):.3g} {' kMGTPE'[exponent].strip()}{unit}"


def gpu_plan(*work: Work, amp: bool = True, note: str = "") -> str:
    """The gpu setting's work and an estimate of its minutes on a Colab T4.

    The estimate assumes 25% of the T4's fp16 tensor-core peak (65 TFLOP/s) with ``amp``,
    50% of its fp32 peak (8.1 TFLOP/s) without; 1 MAC = 2 FLOP, training = 3x forward;
    plus 5 ms per training step and 1.5 ms per test batch of launch overhead. Data loading
    and downloads are not included. With no ``work``, says that nothing needs a GPU.
    ``note`` adds a last line.
    """
    lines = ["Plan in the gpu setting (a Colab T4; an estimate, not a measurement):"]
    if not work:
        lines.append("  no training here: every cell takes seconds, on a GPU or not")
    for part in work:
        kind = "x 3 (train)" if part.training else "(test)"
        lines.append(
            f"  {part.label}: {part.images:,} image{'s' * (part.images != 1)} x "
            f"{_si(part.macs_per_image, 'MAC')} {kind}"
        )
    if work:
        peak, fraction = (T4_FP16_PEAK if amp else T4_FP32_PEAK), _ACHIEVED[amp]
        flop = 2 * sum(part.macs for part in work)
        overhead = sum(part.overhead_s for part in work)
        minutes = (flop / (fraction * peak) + overhead) / 60
        precision = "fp16 autocast" if amp else "fp32"
        lines.append(
            f"  = {_si(flop, 'FLOP')} at {fraction:.0%} of the T4's {precision} peak "
            f"({peak / 1e12:.3g} TFLOP/s)"
        )
        lines.append(
            f"    + {overhead / 60:.2g} min of launch overhead (5 ms a step): "
            + (f"~{minutes:.2g} min" if minutes >= 0.1 else "< 0.1 min")
        )
    if note:
        lines.append(f"  {note}")
    return "\n".join(lines)


def _load() -> tuple[float, float, float]:
    return os.getloadavg() if hasattr(os, "getloadavg") else (math.nan,) * 3


def run_report() -> str:
    """The chapter's wall time since its first :func:`describe_setting`, and the load.

    The stored chapters end with this line, so a reader sees how long the setting took on
    what machine and whether anything else was running (load average above the core count).
    """
    if not _START:
        raise RuntimeError(
            "run_report() needs describe_setting() to have started the clock"
        )
    minutes = (time.monotonic() - _START["time"]) / 60
    one, five, fifteen = _load()
    threads = torch.get_num_threads()
    return (
        f"This chapter ran in {minutes:.1f} min ({setting()} setting, "
        f"{threads} thread{'s' * (threads != 1)} on {os.cpu_count()} cores).\n"
        f"Load average: {_START['load']:.2f} at the start; {one:.2f}, {five:.2f}, "
        f"{fifteen:.2f} over the last 1, 5, 15 min at the end."
    )


class ClaimError(AssertionError):
    """A sentence of a chapter's prose that its own run contradicts."""


def claim(sentence: str, holds: bool) -> None:
    """Check a sentence of the prose that states an experiment's outcome.

    The chapters' stored outputs come from the cpu setting, where a false claim stops the
    chapter with the sentence (as in the gpu and full settings). The quick setting's runs
    and a dry run's capped loops are too short to show most lessons, so there it only
    reports the claim as not shown.
    """
    if holds:
        print(f"Checked: {sentence}")
    elif is_quick() or is_dry_run():
        print(f"Not shown in this short run (quick setting or dry run): {sentence}")
    else:
        raise ClaimError(
            f"This run contradicts the chapter's prose: {sentence!r}. Re-run the "
            "chapter in its cpu setting on an idle machine, or correct the prose."
        )


with contextlib.suppress(ValueError):  # said when the switch is first asked for
    apply_to_library()
