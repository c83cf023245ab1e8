"""Chapter 4's ``Mlp`` and encoder ``Block``, exactly as the chapter writes them: the block
is Equations 2 and 3 around chapter 3's ``Attention``. Their state dicts are those of the
package's ``going_modular.models.layers.Mlp`` and ``Block`` (``tests/book/test_built.py``
holds each class to its chapter cell, ``tests/book/test_built_ch04.py`` to the package)."""

import torch
from torch import nn

from vitbook.book.built.ch03 import Attention

__all__ = ["Block", "Mlp"]


# Saved in vitbook.book.built.ch04: the chapters after this one import it from there.
class Mlp(nn.Module):
    # The MLP of Equation 3, without its LayerNorm and residual (the block's):
    # Linear, GELU, Dropout, Linear, Dropout (no dropout unless drop_rate is given).

    def __init__(self, dim: int = 768, hidden_dim: int = 3072, drop_rate: float = 0.0):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.act = nn.GELU()
        self.drop1 = nn.Dropout(drop_rate)
        self.fc2 = nn.Linear(hidden_dim, dim)
        self.drop2 = nn.Dropout(drop_rate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop2(self.fc2(self.drop1(self.act(self.fc1(x)))))


# Saved in vitbook.book.built.ch04: the chapters after this one import it from there.
class Block(nn.Module):
    # One pre-norm encoder layer: Eq. 2, then Eq. 3, each with its residual connection.
    # (B, N, dim) tokens -> (B, N, dim).

    def __init__(
        self, dim: int = 768, heads: int = 12, mlp_ratio: float = 4.0, eps: float = 1e-6
    ):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = Attention(dim, heads)  # chapter 3's
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attn(self.norm1(x)) + x  # Eq. 2: z'_l = MSA(LN(z_{l-1})) + z_{l-1}
        x = self.mlp(self.norm2(x)) + x  # Eq. 3: z_l = MLP(LN(z'_l)) + z'_l
        return x
