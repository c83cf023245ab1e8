"""Tests for going_modular.models.vit: shapes, parameter counts, and agreement with torch/torchvision."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from going_modular.models import build_model, list_models
from going_modular.models.vit import (
    MLPBlock,
    MultiheadSelfAttentionBlock,
    PatchEmbedding,
    TransformerEncoderBlock,
    ViT,
    load_encoder_layer,
    load_multihead_attention,
    load_torchvision_weights,
    vit_b_16,
    vit_h_14,
    vit_l_16,
    vit_tiny,
)


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


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
    embed = PatchEmbedding(in_channels=3, patch_size=16, embedding_dim=768)
    assert embed.patcher.weight.shape == (768, 3, 16, 16)
    assert embed(torch.randn(2, 3, 224, 224)).shape == (2, 196, 768)


def test_vit_b16_shapes_at_every_block(vit_b16_pair: tuple[ViT, nn.Module]) -> None:
    model, _ = vit_b16_pair
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        patches = model.patch_embedding(x)
        z = model._embed(x)
        block = model.encoder[0]
        attended = block.msa_block(z)
        mlp_out = block.mlp_block(attended + z)
        z1 = block(z)
        features = model.forward_features(x)
        logits = model(x)
    assert patches.shape == (2, 196, 768)
    assert z.shape == (2, 197, 768)
    assert model.class_embedding.shape == (1, 1, 768)
    assert model.position_embedding.shape == (1, 197, 768)
    assert attended.shape == mlp_out.shape == z1.shape == (2, 197, 768)
    torch.testing.assert_close(z1, attended + z + mlp_out)
    assert features.shape == (2, 197, 768)
    assert logits.shape == (2, 1000)
    assert len(model.encoder) == 12


def test_vit_tiny_other_sizes() -> None:
    model = vit_tiny(num_classes=5, img_size=64, patch_size=8, in_channels=1).eval()
    assert model.position_embedding.shape == (1, 65, 192)
    assert model(torch.randn(3, 1, 64, 64)).shape == (3, 5)


# Parameter counts --------------------------------------------------------------------------

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
    assert n_params(ours) == n_params(tv) == expected


def test_tensor_shapes_match_torchvision() -> None:
    with torch.device("meta"):
        ours, tv = vit_h_14(), torchvision.models.vit_h_14(weights=None)
    assert sorted(p.shape for p in ours.parameters()) == sorted(
        p.shape for p in tv.parameters()
    )


# Agreement with torch.nn -------------------------------------------------------------------


def test_msa_block_matches_nn_multihead_attention() -> None:
    torch.manual_seed(0)
    dim, heads = 64, 4
    block = MultiheadSelfAttentionBlock(embedding_dim=dim, num_heads=heads).eval()
    mha = nn.MultiheadAttention(dim, heads, batch_first=True).eval()
    norm = nn.LayerNorm(dim, eps=1e-6)
    randomize_(mha)
    randomize_(norm)
    load_multihead_attention(block, mha, norm)
    x = torch.randn(3, 10, dim)
    with torch.no_grad():
        y = norm(x)
        expected, expected_w = mha(
            y, y, y, need_weights=True, average_attn_weights=False
        )
        _, expected_mean_w = mha(y, y, y, need_weights=True, average_attn_weights=True)
        expected_fast, _ = mha(y, y, y, need_weights=False)
        out = block(x)
        out_w, weights = block(x, need_weights=True)
    assert out.shape == (3, 10, dim) and weights.shape == (3, heads, 10, 10)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out, expected_fast, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out_w, expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(weights, expected_w, atol=1e-6, rtol=1e-4)
    torch.testing.assert_close(
        weights.mean(dim=1), expected_mean_w, atol=1e-6, rtol=1e-4
    )


def test_msa_block_matches_explicit_sdpa() -> None:
    torch.manual_seed(0)
    block = MultiheadSelfAttentionBlock(embedding_dim=48, num_heads=6).eval()
    x = torch.randn(2, 7, 48)
    with torch.no_grad():
        q, k, v = block.qkv(block.layer_norm(x)).chunk(3, dim=-1)
        q, k, v = (t.reshape(2, 7, 6, 8).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v)
        expected = block.proj(attended.transpose(1, 2).reshape(2, 7, 48))
        manual = (q @ k.transpose(-2, -1) / 8**0.5).softmax(-1) @ v
        out = block(x)
        _, weights = block(x, need_weights=True)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(weights @ v, manual, atol=1e-5, rtol=1e-4)


def test_encoder_block_matches_nn_transformer_encoder_layer() -> None:
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
    block = load_encoder_layer(TransformerEncoderBlock(dim, heads, mlp), layer).eval()
    x = torch.randn(2, 11, dim)
    with torch.no_grad():
        expected = layer(x)
        out = block(x)
        out_w, weights = block(x, need_weights=True)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out_w, out, atol=1e-5, rtol=1e-4)
    assert weights.shape == (2, heads, 11, 11)


def test_mlp_block_layout() -> None:
    block = MLPBlock(embedding_dim=32, mlp_size=64, dropout=0.1)
    kinds = [type(m) for m in block.mlp]
    assert kinds == [nn.Linear, nn.GELU, nn.Dropout, nn.Linear, nn.Dropout]
    assert block.layer_norm.eps == 1e-6
    assert block(torch.randn(2, 5, 32)).shape == (2, 5, 32)


# Agreement with torchvision ----------------------------------------------------------------


def test_vit_b16_matches_torchvision_logits(
    vit_b16_pair: tuple[ViT, nn.Module],
) -> None:
    model, tv = vit_b16_pair
    torch.manual_seed(1)
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        expected, logits = tv(x), model(x)
    assert (
        expected.std() > 0.1
    )  # the comparison is not between two near-constant outputs
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
    with pytest.raises(
        ValueError, match="Layer count mismatch.*num_transformer_layers=2"
    ):
        load_torchvision_weights(vit_tiny(img_size=64, patch_size=8), tv)
    with pytest.raises(ValueError, match="position_embedding.*img_size"):
        load_torchvision_weights(
            vit_tiny(img_size=32, patch_size=8, num_transformer_layers=2), tv
        )
    model = vit_tiny(
        num_classes=1000, img_size=64, patch_size=8, num_transformer_layers=2
    )
    torch.testing.assert_close(  # and the matching config loads and agrees
        load_torchvision_weights(model, tv).eval()(torch.ones(1, 3, 64, 64)),
        tv.eval()(torch.ones(1, 3, 64, 64)),
    )


def test_load_encoder_layer_rejects_post_norm() -> None:
    layer = nn.TransformerEncoderLayer(64, 4, 128, activation="gelu", batch_first=True)
    with pytest.raises(ValueError, match="norm_first=True"):
        load_encoder_layer(TransformerEncoderBlock(64, 4, 128), layer)


# Attention maps ----------------------------------------------------------------------------


def test_attention_maps() -> None:
    torch.manual_seed(0)
    model = vit_tiny(num_classes=3, img_size=64, patch_size=8).train()
    maps = model.get_attention_maps(torch.randn(2, 3, 64, 64))
    assert model.training  # mode restored
    assert len(maps) == len(model.encoder) == 4
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
        vit_tiny(img_size=64, patch_size=8)(torch.randn(1, 3, 70, 39))


def test_wrong_image_size_in_forward() -> None:
    model = vit_tiny(img_size=64, patch_size=8)
    with pytest.raises(ValueError, match="built for 64x64 images .* got 128x128"):
        model(torch.randn(1, 3, 128, 128))


def test_channel_mismatch() -> None:
    with pytest.raises(
        ValueError, match="Expected 3 input channels, got 1.*in_channels=1"
    ):
        vit_tiny(img_size=32)(torch.randn(1, 1, 32, 32))
    with pytest.raises(ValueError, match="add a batch dimension"):
        PatchEmbedding()(torch.randn(3, 224, 224))


def test_heads_must_divide_embedding_dim() -> None:
    with pytest.raises(
        ValueError, match="embedding_dim=100 is not divisible by num_heads=12"
    ):
        MultiheadSelfAttentionBlock(embedding_dim=100, num_heads=12)
    with pytest.raises(
        ValueError, match="embedding_dim=192 is not divisible by num_heads=5"
    ):
        vit_tiny(num_heads=5)


# Registry and training ---------------------------------------------------------------------


def test_registry() -> None:
    assert {"vit_b_16", "vit_l_16", "vit_h_14", "vit_tiny"} <= set(list_models())
    with torch.device("meta"):
        model = build_model("vit_b_16", num_classes=3)
    assert isinstance(model, ViT)
    assert model.classifier[1].out_features == 3
    assert n_params(model) == 85_800_963


def test_vit_tiny_trains() -> None:
    torch.manual_seed(0)
    model = build_model("vit_tiny", num_classes=3)
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
