"""Small utilities: seeds, the device, channels-last weights, and model files.

:func:`set_seeds` and :func:`get_device` live in :mod:`going_modular.training.seeding`;
:func:`prefer_channels_last` in :mod:`going_modular.training.speed`;
:func:`save_model` and :func:`load_model` (files that know how to rebuild their model,
checksummed) in :mod:`going_modular.training.model_files`. They are importable from here,
as the course imports them.
"""

from __future__ import annotations

from going_modular.training.model_files import (
    CHECKPOINT_FORMAT,
    load_model,
    save_model,
)
from going_modular.training.seeding import get_device, set_seeds
from going_modular.training.speed import prefer_channels_last

__all__ = [
    "CHECKPOINT_FORMAT",
    "get_device",
    "load_model",
    "prefer_channels_last",
    "save_model",
    "set_seeds",
]
