"""Chapter 3's ``Attention`` (vitbook.book.built.ch03) is the package's ``Attention``: the
same state-dict keys and shapes (a strict load works both ways) and, with the same weights,
the same outputs and attention maps."""

from __future__ import annotations

import inspect

import pytest
import torch

from going_modular.models.layers import Attention as PackageAttention
from going_modular.models.layers import collect_attention
from vitbook.book.built.ch03 import Attention
from vitbook.book.reference import agree, randomize_vectors_


@pytest.mark.parametrize("qkv_bias", [True, False])
def test_equals_the_package_attention_with_the_same_weights_both_ways(qkv_bias):
    torch.manual_seed(0)
    ours = randomize_vectors_(Attention(32, 4, qkv_bias=qkv_bias)).eval()
    package = PackageAttention(32, 4, qkv_bias=qkv_bias).eval()
    package.load_state_dict(ours.state_dict(), strict=True)
    x = torch.randn(2, 9, 32)
    with torch.no_grad():
        assert agree(ours(x), package(x))
        assert agree(ours.attention_weights(x), collect_attention(package, x)[0])

    back = Attention(32, 4, qkv_bias=qkv_bias).eval()
    back.load_state_dict(package.state_dict(), strict=True)
    with torch.no_grad():
        assert agree(back(x), package(x))


def test_has_the_pinned_interface_and_vit_base_sizes():
    attention = Attention()
    assert (attention.heads, attention.head_dim) == (12, 64)
    assert attention.qkv.weight.shape == (3 * 768, 768)
    assert attention.proj.weight.shape == (768, 768)
    assert list(inspect.signature(attention.forward).parameters) == ["x"]
    x = torch.randn(1, 197, 768)
    with torch.no_grad():
        weights = attention.attention_weights(x)
        assert attention(x).shape == x.shape
    assert weights.shape == (1, 12, 197, 197)
    assert agree(weights.sum(-1), torch.ones(1, 12, 197))


def test_refuses_heads_that_do_not_divide_dim():
    with pytest.raises(ValueError, match="not divisible"):
        Attention(30, 4)
