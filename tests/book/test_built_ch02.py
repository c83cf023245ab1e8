"""Chapter 2's own ``PatchEmbedding`` computes what the package's does with the same
weights: its state dict loads strictly into the package's class and back."""

from __future__ import annotations

import torch

from going_modular.models.vit import PatchEmbedding as PackagePatchEmbedding
from vitbook.book.built.ch02 import PatchEmbedding


def _pair(seed: int) -> tuple[PatchEmbedding, PackagePatchEmbedding]:
    torch.manual_seed(seed)
    ours = PatchEmbedding(in_channels=3, patch_size=4, dim=8)
    theirs = PackagePatchEmbedding(in_channels=3, patch_size=4, dim=8)
    return ours, theirs


def test_the_chapters_patch_embedding_equals_the_packages_both_ways():
    images = torch.rand(2, 3, 8, 12)
    ours, theirs = _pair(0)
    assert (
        list(ours.state_dict())
        == list(theirs.state_dict())
        == [
            "proj.weight",
            "proj.bias",
        ]
    )
    theirs.load_state_dict(ours.state_dict(), strict=True)
    torch.testing.assert_close(ours(images), theirs(images), rtol=0, atol=0)
    assert ours(images).shape == (2, 6, 8)  # (B, N, dim): 2 x 3 patches

    ours, theirs = _pair(1)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    torch.testing.assert_close(ours(images), theirs(images), rtol=0, atol=0)


def test_the_chapters_defaults_are_vit_b_16s():
    ours, theirs = PatchEmbedding(), PackagePatchEmbedding()
    assert ours.proj.weight.shape == theirs.proj.weight.shape == (768, 3, 16, 16)
