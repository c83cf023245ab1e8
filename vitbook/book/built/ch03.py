"""Chapter 3's multi-head self-attention, exactly as the chapter writes it: chapter 4's
encoder block uses it as its ``attn``. Its state dict is that of the package's
``going_modular.models.layers.Attention`` (``tests/book/test_built.py`` holds the class to
the chapter's cell, ``tests/book/test_built_ch03.py`` to the package).
"""

import math

import torch
from torch import nn

__all__ = ["Attention"]


# Saved in vitbook.book.built.ch03: the chapters after this one import it from there.
class Attention(nn.Module):
    # MSA(z) of Appendix A, Eq. 5-8: (B, N, dim) tokens -> (B, N, dim).

    def __init__(self, dim: int = 768, heads: int = 12, qkv_bias: bool = True):
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim={dim} is not divisible by heads={heads}")
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)  # U_qkv of all heads
        self.proj = nn.Linear(dim, dim)  # U_msa

    def split_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        # (B, N, dim) -> q, k, v, each (B, heads, N, head_dim)
        B, N, _ = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, self.head_dim)
        return qkv.permute(2, 0, 3, 1, 4).unbind(0)

    def softmax_weights(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        # A = softmax(q k^T / sqrt(D_h)): (B, heads, N, N), each row sums to 1
        return (q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)).softmax(dim=-1)

    def attention_weights(self, x: torch.Tensor) -> torch.Tensor:
        # The maps of every head, for pictures: (B, N, dim) -> (B, heads, N, N)
        q, k, _ = self.split_heads(x)
        return self.softmax_weights(q, k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, D = x.shape
        q, k, v = self.split_heads(x)
        out = self.softmax_weights(q, k) @ v  # (B, heads, N, head_dim)
        # [SA_1; ...; SA_H]: the heads side by side, (B, N, D), then U_msa
        return self.proj(out.transpose(1, 2).reshape(B, N, D))
