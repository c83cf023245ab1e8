"""What a ``--resume`` continues: the run folder (which must be writable), its
results.json and its checkpoint, read and checked before anything is written; then, once
the model, recipe and data are built, checked to be the run's own (another model,
recipe, data or number of processes, or another run's checkpoint: :func:`run_identity`,
is refused and the run folder left as it was)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from pathlib import Path

from torch.utils.data import DataLoader

from vitbook.cli.errors import UsageError
from vitbook.training import runs
from vitbook.training.checkpoint import (
    CHECKPOINT_NAME,
    CheckpointMismatchError,
    config_mismatches,
    identity_mismatches,
    read_checkpoint,
    training_config,
)
from vitbook.training.loop import RESULT_KEYS
from vitbook.training.recipe import Recipe

__all__ = [
    "Resumed",
    "check_length",
    "check_resumable",
    "readable_checkpoint",
    "run_identity",
    "saved_run",
]


@dataclasses.dataclass(frozen=True)
class Resumed:
    """The run ``--resume`` continues: its folder, its record and results so far, and its
    training checkpoint (read, not yet matched to the model and recipe)."""

    run_dir: Path
    record: dict
    results: dict
    checkpoint: dict

    @classmethod
    def of(cls, run_dir: Path, saved: dict, checkpoint: dict) -> Resumed:
        """The run from its results.json (``saved``): the record, then the results."""
        record = {k: v for k, v in saved.items() if k not in (*RESULT_KEYS, "error")}
        results = {k: saved[k] for k in RESULT_KEYS if k in saved}
        return cls(run_dir, record, results, checkpoint)


def run_identity(record: dict) -> dict:
    """What each checkpoint of a run holds as the run it belongs to (fit's
    ``identity``): the run's id and its options as given (the seed among them), as its
    results.json records them."""
    return {"run_id": record.get("run_id"), **record.get("options", {})}


def _check_writable(resume: Path, run_dir: Path) -> None:
    """Refuse a run folder (or its output folder, which holds the lock) that cannot be
    written: a read-only mount or a folder without permission."""
    for folder in (run_dir, run_dir.parent):
        try:
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as error:
            raise UsageError(
                f"--resume {resume}: {folder} cannot be written "
                f"({error.strerror or error}), so the run cannot go on there. Make it "
                "writable, or copy the run folder somewhere writable and resume the "
                "copy"
            ) from None


def _run_folders(folder: Path) -> str:
    """The run folders in ``folder``, said for a message."""
    try:
        names = sorted(
            p.name for p in folder.iterdir() if runs.RUN_NAME.fullmatch(p.name)
        )
    except OSError:
        names = []
    if not names:
        return f"{folder} holds no run folder"
    return f"the run folders in {folder} are: {', '.join(names)}"


def _missing(resume: Path) -> UsageError | None:
    """The refusal of a ``--resume`` path that does not exist or is a dangling link."""
    if resume.exists():
        return None
    what = (
        f"is a symbolic link to {os.readlink(resume)}, which does not exist"
        if resume.is_symlink()
        else "does not exist"
    )
    return UsageError(
        f"--resume {resume} {what} ({_run_folders(resume.parent)}). Pass one of them"
    )


def _results(resume: Path, run_dir: Path) -> dict:
    """The run's results.json, or UsageError saying why it cannot be continued."""
    path = run_dir / runs.RESULTS
    try:
        text = path.read_text()
    except FileNotFoundError:
        text = None
    except OSError as error:
        raise UsageError(
            f"--resume {resume}: {path} cannot be read ({error.strerror or error})"
        ) from None
    try:
        saved = None if text is None else json.loads(text)
    except ValueError:
        raise UsageError(
            f"--resume {resume}: {path} is damaged (not valid JSON: cut short or "
            "edited), so the run's options are unknown. Put back a good copy of it, "
            "or start a new run"
        ) from None
    if not isinstance(saved, dict) or not isinstance(saved.get("options"), dict):
        raise UsageError(
            f"--resume {resume}: there is no results.json with a run's options "
            "there. Pass a run folder this command wrote, e.g. runs/latest"
        )
    return saved


def saved_run(resume: Path) -> tuple[Path, dict]:
    """The run folder ``--resume`` names and its results.json, if it can be continued
    (there, in a folder that can be written)."""
    missing = _missing(resume)
    if missing is not None:
        raise missing
    if resume.is_file() and resume.name != runs.LATEST:  # latest may be a pointer file
        raise UsageError(
            f"--resume {resume} is a file: pass the run folder, e.g. --resume "
            f"{resume.parent}"
        )
    run_dir = runs.resolve_run(resume)
    saved = _results(resume, run_dir)
    if saved.get("status") == "complete":
        raise UsageError(
            f"--resume {resume}: that run is complete "
            f"({saved.get('epochs_completed')} epochs), so there is nothing to continue. "
            "Start a new run to train for longer"
        )
    checkpoint = run_dir / CHECKPOINT_NAME
    if checkpoint.exists() and not checkpoint.is_file():
        raise UsageError(
            f"--resume {resume}: {checkpoint} is not a file (a folder?), so the run's "
            f"training state is lost ({saved.get('epochs_completed')} epoch(s) are "
            f"kept in {runs.MODEL} and {runs.RESULTS}). Put back the file, or start "
            "a new run"
        )
    if not checkpoint.is_file() and saved.get("epochs_completed"):
        raise UsageError(
            f"--resume {resume}: {checkpoint} is missing, so the run's training state "
            f"is lost ({saved['epochs_completed']} epoch(s) are kept in {runs.MODEL} "
            f"and {runs.RESULTS}). Put back the file, or start a new run"
        )
    if not checkpoint.is_file():
        raise UsageError(
            f"--resume {resume}: that run stopped before its first epoch was "
            "complete, so there is nothing to continue from. Start it again without "
            "--resume"
        )
    _check_writable(resume, run_dir)
    return run_dir, saved


def readable_checkpoint(resume: Path, run_dir: Path) -> dict:
    """The run's checkpoint.pth, or UsageError saying why it cannot be continued."""
    try:
        return read_checkpoint(run_dir)
    except CheckpointMismatchError as error:
        raise UsageError(
            f"--resume {resume}: {error} ({run_dir} was left as it is: its completed "
            "epochs are in model.pth and results.json; start a new run to train again)"
        ) from None


def check_length(resumed: Resumed, epochs: int) -> None:
    """Refuse a checkpoint of more epochs than the run plans (another run's), or whose
    results are not those of its epochs."""
    done = resumed.checkpoint.get("epoch")
    if not isinstance(done, int) or not 0 < done <= epochs:
        raise UsageError(
            f"--resume {resumed.run_dir}: its {CHECKPOINT_NAME} holds epoch {done!r}, but "
            f"the run plans {epochs} epoch(s), so that checkpoint is not this run's. Put "
            "the run's own checkpoint back, or start a new run"
        )
    results = resumed.checkpoint.get("results")
    lengths = {len(v) for v in results.values()} if isinstance(results, dict) else set()
    if lengths != {done}:
        raise UsageError(
            f"--resume {resumed.run_dir}: its {CHECKPOINT_NAME} holds epoch {done} but "
            f"results of {sorted(lengths) or 'no'} epoch(s), so it was edited or damaged. "
            "Put the run's own checkpoint back, or start a new run"
        )


def _check_world_size(resumed: Resumed, world_size: int) -> None:
    """Refuse to resume under another number of processes than the checkpoint's: its
    data order, random states and schedule are those of that many."""
    saved = resumed.checkpoint.get("config", {}).get("world_size", 1)
    if saved != world_size:
        how = (
            "python -m vitbook.train"
            if saved == 1
            else f"torchrun --nproc_per_node={saved} -m vitbook.train (or "
            f"--nnodes x --nproc_per_node = {saved} processes)"
        )
        raise UsageError(
            f"--resume {resumed.run_dir}: that run was trained by {saved} process(es) "
            f"and this one has {world_size}. Resume it as it ran: {how} --resume "
            f"{resumed.run_dir}"
        )


def check_resumable(
    resumed: Resumed,
    current: runs.Run,
    train_dl: DataLoader,
    recipe: Recipe,
    world_size: int,
) -> None:
    """Refuse (UsageError, before anything is written) a checkpoint that another model,
    recipe, data or number of processes made, or another run (:func:`run_identity`): it
    is not this run's to continue."""
    _check_world_size(resumed, world_size)
    optimizer = recipe.build_optimizer(current.model)
    per_epoch = min(len(train_dl), recipe.max_steps_per_epoch or math.inf)
    scheduler = recipe.build_schedule(optimizer, recipe.epochs * per_epoch)
    ours = training_config(
        current.model, recipe, recipe.epochs, optimizer, scheduler, world_size
    )
    problems = config_mismatches(resumed.checkpoint.get("config", {}), ours)
    saved = resumed.record  # runs from before it recorded the data: not compared
    data = [k for k in ("class_names", "train_images", "test_images") if k in saved]
    problems += config_mismatches(saved, {k: current.record[k] for k in data})
    listings = current.record.get("data_sha256", {})
    changed = [
        s for s, h in saved.get("data_sha256", {}).items() if listings.get(s) != h
    ]
    if changed:
        problems.append(
            f"the {' and '.join(changed)} image files were renamed, moved between "
            "classes, added, removed or changed in size since the run began"
        )
    if problems:
        raise UsageError(
            f"--resume {current.dir}: its {CHECKPOINT_NAME} does not belong to this run "
            f"({'; '.join(problems)}). Nothing was changed: put the run's own "
            f"{CHECKPOINT_NAME} and data back, or start a new run"
        )
    others = identity_mismatches(
        resumed.checkpoint.get("config", {}).get("run"), run_identity(resumed.record)
    )
    if others:
        raise UsageError(
            f"--resume {current.dir}: its {CHECKPOINT_NAME} is another run's "
            f"({'; '.join(others)}). Nothing was changed: put the run's own "
            f"{CHECKPOINT_NAME} back, or start a new run"
        )
