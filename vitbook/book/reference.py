"""Checking what a chapter builds against a reference implementation.

The chapters write each piece from scratch, then compare it with PyTorch's, torchvision's or
the package's version given the same weights and inputs: :func:`agree` is that comparison,
:func:`randomize_vectors_` makes the comparison meaningful for parameters that start at
constants (a LayerNorm's weight 1 and bias 0 would hide a swapped pair).
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["agree", "randomize_vectors_"]


def agree(
    actual: torch.Tensor, expected: torch.Tensor, atol: float = 1e-5, rtol: float = 1e-4
) -> bool:
    """True when ``actual`` matches ``expected`` to float32 rounding; otherwise raise
    ``AssertionError`` saying how many elements differ and by how much
    (``torch.testing.assert_close``; shapes and dtypes must match too)."""
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)
    return True


@torch.no_grad()
def randomize_vectors_(module: nn.Module, std: float = 0.1) -> nn.Module:
    """Add N(0, std^2) noise to every 1-D parameter of ``module`` (biases, norm scales and
    shifts), in place, and return it: LayerNorms start at weight 1 and bias 0,
    ``nn.MultiheadAttention``'s biases at 0, so a check with fresh modules could not see them
    swapped or ignored."""
    for p in module.parameters():
        if p.ndim == 1:
            p.add_(std * torch.randn_like(p))
    return module
