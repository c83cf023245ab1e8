"""Model files that know how to rebuild their model: :func:`save_model` and :func:`load_model`.

:func:`save_model` writes a model's weights with how to rebuild it (its ``build_config``),
its class names and any extra facts, with the SHA-256 of it all; :func:`load_model` reads
one back (safely: ``weights_only=True``), refusing a file whose checksum does not hold,
into a given model or rebuilding the recorded one. The course's ``utils.save_model`` call
works unchanged (:mod:`going_modular.utils` re-exports both).
"""

from __future__ import annotations

import inspect
import math
import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from going_modular.models import build_model
from going_modular.models.registry import _REGISTRY
from vitbook.training.checkpoint import is_verified, verified, write_verified

__all__ = ["CHECKPOINT_FORMAT", "load_model", "save_model"]

CHECKPOINT_FORMAT = 1


def _non_finite_tensors(state_dict: dict[str, torch.Tensor]) -> list[str]:
    return [
        name
        for name, tensor in state_dict.items()
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())
    ]


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
    save never leaves a half-written checkpoint; a temporary left by a killed process is
    removed by the next save (:func:`vitbook.data.files.atomic_write`). It carries the
    SHA-256 of its contents, which :func:`load_model` checks
    (:func:`vitbook.training.checkpoint.write_verified`). The file gets the umask's
    permissions, like any new file.
    Weights that are NaN or infinite are refused. ``model_name`` must end in ``.pt`` or
    ``.pth``.
    """
    if not model_name.endswith((".pt", ".pth")):
        raise ValueError(
            f"model_name should end with '.pt' or '.pth', got {model_name!r}."
        )
    state_dict = model.state_dict()
    if bad := _non_finite_tensors(state_dict):
        raise ValueError(
            f"Refusing to save {model_name}: {len(bad)} weight tensor(s) hold NaN or "
            f"infinite values (first: {bad[0]}). Training diverged; lower the learning "
            "rate or check the data for NaN values, and train again."
        )
    target_dir = Path(target_dir)
    if target_dir.exists() and not target_dir.is_dir():
        raise NotADirectoryError(
            f"Cannot save into {target_dir}: it is a file, not a folder. Choose another "
            "target_dir."
        )
    target_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = {
        "format": CHECKPOINT_FORMAT,
        "state_dict": state_dict,
        "build_config": getattr(model, "build_config", None),
        "class_names": list(class_names) if class_names is not None else None,
        "extra": extra or {},
    }
    path = write_verified(target_dir / model_name, checkpoint)
    print(f"[INFO] Saved model to: {path.name}")
    return path


def _unreadable(path: Path, error: Exception) -> ValueError:
    """A ValueError that says what kind of bad file ``path`` is."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(4)
    if size == 0:
        what = (
            "is empty (0 bytes): it was never completely written. Train again or "
            "restore a copy"
        )
    elif head == b"PK\x03\x04" and not zipfile.is_zipfile(path):
        what = (
            f"is truncated ({size} bytes): it starts like a PyTorch file but its end is "
            "missing, as after an interrupted copy or download. Copy or train it again"
        )
    elif "Weights only load failed" in str(error):
        what = (
            "holds Python objects besides tensors (e.g. a whole model saved with "
            "torch.save(model)), which are not loaded for safety. If you trust its "
            "source, load it with torch.load(path, weights_only=False) and save its "
            "state_dict instead"
        )
    elif head == b"PK\x03\x04":
        what = (
            f"is a corrupt PyTorch file ({str(error).splitlines()[0]}). Copy it again"
        )
    else:
        what = (
            f"is not a PyTorch file (it starts with {head!r}). Check the path: a "
            "checkpoint is written by going_modular.utils.save_model or torch.save"
        )
    return ValueError(f"Cannot load {path}: it {what}.")


def _is_state_dict(obj: Any) -> bool:
    return (
        isinstance(obj, dict)
        and bool(obj)
        and all(isinstance(k, str) and torch.is_tensor(v) for k, v in obj.items())
    )


def _check_device(device: str | torch.device) -> torch.device:
    """``device`` as a torch.device, or a ValueError that says why it cannot be used here."""
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(
            f"device={device!r} is not a device PyTorch knows ({error}). Use 'cpu', "
            "'cuda' or 'cuda:0'."
        ) from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"device={str(device)!r}, but this machine has no CUDA GPU PyTorch can use. "
            "Use device='cpu'."
        )
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise ValueError(
            f"device={str(device)!r}, but this machine has {torch.cuda.device_count()} "
            "GPU(s), numbered from 0."
        )
    try:
        torch.empty(0, device=device)
    except Exception as error:  # noqa: BLE001  (each backend fails its own way)
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ValueError(
            f"device={str(device)!r} cannot hold tensors on this machine ({first_line}). "
            "Use device='cpu'."
        ) from None
    return device


def _read(path: str | Path) -> Any:
    """``torch.load`` (weights only, to the CPU), with a clear error for a missing or
    broken file; the contents of a checksummed file after checking them."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"No checkpoint at {path}. Check the path or train a model first."
        )
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except PermissionError:
        raise
    except (
        OSError,  # e.g. EINVAL from PyTorch's zip reader on a cut-off file
        RuntimeError,
        EOFError,
        IndexError,
        KeyError,
        ValueError,
        pickle.UnpicklingError,
    ) as error:
        raise _unreadable(path, error) from error
    # A CorruptCheckpointError (a ValueError) when a checksummed file was changed; a file
    # without a checksum (a plain state_dict, a checkpoint written by hand) as it is.
    return verified(obj, path) if is_verified(obj) else obj


def _require_checkpoint(obj: Any, path: str | Path) -> dict[str, Any]:
    if isinstance(obj, dict) and "state_dict" in obj:
        version = obj.get("format", CHECKPOINT_FORMAT)
        if version != CHECKPOINT_FORMAT:
            raise ValueError(
                f"{path} is a checkpoint of format {version!r}; this version of "
                f"going_modular reads format {CHECKPOINT_FORMAT}. It was written by "
                "another version (update the package) or it is damaged."
            )
        weights = obj["state_dict"]
        if not isinstance(weights, dict) or not all(
            isinstance(k, str) and torch.is_tensor(v) for k, v in weights.items()
        ):
            raise ValueError(
                f"{path} is damaged: its state_dict is not a mapping of names to "
                f"tensors (it holds a {type(weights).__name__}). Use another copy or "
                "train again."
            )
        return obj
    if _is_state_dict(obj):
        raise ValueError(
            f"{path} holds a plain state_dict ({len(obj)} tensors, e.g. "
            f"{next(iter(obj))!r}), not a checkpoint written by "
            "going_modular.utils.save_model, so it does not say which model it fits. "
            "Build the model with the arguments it was trained with and load the weights "
            "into it: load_model(path, model), or model.load_state_dict(torch.load(path, "
            "weights_only=True))."
        )
    kind = (
        f"a dict with keys {sorted(map(str, obj))[:5]}"
        if isinstance(obj, dict)
        else (f"a {type(obj).__name__}")
    )
    raise ValueError(
        f"{path} is not a checkpoint written by going_modular.utils.save_model: it holds "
        f"{kind}."
    )


def _broken_config(path: str | Path, config: Any, why: str) -> ValueError:
    return ValueError(
        f"{path} records a build_config that cannot be used ({str(config)[:200]}): {why}. "
        "Build the model yourself and pass it: load_model(path, model)."
    )


def _build_recorded(checkpoint: dict[str, Any], path: str | Path) -> nn.Module:
    """Build the model a checkpoint's ``build_config`` records, never downloading weights
    (the checkpoint holds them all) and only after checking, on the ``meta`` device (no
    memory), that its weights have exactly the shapes the checkpoint holds."""
    config = checkpoint.get("build_config")
    if not config:
        raise ValueError(
            f"{path} does not record how to build its model; pass the model to load into."
        )
    try:
        name, kwargs = config["name"], dict(config["kwargs"])
        factory = _REGISTRY[name]
    except (KeyError, TypeError, ValueError) as error:
        raise _broken_config(path, config, f"{type(error).__name__}: {error}") from None
    parameters = inspect.signature(factory).parameters
    if "weights" in parameters:
        kwargs["weights"] = None
    if "pretrained" in parameters:
        kwargs["pretrained"] = False
    try:
        with torch.device("meta"):
            shapes = {
                k: v.shape for k, v in build_model(name, **kwargs).state_dict().items()
            }
    except NotImplementedError:  # a constructor that reads tensor values: not checkable
        shapes = None
    except (TypeError, ValueError, RuntimeError) as error:
        raise _broken_config(path, config, str(error)) from None
    held = {k: v.shape for k, v in checkpoint["state_dict"].items()}
    if shapes is not None and shapes != held:
        wanted = sum(math.prod(s) for s in shapes.values())
        differ = sorted(set(shapes) ^ set(held)) or [
            k for k in shapes if shapes[k] != held[k]
        ]
        raise ValueError(
            f"Refusing to build the model {path} records: its build_config describes "
            f"{wanted:,} weight values but the checkpoint holds "
            f"{sum(math.prod(s) for s in held.values()):,} (first difference: "
            f"{differ[0]!r}). The file is damaged or was edited; use another copy."
        )
    return build_model(name, **kwargs)


def load_model(
    path: str | Path, model: nn.Module | None = None, device: str | torch.device = "cpu"
) -> nn.Module:
    """Load a checkpoint into ``model``, or rebuild the model it records when ``model`` is None.

    With ``model`` given, ``path`` may also hold a plain ``state_dict`` (``torch.save(
    model.state_dict(), path)``). A rebuilt model never downloads pretrained weights, and
    is built only when its recorded architecture has exactly the checkpoint's weight shapes
    (checked without allocating it).

    Raises a ValueError that lists the differences when the weights do not fit the model,
    and for an unknown ``device``, a checkpoint format this version does not read, weights
    that are NaN or infinite, or a broken ``build_config``.
    """
    device = _check_device(device)
    obj = _read(path)
    if model is not None and _is_state_dict(obj):
        obj = {"state_dict": obj}  # a plain state_dict, loaded into the given model
    checkpoint = _require_checkpoint(obj, path)
    if bad := _non_finite_tensors(checkpoint["state_dict"]):
        raise ValueError(
            f"Refusing to load {path}: {len(bad)} weight tensor(s) hold NaN or infinite "
            f"values (first: {bad[0]}), so its predictions would be NaN. Use a checkpoint "
            "saved before training diverged, or train again."
        )
    if model is None:
        model = _build_recorded(checkpoint, path)
    try:
        model.load_state_dict(checkpoint["state_dict"])
    except RuntimeError as error:
        raise ValueError(
            f"The checkpoint {Path(path).name} does not match this model: {error}\n"
            "Build the model with the same architecture and arguments it was saved with."
        ) from error
    return model.to(device)
