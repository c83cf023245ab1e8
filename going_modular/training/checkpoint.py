"""Training checkpoints: what :func:`going_modular.engine.fit` saves after each epoch, and
resumes from.

A checkpoint is one file, ``checkpoint_dir/checkpoint.pth`` (:data:`CHECKPOINT_NAME`),
written atomically after each completed epoch: the model's, optimiser's, scheduler's and
gradient scaler's states, Python's, NumPy's and PyTorch's random states, the epoch, the
results so far and the training's config (:func:`training_config`). Resuming restores all
of them (:class:`TrainingState`), so on a CPU the run goes on exactly as if it had never
stopped. A checkpoint of another model or recipe is refused, naming what differs
(:class:`CheckpointMismatchError`).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from going_modular.data.files import atomic_write
from going_modular.training.recipe import Recipe

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_NAME",
    "CheckpointMismatchError",
    "TrainingState",
    "config_mismatches",
    "read_checkpoint",
    "save_checkpoint",
    "training_config",
]

CHECKPOINT_NAME = "checkpoint.pth"
CHECKPOINT_FORMAT = 2


class CheckpointMismatchError(ValueError):
    """``checkpoint_dir`` holds a checkpoint of another model or another recipe."""


def _module(model: nn.Module) -> nn.Module:
    """The module whose weights a checkpoint holds (the original of a compiled model)."""
    return getattr(model, "_orig_mod", model)


def _state_dict(part: Any) -> dict[str, Any] | None:
    return part.state_dict() if part is not None else None


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
) -> dict[str, Any]:
    """What a checkpoint must match to be resumed: the run's length, the recipe's settings,
    the optimiser's and scheduler's kinds and the shape of every weight."""
    return {
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
        "weights": {k: list(v.shape) for k, v in _module(model).state_dict().items()},
    }


def read_checkpoint(checkpoint_dir: str | Path) -> dict[str, Any] | None:
    """The training checkpoint :func:`~going_modular.engine.fit` saved in ``checkpoint_dir``,
    or None if there is none: ``epoch`` (completed), ``results`` so far, ``model``,
    ``optimizer``, ``scheduler`` and ``scaler`` states, random states and the ``config`` it
    was trained with."""
    path = Path(checkpoint_dir) / CHECKPOINT_NAME
    if not path.exists():
        return None
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001  (torch.load raises many kinds)
        raise CheckpointMismatchError(
            f"Cannot read the training checkpoint {path}: {error}. Move it away to start "
            "afresh."
        ) from error
    if (
        not isinstance(checkpoint, dict)
        or checkpoint.get("format") != CHECKPOINT_FORMAT
    ):
        found = checkpoint.get("format") if isinstance(checkpoint, dict) else None
        raise CheckpointMismatchError(
            f"{path} is not a training checkpoint this version reads (format {found!r}, "
            f"expected {CHECKPOINT_FORMAT}). Move it away to start afresh."
        )
    return checkpoint


def save_checkpoint(checkpoint_dir: Path, epoch: int, state: dict[str, Any]) -> None:
    """Write ``state`` (that of ``epoch``) to ``checkpoint_dir`` atomically."""
    atomic_write(checkpoint_dir / CHECKPOINT_NAME, lambda f: torch.save(state, f))


def config_mismatches(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """What differs between two configs (:func:`training_config`), one phrase each; the
    weights' shapes in one phrase (another model). Keys missing from ``current`` are not
    compared."""
    problems = [
        f"{key}={saved.get(key)!r} there but {value!r} here"
        for key, value in current.items()
        if key != "weights" and saved.get(key) != value
    ]
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
    with the ``config`` (:func:`training_config`) a checkpoint must match."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler | None,
        scaler: torch.amp.GradScaler | None,
        config: dict[str, Any],
    ):
        self.model, self.optimizer = model, optimizer
        self.scheduler, self.scaler, self.config = scheduler, scaler, config

    def resume(self, checkpoint_dir: Path) -> dict[str, Any] | None:
        """Load the checkpoint in ``checkpoint_dir``, if there is one; return it."""
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
        _set_rng_state(checkpoint["rng"])
        return checkpoint

    def save(
        self,
        checkpoint_dir: Path,
        epoch: int,
        results: dict[str, list[float]],
        first_loss: float,
    ) -> None:
        """Save the state after ``epoch`` with the ``results`` so far (see the module)."""
        save_checkpoint(
            checkpoint_dir,
            epoch,
            {
                "format": CHECKPOINT_FORMAT,
                "epoch": epoch,
                "config": self.config,
                "model": _module(self.model).state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": _state_dict(self.scheduler),
                "scaler": _state_dict(self.scaler),
                "rng": _rng_state(),
                "results": results,
                "first_loss": first_loss,
            },
        )
