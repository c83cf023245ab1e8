"""Small utilities: seeds, the device, channels-last weights, and model files.

:func:`set_seeds` and :func:`get_device` live in :mod:`going_modular.training.seeding`;
:func:`save_model` and :func:`load_model` (files that know how to rebuild their model,
checksummed) in :mod:`going_modular.training.model_files`. They are importable from here,
as the course imports them.
"""

from __future__ import annotations

import torch
from torch import nn

from going_modular.training.model_files import (
    CHECKPOINT_FORMAT,
    load_model,
    save_model,
)
from going_modular.training.seeding import get_device, set_seeds

__all__ = [
    "CHECKPOINT_FORMAT",
    "get_device",
    "load_model",
    "prefer_channels_last",
    "save_model",
    "set_seeds",
]


def prefer_channels_last(model: nn.Module) -> nn.Module:
    """Store ``model``'s 4-D weights channels-last when it has an overlapping convolution.

    A convolution whose kernel is larger than its stride (a CCT tokenizer, a CNN) runs
    faster on channels-last data on CPUs and GPUs alike (CCT-2/3x2 1.25x in float32 and
    1.47x in bfloat16, TinyVGG 1.40x and 2.15x, on the book's 2-core CPU; see
    benchmarks/README.md). A patchifying convolution (kernel = stride, as in ViT and
    ViT-Lite) gains nothing, so those models are left as they are. Works in place; returns
    ``model``.
    """
    overlapping = any(
        isinstance(m, nn.Conv2d) and any(k > s for k, s in zip(m.kernel_size, m.stride))
        for m in model.modules()
    )
    if overlapping:
        model.to(memory_format=torch.channels_last)
    return model
