"""Chapter 5's ``ViT``, assembled from the chapters' own classes, computes what the package's
``ViT`` does with the same weights: its state dict loads strictly into the package's class
and back, with the same logits, so chapters 2-4's classes are proved along with the wiring."""

from __future__ import annotations

import torch

from going_modular.models.vit import ViT as PackageViT
from going_modular.models.vit import vit_b_16
from vitbook.book.built import ch02, ch03, ch04
from vitbook.book.built.ch05 import ViT
from vitbook.book.reference import randomize_vectors_
from vitbook.models.complexity import count_params

SMALL = dict(
    img_size=32, patch_size=8, dim=48, depth=2, heads=3, mlp_ratio=2.0, num_classes=5
)


def _pair(seed: int) -> tuple[ViT, PackageViT]:
    torch.manual_seed(seed)
    ours = randomize_vectors_(ViT(**SMALL)).eval()  # LayerNorms not at 1 and 0
    theirs = randomize_vectors_(PackageViT(**SMALL)).eval()
    return ours, theirs


def test_the_chapters_vit_is_built_from_the_chapters_classes():
    block = ViT(**SMALL).blocks[0]
    assert type(ViT(**SMALL).patch_embed) is ch02.PatchEmbedding
    assert type(block) is ch04.Block and type(block.mlp) is ch04.Mlp
    assert type(block.attn) is ch03.Attention


def test_the_chapters_vit_equals_the_packages_both_ways():
    images = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    ours, theirs = _pair(0)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    theirs.load_state_dict(ours.state_dict(), strict=True)
    with torch.no_grad():
        torch.testing.assert_close(ours(images), theirs(images), rtol=1e-4, atol=1e-5)

    ours, theirs = _pair(1)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    with torch.no_grad():
        logits = ours(images)
        torch.testing.assert_close(logits, theirs(images), rtol=1e-4, atol=1e-5)
    assert logits.shape == (3, 5) and not torch.allclose(logits[0], logits[1])


def test_the_chapters_vit_b_16_has_torchvisions_parameter_count():
    with torch.device("meta"):
        ours, theirs = ViT(), vit_b_16()
        three_classes = ViT(num_classes=3)
    assert count_params(ours) == count_params(theirs) == 86_567_656
    assert count_params(three_classes) == 85_800_963
