"""Training checkpoints: what :func:`~vitbook.training.loop.fit` saves after each
epoch, and resumes from; and checksummed files (:func:`write_verified`, :func:`load_verified`).

A checkpoint is one file, ``checkpoint_dir/checkpoint.pth`` (:data:`CHECKPOINT_NAME`),
written atomically after each completed epoch: the model's, optimiser's, scheduler's and
gradient scaler's states; each process's random states (Python's, NumPy's, PyTorch's and
the training loader's generator) and its batch transform's state (a transform that keeps
state has ``state_dict()`` and ``load_state_dict()``); the epoch, the results so far, the
seconds of time budget spent, and the training's config (:func:`training_config`).
Resuming restores all of them (:class:`TrainingState`), so on a CPU the run goes on exactly
as if it had never stopped. A checkpoint of another model or recipe is refused, naming what
differs (:class:`CheckpointMismatchError`); so is one of another run, when the caller
gives the run's identity (the command line: its run id and options, the seed among
them).

Every file written by :func:`write_verified` (the training checkpoint, and the models
:func:`going_modular.utils.save_model` saves) carries the SHA-256 of its contents, checked
on every load: a changed bit or a cut-off copy is refused (:class:`CorruptCheckpointError`),
never trained from. The file stays a plain PyTorch file (``torch.load`` reads it): the
digest (:func:`content_sha256`, over every tensor's bytes and every other value) is one
more entry of the saved dict, :data:`CHECKSUM_KEY`.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from vitbook.data.files import atomic_write, open_file
from vitbook.training.recipe import Recipe

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_NAME",
    "CHECKSUM_KEY",
    "CheckpointMismatchError",
    "CorruptCheckpointError",
    "TrainingState",
    "config_mismatches",
    "content_sha256",
    "identity_mismatches",
    "is_verified",
    "load_verified",
    "read_checkpoint",
    "save_checkpoint",
    "training_config",
    "verified",
    "write_verified",
]

CHECKPOINT_NAME = "checkpoint.pth"
CHECKPOINT_FORMAT = 3
#: The key of the SHA-256 hex digest (:func:`content_sha256`) in a checksummed file.
CHECKSUM_KEY = "sha256"


class CheckpointMismatchError(ValueError):
    """``checkpoint_dir`` holds a checkpoint of another model or another recipe, or one
    this version cannot read."""


class CorruptCheckpointError(CheckpointMismatchError):
    """A checksummed file whose contents do not match its SHA-256 (or cannot be read)."""


def _feed(digest: Any, obj: Any) -> None:
    """Add ``obj`` to ``digest``: tensors by dtype, shape and bytes, containers item by
    item, anything else by type and ``repr``. Independent of the device and the file."""
    if torch.is_tensor(obj):
        tensor = obj.detach().cpu().contiguous().reshape(-1)
        digest.update(f"tensor {tensor.dtype} {tuple(obj.shape)};".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes())
    elif isinstance(obj, dict):
        digest.update(f"dict {len(obj)};".encode())
        for key, value in obj.items():
            _feed(digest, key)
            _feed(digest, value)
    elif isinstance(obj, (list, tuple)):
        digest.update(f"{type(obj).__name__} {len(obj)};".encode())
        for value in obj:
            _feed(digest, value)
    else:
        digest.update(f"{type(obj).__name__} {obj!r};".encode())


def content_sha256(obj: Any) -> str:
    """The SHA-256 of a checkpoint's contents (what ``torch.load`` gives back)."""
    digest = hashlib.sha256()
    _feed(digest, obj)
    return digest.hexdigest()


def _torch_save(obj: Any, f: Any) -> None:
    """``torch.save(obj, f)``; a write that failed (a full disk, a file-size limit) raises
    its own OSError, not the RuntimeError torch's zip writer adds on closing."""
    try:
        torch.save(obj, f)
    except RuntimeError as error:
        cause = error.__context__
        while cause is not None and not isinstance(cause, OSError):
            cause = cause.__context__
        if cause is None:
            raise
        raise cause from None


def write_verified(path: str | Path, contents: dict[str, Any]) -> Path:
    """``torch.save`` the dict ``contents`` to ``path`` atomically, with its SHA-256 under
    :data:`CHECKSUM_KEY`."""
    checked = {**contents, CHECKSUM_KEY: content_sha256(contents)}
    return atomic_write(Path(path), lambda f: _torch_save(checked, f))


def is_verified(obj: Any) -> bool:
    """Whether ``obj`` (what ``torch.load`` read) carries a checksum."""
    return isinstance(obj, dict) and CHECKSUM_KEY in obj


def verified(obj: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """``obj`` without its checksum, after checking that the checksum holds."""
    contents = {k: v for k, v in obj.items() if k != CHECKSUM_KEY}
    if content_sha256(contents) != obj[CHECKSUM_KEY]:
        raise CorruptCheckpointError(
            f"{path} is corrupt: its contents do not match the SHA-256 checksum saved "
            "with them (a changed bit, or a damaged copy). It is not used; restore "
            "another copy or train again."
        )
    return contents


def _load(path: str | Path, map_location: Any) -> Any:
    """``torch.load`` (weights only); a file it cannot read is a CorruptCheckpointError."""
    try:
        with open_file(path) as f:
            return torch.load(f, map_location=map_location, weights_only=True)
    except Exception as error:  # noqa: BLE001  (torch.load raises many kinds)
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise CorruptCheckpointError(
            f"{path} is truncated or corrupt ({first_line})."
        ) from error


def load_verified(path: str | Path, map_location: Any = "cpu") -> Any:
    """What :func:`write_verified` saved to ``path``, refused unless its checksum holds
    (a file without one is returned as it is)."""
    obj = _load(path, map_location)
    return verified(obj, path) if is_verified(obj) else obj


def _module(model: nn.Module) -> nn.Module:
    """The module whose weights a checkpoint holds: the original of a compiled model, the
    module inside a DistributedDataParallel."""
    model = getattr(model, "module", model)
    return getattr(model, "_orig_mod", model)


def _state(part: Any, method: str) -> Any:
    """``part.<method>()``, or None when there is no ``part``."""
    return getattr(part, method)() if part is not None else None


def _rng_state() -> dict[str, Any]:
    """Python's, NumPy's and PyTorch's random states, as tensors and numbers only (so that
    ``torch.load(weights_only=True)`` reads them)."""
    _, key, pos, has_gauss, gauss = np.random.get_state()
    version, internal, python_gauss = random.getstate()
    return {
        "python": [version, list(internal), python_gauss],
        "numpy": [torch.from_numpy(key.astype(np.int64)), pos, has_gauss, gauss],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def _set_rng_state(state: dict[str, Any]) -> None:
    version, internal, python_gauss = state["python"]
    random.setstate((version, tuple(internal), python_gauss))
    key, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state(
        ("MT19937", key.numpy().astype(np.uint32), pos, has_gauss, gauss)
    )
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def training_config(
    model: nn.Module,
    recipe: Recipe,
    epochs: int,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None,
    world_size: int = 1,
    identity: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What a checkpoint must match to be resumed: the run's length, the recipe's settings,
    the number of processes, the optimiser's and scheduler's kinds and every weight's
    shape; with ``identity`` (plain values naming the run, e.g. its id and seed), that
    too, under ``"run"``."""
    config = {
        "epochs": epochs,
        "steps": recipe.steps,
        "max_steps_per_epoch": recipe.max_steps_per_epoch,
        "amp": recipe.amp,
        "max_grad_norm": recipe.max_grad_norm,
        "lr": recipe.lr,
        "weight_decay": recipe.weight_decay,
        "label_smoothing": recipe.label_smoothing,
        "optimizer": type(optimizer).__name__,
        "scheduler": type(scheduler).__name__ if scheduler is not None else None,
        "world_size": world_size,
        "weights": {k: list(v.shape) for k, v in _module(model).state_dict().items()},
    }
    if identity is not None:
        config["run"] = dict(identity)
    return config


def read_checkpoint(checkpoint_dir: str | Path) -> dict[str, Any] | None:
    """The training checkpoint :func:`~vitbook.training.loop.fit` saved in
    ``checkpoint_dir``, or None if there is none: ``epoch`` (completed), ``results`` so far,
    ``first_loss``, ``seconds`` of time budget spent, ``model``, ``optimizer``,
    ``scheduler`` and ``scaler`` states, each rank's ``local`` states (random, batch
    transform) and the ``config`` it was trained with. A corrupt file, or NaN or infinite
    weights or optimiser state, is refused."""
    path = Path(checkpoint_dir) / CHECKPOINT_NAME
    try:
        open_file(path).close()
    except FileNotFoundError:
        return None
    except OSError:  # a folder, a link in a held folder, no permission: said below
        pass
    try:
        checkpoint = _load(path, "cpu")
        if (
            isinstance(checkpoint, dict)
            and checkpoint.get("format") == CHECKPOINT_FORMAT
        ):
            if not is_verified(checkpoint):
                raise CorruptCheckpointError(f"{path} has lost its checksum.")
            return _check_finite(verified(checkpoint, path), path)
    except CorruptCheckpointError as error:
        raise CorruptCheckpointError(
            f"Cannot read the training checkpoint {path}: {error} Move it away to start "
            "afresh."
        ) from error
    found = checkpoint.get("format") if isinstance(checkpoint, dict) else None
    raise CheckpointMismatchError(
        f"{path} is not a training checkpoint this version reads (format {found!r}, "
        f"expected {CHECKPOINT_FORMAT}). Move it away to start afresh."
    )


def _non_finite(obj: Any, name: str) -> list[str]:
    """The names (``name`` and the keys below it) of floating-point tensors in ``obj``
    that hold NaN or infinite values."""
    if torch.is_tensor(obj):
        bad = obj.is_floating_point() and not bool(torch.isfinite(obj).all())
        return [name] if bad else []
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    else:
        return []
    return [found for k, v in items for found in _non_finite(v, f"{name}.{k}")]


def _check_finite(checkpoint: dict[str, Any], path: Path) -> dict[str, Any]:
    """``checkpoint``, unless its weights or optimiser state hold NaN or infinite values
    (a run that had diverged): CheckpointMismatchError."""
    bad = _non_finite(checkpoint.get("model"), "model")
    bad += _non_finite(checkpoint.get("optimizer"), "optimizer")
    if bad:
        raise CheckpointMismatchError(
            f"{path} holds NaN or infinite values in {len(bad)} tensor(s) (first: "
            f"{bad[0]}), so training from it would only produce NaN. Move it away to "
            "start afresh."
        )
    return checkpoint


def save_checkpoint(checkpoint_dir: Path, epoch: int, state: dict[str, Any]) -> None:
    """Write ``state`` (that of ``epoch``) to ``checkpoint_dir`` atomically, checksummed."""
    write_verified(checkpoint_dir / CHECKPOINT_NAME, state)


def config_mismatches(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """What differs between two configs (:func:`training_config`), one phrase each; the
    weights' shapes in one phrase (another model); the run's identity field by field
    (:func:`identity_mismatches`). Keys missing from ``current`` are not compared."""
    problems = [
        f"{key}={saved.get(key)!r} there but {value!r} here"
        for key, value in current.items()
        if key not in ("weights", "run") and saved.get(key) != value
    ]
    if "run" in current:
        problems += identity_mismatches(saved.get("run"), current["run"])
    weights, ours = saved.get("weights", {}), current.get("weights", {})
    differ = [
        f"{k}: {weights.get(k, 'missing')} there but {ours.get(k, 'missing')} here"
        for k in sorted(set(weights) | set(ours))
        if weights.get(k) != ours.get(k)
    ]
    if differ:
        problems.append(
            f"another model ({len(differ)} weight(s) differ, e.g. {differ[0]})"
        )
    return problems


def identity_mismatches(
    saved: dict[str, Any] | None, current: dict[str, Any]
) -> list[str]:
    """What differs between the run identity a checkpoint holds (``saved``) and the
    ``current`` one, one phrase per field, the run id first; nothing for a checkpoint
    written before checkpoints held one (``saved`` None)."""
    if saved is None:
        return []
    keys = sorted(set(saved) | set(current), key=lambda key: (key != "run_id", key))
    return [
        f"{key}={saved.get(key)!r} there but {current.get(key)!r} here"
        for key in keys
        if saved.get(key) != current.get(key)
    ]


def _check_matches(saved: dict[str, Any], current: dict[str, Any], path: Path) -> None:
    """Raise :class:`CheckpointMismatchError` listing what differs between two configs."""
    problems = config_mismatches(saved, current)
    if problems:
        raise CheckpointMismatchError(
            f"{path} was saved by another training: {'; '.join(problems)}. Call fit() "
            "with the same model and recipe to continue it, or give another "
            "checkpoint_dir to start afresh."
        )


class TrainingState:
    """What a checkpoint saves and restores: the model, optimiser, scheduler and scaler,
    with the ``config`` (:func:`training_config`) a checkpoint must match; and this
    process's local states: random generators (with the training loader's ``generator``,
    if it has one) and the ``batch_transform``'s state, if it keeps one."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler | None,
        scaler: torch.amp.GradScaler | None,
        config: dict[str, Any],
        *,
        batch_transform: Any = None,
        generator: torch.Generator | None = None,
    ):
        self.model, self.optimizer = model, optimizer
        self.scheduler, self.scaler, self.config = scheduler, scaler, config
        self.batch_transform, self.generator = batch_transform, generator

    def local_state(self) -> dict[str, Any]:
        """This process's random and batch-transform states."""
        keeps_state = hasattr(self.batch_transform, "state_dict")
        return {
            "rng": _rng_state(),
            "generator": _state(self.generator, "get_state"),
            "batch_transform": self.batch_transform.state_dict()
            if keeps_state
            else None,
        }

    def _set_local_state(self, local: dict[str, Any]) -> None:
        _set_rng_state(local["rng"])
        if self.generator is not None and local["generator"] is not None:
            self.generator.set_state(local["generator"])
        if local["batch_transform"] is not None:
            self.batch_transform.load_state_dict(local["batch_transform"])

    def resume(self, checkpoint_dir: Path, rank: int = 0) -> dict[str, Any] | None:
        """Load the checkpoint in ``checkpoint_dir``, if there is one (``rank``'s local
        states); return it."""
        checkpoint = read_checkpoint(checkpoint_dir)
        if checkpoint is None:
            return None
        _check_matches(
            checkpoint["config"], self.config, checkpoint_dir / CHECKPOINT_NAME
        )
        _module(self.model).load_state_dict(checkpoint["model"])
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        if self.scheduler is not None:
            self.scheduler.load_state_dict(checkpoint["scheduler"])
        if self.scaler is not None and checkpoint["scaler"]:
            self.scaler.load_state_dict(checkpoint["scaler"])
        self._set_local_state(checkpoint["local"][rank])
        return checkpoint

    def save(
        self,
        checkpoint_dir: Path,
        progress: dict[str, Any],
        local_states: list[dict[str, Any]],
    ) -> None:
        """Save the state after ``progress["epoch"]`` with ``progress`` (the ``results``
        so far, ``first_loss``, ``seconds`` spent) and every rank's ``local_states``."""
        save_checkpoint(
            checkpoint_dir,
            progress["epoch"],
            {
                "format": CHECKPOINT_FORMAT,
                "config": self.config,
                "model": _module(self.model).state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": _state(self.scheduler, "state_dict"),
                "scaler": _state(self.scaler, "state_dict"),
                "local": local_states,
                **progress,
            },
        )
