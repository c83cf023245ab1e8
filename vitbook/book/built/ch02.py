"""Chapter 2's ``PatchEmbedding``: Equation 1's patches and projection E, as the chapter
writes it (``tests/book/test_built.py`` holds the class to the chapter's cell)."""

import torch
from torch import nn

__all__ = ["PatchEmbedding"]


# Saved in vitbook.book.built.ch02: the chapters after this one import it from there.
class PatchEmbedding(nn.Module):
    """Equation 1's patches and projection: (B, C, H, W) images -> (B, N, D) tokens."""

    def __init__(self, in_channels: int = 3, patch_size: int = 16, dim: int = 768):
        super().__init__()
        self.patch_size = patch_size
        # One kernel per output feature, applied once to every non-overlapping patch.
        self.proj = nn.Conv2d(
            in_channels,
            dim,
            kernel_size=patch_size,
            stride=patch_size,
            padding=0,
        )
        # (B, D, H/P, W/P) -> (B, D, N)
        self.flatten = nn.Flatten(start_dim=2, end_dim=3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        height, width = x.shape[-2:]
        p = self.patch_size
        if height % p or width % p:
            raise ValueError(
                f"Image size {height}x{width} is not divisible by the patch size "
                f"{p}: resize the images to a multiple of {p}."
            )
        return self.flatten(self.proj(x)).transpose(1, 2)  # (B, N, D)
