"""Small utilities: seeds, the device, and checkpoints that know how to rebuild their model."""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .models import build_model

CHECKPOINT_FORMAT = 1


def set_seeds(seed: int = 42) -> None:
    """Seed Python's, NumPy's and PyTorch's (CPU and CUDA) random number generators."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def get_device() -> torch.device:
    """``cuda`` when a GPU is present, else ``cpu``."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def save_model(
    model: nn.Module,
    target_dir: str | Path,
    model_name: str,
    *,
    class_names: list[str] | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Save ``model``'s weights and how to rebuild it to ``target_dir/model_name``.

    The file is written atomically (a temporary file renamed into place), so an interrupted
    save never leaves a half-written checkpoint. ``model_name`` must end in ``.pt`` or ``.pth``.
    """
    if not model_name.endswith((".pt", ".pth")):
        raise ValueError(
            f"model_name should end with '.pt' or '.pth', got {model_name!r}."
        )
    target_dir = Path(target_dir)
    target_dir.mkdir(parents=True, exist_ok=True)
    path = target_dir / model_name
    checkpoint = {
        "format": CHECKPOINT_FORMAT,
        "state_dict": model.state_dict(),
        "build_config": getattr(model, "build_config", None),
        "class_names": list(class_names) if class_names is not None else None,
        "extra": extra or {},
    }
    fd, tmp = tempfile.mkstemp(prefix=f".{model_name}-", dir=target_dir)
    os.close(fd)
    try:
        torch.save(checkpoint, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    print(f"[INFO] Saved model to: {path.name}")
    return path


def load_checkpoint(
    path: str | Path, map_location: str | torch.device = "cpu"
) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_model` (safely: ``weights_only=True``)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"No checkpoint at {path}. Check the path or train a model first."
        )
    checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ValueError(
            f"{path} is not a checkpoint written by going_modular.utils.save_model."
        )
    return checkpoint


def load_model(
    path: str | Path, model: nn.Module | None = None, device: str | torch.device = "cpu"
) -> nn.Module:
    """Load a checkpoint into ``model``, or rebuild the model it records when ``model`` is None.

    Raises a ValueError that lists the differences when the weights do not fit the model.
    """
    checkpoint = load_checkpoint(path, map_location=device)
    if model is None:
        config = checkpoint.get("build_config")
        if not config:
            raise ValueError(
                f"{path} does not record how to build its model; pass the model to load into."
            )
        model = build_model(config["name"], **config["kwargs"])
    try:
        model.load_state_dict(checkpoint["state_dict"])
    except RuntimeError as error:
        raise ValueError(
            f"The checkpoint {Path(path).name} does not match this model: {error}\n"
            "Build the model with the same architecture and arguments it was saved with."
        ) from error
    return model.to(device)
