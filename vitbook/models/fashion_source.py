"""Chapter 7's backbone, shipped as data: a hybrid ViT pre-trained on Fashion-MNIST.

``scripts/pretrain_ch07_backbone.py`` trains it
(:func:`vitbook.training.source_backbone.pretrain_source_backbone`) and writes its
``state_dict`` to ``weights/ch07_fashion_source_vit.pt`` with a JSON record beside it: the
command, its wall time, CPU and threads, the epochs, the source classes, the test accuracy and
the file's SHA-256. :func:`load_fashion_source_backbone` checks the hash and loads it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from going_modular.models.registry import build_model

__all__ = [
    "SOURCE_VIT_CONFIG",
    "WEIGHTS_DIR",
    "WEIGHTS_FILE",
    "file_sha256",
    "load_fashion_source_backbone",
    "source_backbone_record",
    "source_vit",
]

#: vit_4_16 at 28 px as section 3.1's hybrid: a 64-channel convolutional stem, then 4-pixel
#: patches (49 tokens and a class token), D = 128, 4 heads, MLP 256.
SOURCE_VIT_CONFIG: dict[str, Any] = dict(
    img_size=28,
    in_channels=1,
    patch_size=4,
    dim=128,
    mlp_ratio=2.0,
    heads=4,
    stem_channels=64,
)
WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
WEIGHTS_FILE = WEIGHTS_DIR / "ch07_fashion_source_vit.pt"


def source_vit(num_classes: int) -> nn.Module:
    """The chapter's small ViT (:data:`SOURCE_VIT_CONFIG`) with ``num_classes`` outputs."""
    return build_model("vit_4_16", num_classes=num_classes, **SOURCE_VIT_CONFIG)


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file, in hex."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def source_backbone_record(weights: str | Path = WEIGHTS_FILE) -> dict[str, Any]:
    """The JSON written beside ``weights``: how it was made and its SHA-256."""
    return json.loads(Path(weights).with_suffix(".json").read_text())


def load_fashion_source_backbone(
    weights: str | Path = WEIGHTS_FILE,
) -> tuple[nn.Module, dict[str, Any]]:
    """The pre-trained backbone (in eval mode, float32) and its record; raises ValueError
    when the file's SHA-256 differs from the record's."""
    record = source_backbone_record(weights)
    digest = file_sha256(weights)
    if digest != record["sha256"]:
        raise ValueError(
            f"{weights} has SHA-256 {digest}, its record says {record['sha256']}: the "
            "file is damaged or was replaced; re-create it with the record's command."
        )
    model = source_vit(len(record["source_classes"]))
    state = torch.load(weights, map_location="cpu", weights_only=True)
    model.load_state_dict({k: v.float() for k, v in state.items()})
    return model.eval(), record
