"""Reproducible runs: seed every random number generator, and pick the device."""

from __future__ import annotations

import random

import numpy as np
import torch

__all__ = ["get_device", "set_seeds"]


def set_seeds(seed: int = 42) -> None:
    """Seed Python's, NumPy's and PyTorch's (CPU and CUDA) random number generators."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def get_device() -> torch.device:
    """``cuda`` when a GPU is present, else ``cpu``."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
