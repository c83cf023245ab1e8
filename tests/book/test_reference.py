"""vitbook.book.reference: the chapters' check against a reference implementation."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vitbook.book.reference import agree, randomize_vectors_


def test_agree_accepts_float32_rounding_and_refuses_a_real_difference():
    x = torch.randn(4, 8)
    assert agree(x + 1e-7, x)
    with pytest.raises(AssertionError, match="not close"):
        agree(x + 1e-2, x)
    with pytest.raises(AssertionError, match="shape"):
        agree(x[:2], x)


def test_randomize_vectors_moves_only_one_dimensional_parameters():
    block = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
    before = {k: v.clone() for k, v in block.state_dict().items()}
    assert randomize_vectors_(block) is block
    after = block.state_dict()
    assert torch.equal(before["0.weight"], after["0.weight"])
    for key in ("0.bias", "1.weight", "1.bias"):
        assert not torch.equal(before[key], after[key]), key
    assert all(p.requires_grad for p in block.parameters())
