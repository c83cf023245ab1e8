"""Chapter 4's own ``Mlp`` and ``Block`` (vitbook.book.built.ch04) are the package's: the
same state-dict keys and shapes (a strict load works both ways) and, with the same weights,
the same outputs; the block is built on chapter 3's ``Attention``, with the ViT's
LayerNorm eps (1e-6) and no dropout."""

from __future__ import annotations

import inspect
from functools import partial

import torch
from torch import nn

from going_modular.models.layers import Block as PackageBlock
from going_modular.models.layers import Mlp as PackageMlp
from vitbook.book.built.ch03 import Attention
from vitbook.book.built.ch04 import Block, Mlp
from vitbook.book.reference import agree, randomize_vectors_


def _same_outputs_both_ways(ours: nn.Module, package: nn.Module, x: torch.Tensor):
    """Load ``ours`` into ``package`` and a fresh copy of ``package`` back into ``ours``
    (strictly), and compare the outputs each time."""
    package.load_state_dict(ours.state_dict(), strict=True)
    with torch.no_grad():
        assert agree(ours(x), package(x))
    randomize_vectors_(package)
    for p in package.parameters():  # other weights than before, also the matrices
        p.data.add_(0.05 * torch.randn_like(p))
    ours.load_state_dict(package.state_dict(), strict=True)
    with torch.no_grad():
        assert agree(ours(x), package(x))


def test_the_chapters_mlp_equals_the_packages_both_ways():
    torch.manual_seed(0)
    ours = randomize_vectors_(Mlp(16, 40)).eval()
    package = PackageMlp(16, 40).eval()
    assert list(ours.state_dict()) == list(package.state_dict())
    _same_outputs_both_ways(ours, package, torch.randn(2, 7, 16))


def test_the_chapters_block_equals_the_packages_vit_block_both_ways():
    torch.manual_seed(0)
    ours = randomize_vectors_(Block(32, 4, mlp_ratio=2.0)).eval()
    norm = partial(nn.LayerNorm, eps=1e-6)
    package = PackageBlock(32, 4, 2.0, norm_layer=norm).eval()
    assert list(ours.state_dict()) == list(package.state_dict())
    # Tokens with a small spread, so a LayerNorm eps of 1e-5 instead of 1e-6 would show.
    x = 1e-3 * torch.randn(2, 9, 32)
    _same_outputs_both_ways(ours, package, x)


def test_the_block_is_built_on_chapter_3_and_has_the_pinned_defaults():
    block = Block()
    assert type(block.attn) is Attention and type(block.mlp) is Mlp
    assert (block.attn.heads, block.mlp.fc1.out_features) == (12, 3072)
    assert {block.norm1.eps, block.norm2.eps} == {1e-6}
    assert not any(isinstance(m, nn.Dropout) and m.p > 0 for m in block.modules()), (
        "no dropout in the block (the paper uses it only in its training recipe)"
    )
    signatures = {
        cls: {
            name: p.default
            for name, p in inspect.signature(cls.__init__).parameters.items()
            if name != "self"
        }
        for cls in (Mlp, Block)
    }
    assert signatures[Mlp] == {"dim": 768, "hidden_dim": 3072, "drop_rate": 0.0}
    assert signatures[Block] == {"dim": 768, "heads": 12, "mlp_ratio": 4.0, "eps": 1e-6}
