"""Chapter 5's ``ViT``: Equations 1-4 assembled from chapter 2's ``PatchEmbedding`` and
chapter 4's ``Block`` (which uses chapter 3's ``Attention``), as the chapter writes it
(``tests/book/test_built.py`` holds the class to the chapter's cell)."""

import torch
from torch import nn

from vitbook.book.built.ch02 import PatchEmbedding
from vitbook.book.built.ch04 import Block

__all__ = ["ViT"]


# Saved in vitbook.book.built.ch05: its exercises and tests import it from there.
class ViT(nn.Module):
    # The Vision Transformer of the paper's Figure 1 and Equations 1-4 (defaults:
    # ViT-Base/16), from chapter 2's PatchEmbedding and chapter 4's Block.

    def __init__(
        self,
        *,
        img_size: int = 224,
        patch_size: int = 16,
        in_channels: int = 3,
        num_classes: int = 1000,
        dim: int = 768,
        depth: int = 12,
        heads: int = 12,
        mlp_ratio: float = 4.0,
        layer_norm_eps: float = 1e-6,
    ):
        super().__init__()
        if img_size % patch_size:
            raise ValueError(
                f"Image size {img_size} is not divisible by patch size {patch_size}."
            )
        self.img_size = img_size
        self.num_patches = (img_size // patch_size) ** 2
        # Equation 1 (chapter 2): patches, class token, position embedding
        self.patch_embed = PatchEmbedding(in_channels, patch_size, dim)
        self.cls_token = nn.Parameter(0.02 * torch.randn(1, 1, dim))
        self.pos_embed = nn.Parameter(0.02 * torch.randn(1, self.num_patches + 1, dim))
        # Equations 2 and 3 (chapters 3 and 4), L = depth times
        self.blocks = nn.Sequential(
            *[Block(dim, heads, mlp_ratio, eps=layer_norm_eps) for _ in range(depth)]
        )
        # Equation 4, then the head
        self.norm = nn.LayerNorm(dim, eps=layer_norm_eps)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if tuple(x.shape[-2:]) != (self.img_size, self.img_size):
            raise ValueError(
                f"This ViT was built for {self.img_size}x{self.img_size} images, "
                f"got {x.shape[-2]}x{x.shape[-1]}."
            )
        patches = self.patch_embed(x)  # (B, N, D)
        cls_token = self.cls_token.expand(len(x), -1, -1)  # (B, 1, D), a view
        z = torch.cat([cls_token, patches], dim=1) + self.pos_embed  # z_0: (B, N+1, D)
        z = self.blocks(z)  # z_L: (B, N + 1, D)
        return self.head(self.norm(z[:, 0]))  # head(LN(z_L^0)): (B, classes)
