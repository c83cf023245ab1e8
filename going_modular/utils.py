"""Small utilities, as the course has them: seeds, the device, and saving a model.

:func:`save_model` writes exactly what the course's does, the model's ``state_dict``, so
the course's reload works unchanged::

    utils.save_model(model, target_dir="models", model_name="tinyvgg.pth")
    model.load_state_dict(torch.load("models/tinyvgg.pth"))

Beside it goes ``tinyvgg.pth.json``: how to rebuild the model (for a model made by
:func:`going_modular.models.build_model`), so :func:`load_model` can rebuild it by itself.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

from going_modular.models import build_model

__all__ = ["check_device", "get_device", "load_model", "save_model", "set_seeds"]


def set_seeds(seed: int = 42) -> None:
    """Seed Python's, NumPy's and PyTorch's (CPU and CUDA) random number generators."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def get_device() -> torch.device:
    """``cuda`` when a GPU is present, else ``cpu``."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def check_device(device: torch.device | str | None) -> torch.device:
    """``device`` as a ``torch.device``; a clear error for None or a GPU that is not there."""
    if device is None:
        raise ValueError("device is None: pass 'cpu' or 'cuda' (utils.get_device()).")
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"device={str(device)!r}, but there is no CUDA GPU: use 'cpu'."
        )
    return device


def _write_atomically(path: Path, write) -> None:
    """``write(file)`` into a temporary file beside ``path``, then rename it into place:
    an interrupted save leaves the previous file (or none), never half of one. The file
    gets the permissions of any new file (the umask's)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as file:
            write(file)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_model(model: nn.Module, target_dir: str | Path, model_name: str) -> Path:
    """Save ``model.state_dict()`` to ``target_dir/model_name`` (``.pt`` or ``.pth``).

    Also writes ``model_name + ".json"`` beside it, recording how the model was built
    when it was built by name. Returns the path of the weights.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"model should be a torch.nn.Module, got {type(model).__name__}."
        )
    if not model_name.endswith((".pt", ".pth")):
        raise ValueError(
            f"model_name should end with '.pt' or '.pth', got {model_name!r}."
        )
    if Path(model_name).name != model_name:
        raise ValueError(
            f"model_name should be a file name, got {model_name!r}: put folders in "
            "target_dir."
        )
    target = Path(target_dir)
    if target.is_file():
        raise NotADirectoryError(
            f"target_dir {target} is a file: give a folder to save the model in."
        )
    target.mkdir(parents=True, exist_ok=True)
    path = target / model_name
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    _write_atomically(path, lambda file: torch.save(state, file))
    about = {"build_config": getattr(model, "build_config", None)}
    text = json.dumps(about, indent=1).encode()
    _write_atomically(path.with_name(path.name + ".json"), lambda f: f.write(text))
    return path


def _build_config(about: Path) -> dict | None:
    """The ``build_config`` recorded in ``about`` (the .json beside a model), or a
    ValueError naming the file when it is not what :func:`save_model` wrote."""
    try:
        config = json.loads(about.read_text()).get("build_config")
    except (ValueError, AttributeError) as error:
        raise ValueError(
            f"{about} is damaged ({error}): it should be the JSON that save_model wrote. "
            "Pass the model instead, load_model(path, MyModel(...))."
        ) from None
    return config


def load_model(path: str | Path, model: nn.Module | None = None) -> nn.Module:
    """Load weights saved by :func:`save_model` into ``model`` (on the CPU); without
    ``model``, rebuild the one recorded beside the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No model file at {path}.")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, pickle.UnpicklingError) as error:
        raise ValueError(
            f"{path} is not a model file saved by save_model: {error}"
        ) from None
    if not isinstance(state, dict) or not all(
        isinstance(value, torch.Tensor) for value in state.values()
    ):
        raise ValueError(
            f"{path} holds more than a state_dict (the book's command line writes such "
            "files: read them with vitbook.training.model_files.load_model)."
        )
    if model is None:
        about = path.with_name(path.name + ".json")
        config = _build_config(about) if about.exists() else None
        if not config:
            raise ValueError(
                f"{path} does not say which model it holds (no build_config in "
                f"{about.name}): pass the model, load_model(path, MyModel(...))."
            )
        model = build_model(config["name"], **config["kwargs"])
    model.load_state_dict(state)
    return model
