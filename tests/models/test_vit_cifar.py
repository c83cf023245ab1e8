"""Chapter 13's small CIFAR ViT: the seed's parameter count and fvcore-convention FLOPs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from going_modular.models import build_model
from vitbook.models.complexity import count_params, fvcore_flops

D, DEPTH, HEADS, MLP = 192, 9, 12, 384


class _SeedForward(nn.Module):
    """The seed's forward (timm style): final LayerNorm over every token, no head."""

    def __init__(self, vit: nn.Module):
        super().__init__()
        self.vit = vit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.vit.forward_features(x)[:, 0]


def _hand_flops(patch: int, img: int = 32) -> dict[str, int]:
    """fvcore-convention FLOPs of the seed's forward, from the layer shapes alone."""
    n = (img // patch) ** 2 + 1
    linear = n * D * 3 * D + n * D * D + 2 * n * D * MLP  # qkv, proj, two MLP layers
    attention = 2 * n * n * D  # QK^T and AV, summed over the heads
    layer_norms = 2 * 5 * n * D
    return {
        "patch": (n - 1) * D * 3 * patch * patch,
        "block": linear + attention + layer_norms,
        "attention": attention,
        "norm": 5 * n * D,
    }


def test_vit_cifar_p2_has_the_seeds_parameter_count():
    model = build_model("vit_cifar_p2", num_classes=10)
    head = count_params(model.head)
    assert head == D * 10 + 10
    assert count_params(model) - head == 2_725_632
    assert count_params(model.patch_embed) == 2_496
    assert count_params(model.blocks) == 2_673_216
    assert model.pos_embed.shape == (1, 257, D)
    assert len(model.blocks) == DEPTH
    assert (
        model.blocks[0].attn.heads == HEADS
        and model.blocks[0].mlp.fc1.out_features == MLP
    )


def test_patch_size_changes_only_the_tokenizer():
    model = build_model("vit_cifar_p2", patch_size=4)
    assert model.num_patches == 64
    assert model.pos_embed.shape == (1, 65, D)
    assert count_params(model.patch_embed) == 3 * 4 * 4 * D + D
    assert count_params(model.blocks) == 2_673_216
    assert model(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def test_a_patch_size_that_does_not_divide_the_image_is_refused():
    with pytest.raises(ValueError, match="not divisible by patch size 5"):
        build_model("vit_cifar_p2", patch_size=5)


def test_fvcore_flops_reproduce_the_seeds_table():
    flops = fvcore_flops(_SeedForward(build_model("vit_cifar_p2")), (1, 3, 32, 32))
    assert flops[""] == 915_674_304
    assert flops["vit.patch_embed.proj"] == 589_824
    assert flops["vit.blocks"] == 914_837_760
    assert flops["vit.norm"] == 246_720


@pytest.mark.parametrize("patch", [2, 4, 8])
def test_fvcore_flops_match_the_hand_count(patch):
    flops = fvcore_flops(
        _SeedForward(build_model("vit_cifar_p2", patch_size=patch)), (1, 3, 32, 32)
    )
    hand = _hand_flops(patch)
    assert flops["vit.blocks.0"] == hand["block"]
    assert flops[""] == hand["patch"] + DEPTH * hand["block"] + hand["norm"]
    attn = "vit.blocks.0.attn"
    assert (
        flops[attn] - flops[f"{attn}.qkv"] - flops[f"{attn}.proj"] == hand["attention"]
    )


def test_our_model_normalises_every_token_as_timm():
    # forward_features ends with the final norm over all 257 tokens, as the seed's
    model = build_model("vit_cifar_p2", num_classes=10)
    flops = fvcore_flops(model, (1, 3, 32, 32))
    assert flops["norm"] == 5 * 257 * D
    assert flops["head"] == D * 10
    assert flops[""] == 915_674_304 + D * 10


def test_layer_norm_is_counted_with_fvcore_rule():
    x = torch.zeros(3, 5, 8)
    assert fvcore_flops(nn.LayerNorm(8), x)[""] == 5 * x.numel()
    plain = nn.LayerNorm(8, elementwise_affine=False)
    assert fvcore_flops(plain, x)[""] == 4 * x.numel()


def test_fvcore_flops_restore_training_mode():
    model = build_model("vit_cifar_p2", patch_size=8).train()
    fvcore_flops(model, (1, 3, 32, 32))
    assert model.training
