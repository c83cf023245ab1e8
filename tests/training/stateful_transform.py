"""A batch transform that keeps state, for the exact-resume tests of fit and of DDP."""

from __future__ import annotations

import torch

__all__ = ["Jitter"]


class Jitter:
    """Noise from its own generator, and a count of the batches it saw."""

    def __init__(self, seed: int):
        self.generator, self.batches = torch.Generator().manual_seed(seed), 0

    def __call__(self, X, y):
        self.batches += 1
        return X + 0.1 * torch.randn(X.shape, generator=self.generator), y

    def state_dict(self) -> dict:
        return {"rng": self.generator.get_state(), "batches": self.batches}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["rng"])
        self.batches = state["batches"]
