"""Tests for going_modular.models.vit: shapes, parameter counts, and agreement with torch,
torchvision, timm and the chapters' classes."""

from __future__ import annotations

from functools import partial

import pytest
import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from going_modular.models import build_model, list_models
from going_modular.models.layers import Block
from going_modular.models.vit import (
    HybridEmbedding,
    PatchEmbedding,
    ViT,
    vit_4_16,
    vit_b_16,
    vit_h_14,
    vit_l_16,
)
from vitbook.book.explorers import model_config
from vitbook.models.complexity import count_params
from vitbook.models.convert import (
    load_encoder_layer,
    load_torchvision_weights,
)


def randomize_(module: nn.Module) -> None:
    """Give every parameter random values, so zero- or one-initialised tensors are tested too."""
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 0.2).add_(1.0 if p.ndim == 1 else 0.0)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread: these ops are small, and on a shared CPU two threads can be 10x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def vit_b16_pair() -> tuple[ViT, torchvision.models.VisionTransformer]:
    torch.manual_seed(0)
    tv = torchvision.models.vit_b_16(weights=None)
    with torch.no_grad():  # torchvision zero-initialises these: make them matter
        nn.init.normal_(tv.class_token, std=0.02)
        nn.init.normal_(tv.heads.head.weight, std=0.02)
        nn.init.normal_(tv.heads.head.bias, std=0.02)
    ours = load_torchvision_weights(vit_b_16(), tv)
    return ours.eval(), tv.eval()


# Shapes ------------------------------------------------------------------------------------


def test_patch_embedding_shape() -> None:
    embed = PatchEmbedding(in_channels=3, patch_size=16, dim=768)
    assert embed.proj.weight.shape == (768, 3, 16, 16)
    assert embed(torch.randn(2, 3, 224, 224)).shape == (2, 196, 768)


def test_vit_b16_shapes_at_every_block(vit_b16_pair: tuple[ViT, nn.Module]) -> None:
    model, _ = vit_b16_pair
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        patches = model.patch_embed(x)
        z = model._embed(x)
        block = model.blocks[0]
        z1 = block(z)
        features = model.forward_features(x)
        logits = model(x)
        by_parts = model.forward_head(features)
        pre_logits = model.forward_head(features, pre_logits=True)
    assert patches.shape == (2, 196, 768)
    assert z.shape == z1.shape == features.shape == (2, 197, 768)
    # timm's forward_features ends with the final norm: every token has mean 0, std 1
    torch.testing.assert_close(
        features.mean(-1), torch.zeros(2, 197), atol=1e-4, rtol=0
    )
    assert torch.equal(by_parts, logits) and pre_logits.shape == (2, 768)
    assert torch.equal(model.head(pre_logits), logits)
    assert model.cls_token.shape == (1, 1, 768)
    assert model.pos_embed.shape == (1, 197, 768)
    assert logits.shape == (2, 1000)
    assert len(model.blocks) == 12 and block.mlp.fc1.out_features == 3072


def test_vit_4_16_other_sizes() -> None:
    model = vit_4_16(num_classes=5, img_size=64, patch_size=8, in_channels=1).eval()
    assert model.pos_embed.shape == (1, 65, 192)
    assert model(torch.randn(3, 1, 64, 64)).shape == (3, 5)


# Parameter counts and initialisation -------------------------------------------------------

PAPER_COUNTS = [  # torchvision's documented counts for Table 1's models
    (vit_b_16, 1000, 86_567_656),
    (vit_b_16, 3, 85_800_963),
    (vit_l_16, 1000, 304_326_632),
    (vit_h_14, 1000, 632_045_800),
]


@pytest.mark.parametrize(("factory", "num_classes", "expected"), PAPER_COUNTS)
def test_parameter_counts(factory, num_classes: int, expected: int) -> None:
    with torch.device("meta"):  # no memory, no init cost
        ours = factory(num_classes=num_classes)
        tv = getattr(torchvision.models, factory.__name__)(
            weights=None, num_classes=num_classes
        )
    assert count_params(ours) == count_params(tv) == expected


def test_tensor_shapes_match_torchvision() -> None:
    with torch.device("meta"):
        ours, tv = vit_h_14(), torchvision.models.vit_h_14(weights=None)
    assert sorted(p.shape for p in ours.parameters()) == sorted(
        p.shape for p in tv.parameters()
    )


def test_initialisation() -> None:
    torch.manual_seed(0)
    model = vit_4_16(num_classes=1000)
    assert 0.018 < model.blocks[2].attn.qkv.weight.std() < 0.022
    assert 0.018 < model.head.weight.std() < 0.022 and not model.head.bias.any()
    assert 0.018 < model.pos_embed.std() < 0.022
    fan_in = 3 * 16 * 16
    assert abs(model.patch_embed.proj.weight.std() * fan_in**0.5 - 1) < 0.05
    assert torch.equal(model.norm.weight, torch.ones(192))


# Agreement with torch.nn, torchvision, timm and the chapters ----------------------------------


def test_block_matches_nn_transformer_encoder_layer() -> None:
    torch.manual_seed(0)
    dim, heads, mlp = 64, 4, 128
    layer = nn.TransformerEncoderLayer(
        dim,
        heads,
        mlp,
        dropout=0.0,
        activation="gelu",
        batch_first=True,
        norm_first=True,
        layer_norm_eps=1e-6,
    ).eval()
    randomize_(layer)
    with pytest.raises(ValueError, match="eps mismatch.*eps=1e-06"):
        load_encoder_layer(Block(dim, heads, mlp / dim), layer)
    block = Block(dim, heads, mlp / dim, norm_layer=partial(nn.LayerNorm, eps=1e-6))
    load_encoder_layer(block, layer).eval()
    x = torch.randn(2, 11, dim)
    with torch.no_grad():
        torch.testing.assert_close(block(x), layer(x), atol=1e-5, rtol=1e-4)


def test_load_encoder_layer_rejects_post_norm_and_other_head_counts() -> None:
    layer = nn.TransformerEncoderLayer(64, 4, 128, activation="gelu", batch_first=True)
    with pytest.raises(ValueError, match="norm_first=True"):
        load_encoder_layer(Block(64, 4, 2.0), layer)
    layer = nn.TransformerEncoderLayer(
        64, 4, 128, activation="gelu", batch_first=True, norm_first=True
    )
    with pytest.raises(ValueError, match="Head count mismatch.*heads=4"):
        load_encoder_layer(Block(64, 8, 2.0), layer)


def test_vit_b16_matches_torchvision_logits(
    vit_b16_pair: tuple[ViT, nn.Module],
) -> None:
    model, tv = vit_b16_pair
    torch.manual_seed(1)
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        expected, logits = tv(x), model(x)
    assert expected.std() > 0.1  # not a comparison of two near-constant outputs
    torch.testing.assert_close(logits, expected, atol=1e-4, rtol=1e-4)


def test_load_torchvision_weights_rejects_other_configs() -> None:
    tv = torchvision.models.VisionTransformer(
        image_size=64,
        patch_size=8,
        num_layers=2,
        num_heads=3,
        hidden_dim=192,
        mlp_dim=384,
    )
    with pytest.raises(ValueError, match="Layer count mismatch.*depth=2"):
        load_torchvision_weights(vit_4_16(img_size=64, patch_size=8), tv)
    with pytest.raises(ValueError, match="pos_embed.*img_size \\(64\\)"):
        load_torchvision_weights(vit_4_16(img_size=32, patch_size=8, depth=2), tv)
    with pytest.raises(ValueError, match="Head count mismatch.*heads=3"):
        load_torchvision_weights(
            vit_4_16(img_size=64, patch_size=8, depth=2, heads=6), tv
        )
    model = vit_4_16(num_classes=1000, img_size=64, patch_size=8, depth=2)
    torch.testing.assert_close(  # and the matching config loads and agrees
        load_torchvision_weights(model, tv).eval()(torch.ones(1, 3, 64, 64)),
        tv.eval()(torch.ones(1, 3, 64, 64)),
    )


def test_a_timm_vit_state_dict_loads_as_it_is() -> None:
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    theirs = timm.models.vision_transformer.VisionTransformer(
        img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=3
    ).eval()
    randomize_(theirs)
    ours = ViT(img_size=32, patch_size=8, num_classes=3, dim=64, depth=2, heads=4)
    ours.load_state_dict(theirs.state_dict())  # strict: the same names
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours.eval()(x), theirs(x), atol=1e-5, rtol=1e-4)


class ChapterViT(nn.Module):
    """A ViT written the chapters' way (plain modules, its own forward) but with the package's
    names: patch_embed.proj, cls_token, pos_embed, blocks.N.{norm1, attn.qkv, attn.proj, norm2,
    mlp.fc1, mlp.fc2}, norm, head."""

    def __init__(self, img_size: int, patch: int, dim: int, depth: int, heads: int):
        super().__init__()
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Conv2d(3, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, (img_size // patch) ** 2 + 1, dim))
        self.blocks = nn.Sequential()
        for _ in range(depth):
            block = nn.Module()
            block.norm1 = nn.LayerNorm(dim, eps=1e-6)
            block.attn = nn.Module()
            block.attn.qkv = nn.Linear(dim, 3 * dim)
            block.attn.proj = nn.Linear(dim, dim)
            block.norm2 = nn.LayerNorm(dim, eps=1e-6)
            block.mlp = nn.Module()
            block.mlp.fc1 = nn.Linear(dim, 2 * dim)
            block.mlp.fc2 = nn.Linear(2 * dim, dim)
            self.blocks.append(block)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, 5)
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (B, dim, H/p, W/p) -> (B, N, dim)
        z = self.patch_embed.proj(x).flatten(2).transpose(1, 2)
        z = torch.cat([self.cls_token.expand(len(x), -1, -1), z], 1) + self.pos_embed
        for block in self.blocks:  # Eq. 2 and 3
            # (B, N, dim) -> (B, heads, N, head_dim) for each of q, k, v
            q, k, v = block.attn.qkv(block.norm1(z)).chunk(3, dim=-1)
            q, k, v = (
                t.unflatten(-1, (self.heads, -1)).transpose(1, 2) for t in (q, k, v)
            )
            # (B, heads, N, head_dim) -> (B, N, dim)
            attended = (
                F.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(2)
            )
            z = block.attn.proj(attended) + z
            z = block.mlp.fc2(F.gelu(block.mlp.fc1(block.norm2(z)))) + z
        return self.head(self.norm(z[:, 0]))


def test_a_vit_named_the_package_s_way_loads_strictly_and_gives_its_logits() -> None:
    torch.manual_seed(0)
    chapter = ChapterViT(img_size=32, patch=8, dim=48, depth=2, heads=3).eval()
    randomize_(chapter)
    ours = ViT(
        img_size=32,
        patch_size=8,
        num_classes=5,
        dim=48,
        depth=2,
        heads=3,
        mlp_ratio=2.0,
    )
    assert list(ours.state_dict()) == list(chapter.state_dict())
    ours.load_state_dict(chapter.state_dict())  # strict: the same names and shapes
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours.eval()(x), chapter(x), atol=1e-5, rtol=1e-4)
    # one block alone: the chapter's block -> Block, strictly
    block = Block(48, 3, 2.0, norm_layer=partial(nn.LayerNorm, eps=1e-6))
    block.load_state_dict(chapter.blocks[1].state_dict())
    assert torch.equal(block.mlp.fc2.weight, chapter.blocks[1].mlp.fc2.weight)
    with pytest.raises(RuntimeError, match="Missing key"):
        ours.load_state_dict(ChapterViT(32, 8, 48, 1, 3).state_dict())


# Attention maps ----------------------------------------------------------------------------


def test_attention_maps() -> None:
    torch.manual_seed(0)
    model = vit_4_16(num_classes=3, img_size=64, patch_size=8).train()
    maps = model.get_attention_maps(torch.randn(2, 3, 64, 64))
    assert model.training  # mode restored
    assert len(maps) == len(model.blocks) == 4
    for weights in maps:
        assert weights.shape == (2, 3, 65, 65)
        assert (weights >= 0).all()
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 65))


# Clear errors ------------------------------------------------------------------------------


def test_img_size_not_divisible_in_init() -> None:
    with pytest.raises(
        ValueError, match=r"Image size 225 is not divisible by patch size 16.*224"
    ):
        ViT(img_size=225, patch_size=16)


def test_img_size_not_divisible_in_forward() -> None:
    message = (
        r"Image size 225x225 is not divisible by patch size 16: "
        r"resize or crop to a multiple of 16 \(e\.g\. 224\)\."
    )
    with pytest.raises(ValueError, match=message):
        PatchEmbedding()(torch.randn(1, 3, 225, 225))
    with pytest.raises(ValueError, match=r"e\.g\. 64x32"):
        vit_4_16(img_size=64, patch_size=8)(torch.randn(1, 3, 70, 39))


def test_wrong_image_size_in_forward() -> None:
    model = vit_4_16(img_size=64, patch_size=8)
    with pytest.raises(ValueError, match="built for 64x64 images .* got 128x128"):
        model(torch.randn(1, 3, 128, 128))


def test_channel_mismatch() -> None:
    with pytest.raises(
        ValueError, match="Expected 3 input channels, got 1.*in_channels=1"
    ):
        vit_4_16(img_size=32)(torch.randn(1, 1, 32, 32))
    with pytest.raises(ValueError, match="add a batch dimension"):
        PatchEmbedding()(torch.randn(3, 224, 224))


def test_heads_must_divide_dim() -> None:
    with pytest.raises(ValueError, match="dim=192 is not divisible by heads=5"):
        vit_4_16(heads=5)


# Registry and training ---------------------------------------------------------------------


def test_registry() -> None:
    assert {"vit_b_16", "vit_l_16", "vit_h_14", "vit_4_16", "vit_cifar_p2"} <= set(
        list_models()
    )
    with torch.device("meta"):
        model = build_model("vit_b_16", num_classes=3)
    assert isinstance(model, ViT)
    assert model.head.out_features == 3
    assert count_params(model) == 85_800_963
    assert "ViT(patch_size=16, depth=12, dim=768" in vit_b_16.__doc__


def test_vit_4_16_trains() -> None:
    torch.manual_seed(0)
    model = build_model("vit_4_16", num_classes=3)
    images, labels = torch.randn(8, 3, 224, 224), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def eval_loss() -> float:
        model.eval()
        with torch.no_grad():
            return F.cross_entropy(model(images), labels).item()

    before = eval_loss()
    model.train()
    for _ in range(10):
        optimizer.zero_grad()
        F.cross_entropy(model(images), labels).backward()
        optimizer.step()
    after = eval_loss()
    assert after < 0.5 * before, (before, after)


def test_hybrid_keeps_the_token_grid_and_sees_a_margin_around_each_patch() -> None:
    """Section 3.1's hybrid: the same N tokens as the plain ViT, each computed from the
    (p + 12) x (p + 12) pixels around its p x p patch and from nothing else."""
    torch.manual_seed(0)
    p = 4
    hybrid = vit_4_16(
        img_size=28, in_channels=1, patch_size=p, dim=32, heads=2, stem_channels=8
    )
    plain = vit_4_16(img_size=28, in_channels=1, patch_size=p, dim=32, heads=2)
    assert isinstance(hybrid.patch_embed, HybridEmbedding)
    x = torch.randn(2, 1, 28, 28)
    assert (
        hybrid.forward_features(x).shape
        == plain.forward_features(x).shape
        == (2, 50, 32)
    )
    tokens = hybrid.patch_embed(x)  # (2, 49, 32)
    # token 3 * 7 + 2 covers rows 12..15 and columns 8..11; it sees rows 6..21, cols 2..17
    row, col = 3, 2
    seen = torch.zeros(28, 28, dtype=torch.bool)
    seen[4 * row - 6 : 4 * row + 10, 4 * col - 6 : 4 * col + 10] = True
    outside = torch.where(seen, x, torch.randn_like(x))
    assert torch.equal(
        hybrid.patch_embed(outside)[:, 7 * row + col], tokens[:, 7 * row + col]
    )
    edge = x.clone()
    edge[..., 4 * row - 6, 4 * col - 6 : 4 * col + 10] += 3.0  # the window's top row
    assert not torch.allclose(
        hybrid.patch_embed(edge)[:, 7 * row + col], tokens[:, 7 * row + col]
    )


def test_hybrid_refuses_what_it_cannot_embed() -> None:
    with pytest.raises(ValueError, match="multiple of 4.*got 6: use 8"):
        HybridEmbedding(in_channels=1, patch_size=6, dim=32, stem_channels=8)
    hybrid = vit_4_16(img_size=28, in_channels=1, patch_size=4, stem_channels=8)
    with pytest.raises(ValueError, match="30x30 is not divisible by patch size 4"):
        hybrid(torch.randn(1, 1, 30, 30))  # 30 -> 15 -> 7: the grid would fit silently
    with pytest.raises(ValueError, match="Expected 1 input channels, got 3"):
        hybrid(torch.randn(1, 3, 28, 28))
    with pytest.raises(TypeError, match="hybrid"):
        model_config(hybrid)
