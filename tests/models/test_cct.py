"""Tests for going_modular.models.cct (ViT-Lite, CVT, CCT for images) and models.complexity:
the reference's parameter counts and checkpoint layout, shapes, pooling, initialisation."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from going_modular.models import build_model, list_models
from going_modular.models.cct import (
    CompactBlock,
    CompactTransformer,
    SeqPool,
    Tokenizer,
)
from going_modular.models.cct_variants import (
    CCT,
    cct_2_3x2,
    cct_7_3x1,
    cvt_7_4,
    vit_lite_7_4,
)
from vitbook.models.complexity import count_macs, count_params
from vitbook.models.convert import REFERENCE_KEYS, load_renamed

# 32x32 inputs, 10 classes, learnable position embeddings. The ViT-Lite-7/4, CVT-7/4,
# CCT-2/3x2, CCT-4/3x2, CCT-7/3x2 and CCT-7/3x1 counts are the reference implementation's;
# the others follow from the same formulas.
PARAMS_32 = {
    "vit_lite_2_4": 214_666,
    "vit_lite_4_4": 413_066,
    "vit_lite_6_4": 3_190_538,
    "vit_lite_7_4": 3_716_874,
    "cvt_2_4": 214_539,
    "cvt_4_4": 412_939,
    "cvt_6_4": 3_190_283,
    "cvt_7_4": 3_716_619,
    "cct_2_3x2": 283_723,
    "cct_4_3x2": 482_123,
    "cct_6_3x1": 3_233_803,
    "cct_6_3x2": 3_326_923,
    "cct_7_3x1": 3_760_139,
    "cct_7_3x2": 3_853_259,
    "cct_7_7x2": 4_500_939,
    "cct_14_7x2": 21_912_395,
}


@pytest.mark.parametrize("name", sorted(PARAMS_32))
def test_parameter_count(name: str) -> None:
    with torch.device("meta"):
        assert count_params(build_model(name, img_size=32)) == PARAMS_32[name]


def test_parameter_count_cct_14_7x2_imagenet() -> None:
    # The paper's ImageNet CCT-14/7x2: 22.36M parameters at 224 px and 1000 classes.
    model = build_model("cct_14_7x2", num_classes=1000)
    assert model.img_size == (224, 224) and model.grid_size == (14, 14)
    assert count_params(model) == 22_367_273


def test_count_params_trainable_only() -> None:
    model = cct_2_3x2(pos_embed="sine")
    model.tokenizer.requires_grad_(False)
    tokenizer = 3 * 64 * 9 + 64 * 128 * 9
    assert count_params(model) == PARAMS_32["cct_2_3x2"] - 64 * 128  # the sine buffer
    assert count_params(model, trainable_only=True) == count_params(model) - tokenizer


def test_registry_builds_all_variants() -> None:
    assert set(PARAMS_32) <= set(list_models())
    model = build_model("cct_2_3x2")
    assert isinstance(model, CCT)
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    model = build_model(
        "cct_2_3x2", num_classes=100, in_channels=1, img_size=28, drop_rate=0.1
    )
    assert model(torch.randn(1, 1, 28, 28)).shape == (1, 100)


# The authors' checkpoints -----------------------------------------------------------------------


def reference_state_dict(
    convs: list[tuple[int, int, int]], conv_bias: bool, tokens: int, class_token: bool
) -> dict[str, torch.Tensor]:
    """Random tensors under the keys and shapes of SHI-Labs/Compact-Transformers' CCT,
    CVT or ViT-Lite (``tokenizer`` and ``classifier = TransformerClassifier``), 2 layers of
    width 128, MLP ratio 1, 10 classes."""
    d, state = 128, {}
    for i, (c_in, c_out, k) in enumerate(convs):
        state[f"tokenizer.conv_layers.{i}.0.weight"] = (
            torch.randn(c_out, c_in, k, k) / k
        )
        if conv_bias:
            state[f"tokenizer.conv_layers.{i}.0.bias"] = torch.randn(c_out)
    if class_token:
        state["classifier.class_emb"] = torch.randn(1, 1, d)
    else:
        state["classifier.attention_pool.weight"] = torch.randn(1, d) / 10
        state["classifier.attention_pool.bias"] = torch.randn(1)
    state["classifier.positional_emb"] = torch.randn(1, tokens + class_token, d)
    shapes = {
        "pre_norm.weight": (d,),
        "pre_norm.bias": (d,),
        "self_attn.qkv.weight": (3 * d, d),
        "self_attn.proj.weight": (d, d),
        "self_attn.proj.bias": (d,),
        "linear1.weight": (d, d),
        "linear1.bias": (d,),
        "norm1.weight": (d,),
        "norm1.bias": (d,),
        "linear2.weight": (d, d),
        "linear2.bias": (d,),
    }
    for i in range(2):
        for key, shape in shapes.items():
            scale = 1 if len(shape) == 1 else d**-0.5
            state[f"classifier.blocks.{i}.{key}"] = torch.randn(shape) * scale
    state["classifier.norm.weight"] = torch.randn(d)
    state["classifier.norm.bias"] = torch.randn(d)
    state["classifier.fc.weight"] = torch.randn(10, d) / 10
    state["classifier.fc.bias"] = torch.randn(10)
    return state


def reference_forward(state: dict, images: torch.Tensor, cct: bool) -> torch.Tensor:
    """The reference's forward, written from its equations with its key names: tokenizer,
    class token or not, positions, [x += MSA(pre_norm(x)); x = norm1(x); x += MLP(x)] per
    layer, norm, SeqPool or the class token, fc. 2 heads."""

    def linear(x, name):
        return F.linear(x, state[f"{name}.weight"], state.get(f"{name}.bias"))

    def layer_norm(x, name):
        return F.layer_norm(
            x, x.shape[-1:], state[f"{name}.weight"], state[f"{name}.bias"]
        )

    x, i = images, 0
    while f"tokenizer.conv_layers.{i}.0.weight" in state:
        weight = state[f"tokenizer.conv_layers.{i}.0.weight"]
        if cct:  # stride 1, padding 1, then ReLU and max-pool 3/2/1
            x = F.max_pool2d(F.relu(F.conv2d(x, weight, None, 1, 1)), 3, 2, 1)
        else:  # patches of 4
            x = F.conv2d(x, weight, state[f"tokenizer.conv_layers.{i}.0.bias"], 4)
        i += 1
    x = x.flatten(2).transpose(1, 2)
    if "classifier.class_emb" in state:
        x = torch.cat([state["classifier.class_emb"].expand(len(x), -1, -1), x], dim=1)
    x = x + state["classifier.positional_emb"]
    for layer in range(2):
        name = f"classifier.blocks.{layer}"
        q, k, v = linear(
            layer_norm(x, f"{name}.pre_norm"), f"{name}.self_attn.qkv"
        ).chunk(3, -1)
        q, k, v = (t.unflatten(-1, (2, -1)).transpose(1, 2) for t in (q, k, v))
        weights = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(dim=-1)
        x = x + linear(
            (weights @ v).transpose(1, 2).flatten(2), f"{name}.self_attn.proj"
        )
        x = layer_norm(x, f"{name}.norm1")
        x = x + linear(F.gelu(linear(x, f"{name}.linear1")), f"{name}.linear2")
    x = layer_norm(x, "classifier.norm")
    if "classifier.attention_pool.weight" in state:
        pool = linear(x, "classifier.attention_pool").softmax(dim=1)  # (B, N, 1)
        x = (pool.transpose(1, 2) @ x).squeeze(1)
    else:
        x = x[:, 0]
    return linear(x, "classifier.fc")


@pytest.mark.parametrize("name", ["cct_2_3x2", "cvt_2_4", "vit_lite_2_4"])
def test_the_authors_checkpoints_load_and_give_their_logits(name: str) -> None:
    torch.manual_seed(0)
    cct = name.startswith("cct")
    convs = [(3, 64, 3), (64, 128, 3)] if cct else [(3, 128, 4)]
    state = reference_state_dict(
        convs, conv_bias=not cct, tokens=64, class_token=name.startswith("vit_lite")
    )
    model = load_renamed(build_model(name), state, REFERENCE_KEYS).eval()
    images = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        expected = reference_forward(state, images, cct)
        assert expected.std() > 0.1
        torch.testing.assert_close(model(images), expected, atol=1e-4, rtol=1e-4)


def test_model_layout() -> None:
    model = cct_7_3x1()
    assert [name for name, _ in model.named_children()] == [
        "tokenizer",
        "seq_pool",
        "pos_drop",
        "blocks",
        "norm",
        "head",
    ]
    assert model.cls_token is None and model.pool == "seq" and len(model.blocks) == 7
    lite = vit_lite_7_4()
    assert lite.seq_pool is None and lite.cls_token.shape == (1, 1, 256)
    assert lite.pos_embed.shape == (1, 65, 256)


# Position embeddings ----------------------------------------------------------------------------


def test_sine_embedding_is_a_fixed_buffer() -> None:
    model = cct_7_3x1(pos_embed="sine")
    pe = model.pos_embed
    assert pe.shape == (1, 256, 256) and not pe.requires_grad
    assert all(p is not pe for p in model.parameters())
    assert any(b is pe for b in model.buffers())
    assert "pos_embed" in model.state_dict()
    assert count_params(model) == PARAMS_32["cct_7_3x1"] - 256 * 256
    dim = 256
    for pos in range(4):
        for i in range(dim // 2):
            angle = pos / 10000 ** (2 * i / dim)
            assert pe[0, pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[0, pos, 2 * i + 1].item() == pytest.approx(
                math.cos(angle), abs=1e-6
            )
    # Training never changes it.
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    before = pe.clone()
    model(torch.randn(2, 3, 32, 32)).sum().backward()
    optimizer.step()
    assert torch.equal(model.pos_embed, before)


def test_sine_embedding_with_class_token() -> None:
    model = vit_lite_7_4(pos_embed="sine")
    assert model.pos_embed.shape == (1, 65, 256)  # 64 patches + class token
    assert count_params(model) == PARAMS_32["vit_lite_7_4"] - 65 * 256
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


@pytest.mark.parametrize("factory", [cct_2_3x2, cvt_7_4, vit_lite_7_4])
def test_no_positional_embedding(factory) -> None:
    learnable = factory()
    model = factory(pos_embed="none")
    assert model.pos_embed is None
    assert not any("pos_embed" in key for key in model.state_dict())
    assert count_params(learnable) - count_params(model) == learnable.pos_embed.numel()
    out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 10) and torch.isfinite(out).all()


def test_bad_pos_embed_and_pool() -> None:
    with pytest.raises(
        ValueError, match="pos_embed 'rotary'.*'learnable', 'sine', 'none'"
    ):
        build_model("cct_7_3x1", pos_embed="rotary")
    with pytest.raises(ValueError, match="pool 'max'.*'seq', 'cls', 'mean'"):
        build_model("cct_7_3x1", pool="max")


def test_bad_input_size_and_channels() -> None:
    model = cct_7_3x1()
    with pytest.raises(ValueError, match="img_size"):
        model(torch.randn(1, 3, 64, 64))
    with pytest.raises(ValueError, match="in_channels"):
        model(torch.randn(1, 1, 32, 32))
    with pytest.raises(ValueError, match="shape"):
        model(torch.randn(3, 32, 32))
    with pytest.raises(ValueError, match="divisible by patch size"):
        vit_lite_7_4(img_size=30)
    with pytest.raises(ValueError, match="too small"):
        CCT(img_size=2, kernel_size=3, padding=0)


# Forward, backward, pooling ---------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PARAMS_32))
def test_forward_backward_32(name: str) -> None:
    torch.manual_seed(0)
    model = build_model(name, img_size=32).train()
    out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 10) and torch.isfinite(out).all()
    out.logsumexp(dim=1).sum().backward()
    assert all(
        p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters()
    )


@pytest.mark.parametrize("name", ["cct_7_7x2", "cct_14_7x2"])
def test_forward_backward_224(name: str) -> None:
    model = build_model(name).train()
    assert model.grid_size == (14, 14)
    out = model(torch.randn(1, 3, 224, 224))
    assert out.shape == (1, 10) and torch.isfinite(out).all()
    out.sum().backward()
    assert model.tokenizer.conv_layers[0][0].weight.grad is not None


def test_seqpool_weights() -> None:
    model = cct_7_3x1().eval()
    images = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        weights = model.pool_weights(images)
        _, pooled_with = model.pool_tokens(model.forward_features(images))
    assert weights.shape == (3, 256) and torch.equal(weights, pooled_with)
    assert torch.allclose(weights.sum(dim=1), torch.ones(3))
    assert (weights >= 0).all()
    assert weights.reshape(3, *model.grid_size).shape == (3, 16, 16)
    with pytest.raises(ValueError, match="class token"):
        vit_lite_7_4().pool_weights(torch.randn(1, 3, 32, 32))


def test_forward_returns_only_the_logits() -> None:
    model = cct_2_3x2().eval()
    images = torch.randn(2, 3, 32, 32)
    assert isinstance(model(images), torch.Tensor)
    with pytest.raises(TypeError):
        model(images, return_pool_weights=True)  # the weights: model.pool_weights


def test_pos_drop_rate_is_the_dropout_after_the_position_embedding() -> None:
    model = cct_2_3x2(drop_rate=0.1, pos_drop_rate=0.2)
    assert model.pos_drop.p == 0.2
    assert model.blocks[0].mlp.drop1.p == model.blocks[0].attn.proj_drop.p == 0.1
    assert cct_2_3x2(drop_rate=0.1).pos_drop.p == 0.0  # its own rate, as the ViT's
    assert vit_lite_7_4(pos_drop_rate=0.3).pos_drop.p == 0.3


def test_seqpool_mask_and_formula() -> None:
    torch.manual_seed(0)
    pool = SeqPool(8)
    x = torch.randn(2, 5, 8)
    mask = torch.tensor([[True, True, True, False, False], [True] * 5])
    pooled, weights = pool(x, mask)
    assert torch.allclose(weights.sum(dim=1), torch.ones(2))
    assert (weights[0, 3:] == 0).all() and (weights[0, :3] > 0).all()
    expected = F.softmax(x[0, :3] @ pool.weight.T + pool.bias, dim=0)  # (3, 1)
    assert torch.allclose(pooled[0], (expected * x[0, :3]).sum(dim=0), atol=1e-6)


def test_class_token_variant_of_a_cct() -> None:
    # Chapter 9's exercise: CCT-2/3x2's tokenizer and body, pooling with a class token.
    tokenizer = Tokenizer(1, 128, kernel_size=3, stride=1, padding=1, n_conv_layers=2)
    model = CompactTransformer(
        tokenizer, 32, pool="cls", dim=128, depth=2, heads=2, mlp_ratio=1.0
    )
    seq = build_model("cct_2_3x2", in_channels=1)
    assert count_params(model) - count_params(seq) == 2 * 128 - (128 + 1)
    images = torch.randn(4, 1, 32, 32)
    with torch.no_grad():
        pooled, weights = model.pool_tokens(model.encode(model.tokenizer(images)))
    assert pooled.shape == (4, 128) and weights is None


def test_pooling_is_chosen_by_an_argument() -> None:
    torch.manual_seed(0)
    images = torch.randn(2, 3, 32, 32)
    for pool, extra in [("seq", 128 + 1), ("cls", 2 * 128), ("mean", 0)]:
        model = cct_2_3x2(pool=pool).eval()
        params = count_params(model) - count_params(cct_2_3x2(pool="mean"))
        assert params == extra, pool
        with torch.no_grad():
            features = model.forward_features(images)
            pooled = model.forward_head(features, pre_logits=True)
            assert torch.equal(model.forward_head(features), model(images))
        assert features.shape == (2, 64 + (pool == "cls"), 128)  # two 2x poolings
        if pool == "mean":
            torch.testing.assert_close(pooled, features.mean(dim=1))
        if pool == "cls":
            assert torch.equal(pooled, features[:, 0])
    with pytest.raises(ValueError, match="the mean: it has no SeqPool"):
        cct_2_3x2(pool="mean").pool_weights(images)


def test_forward_features_ends_with_the_final_norm() -> None:
    model = cvt_7_4().eval()
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        features = model.forward_features(images)
        assert torch.equal(features, model.encode(model.tokenizer(images)))
    assert features.shape == (2, 64, 256)
    torch.testing.assert_close(features.mean(-1), torch.zeros(2, 64), atol=1e-4, rtol=0)
    torch.testing.assert_close(
        features.std(-1, unbiased=False), torch.ones(2, 64), atol=1e-3, rtol=0
    )


def test_stochastic_depth_and_init() -> None:
    model = cct_7_3x1()
    rates = [block.drop_path.p for block in model.blocks]
    assert rates == pytest.approx([0.1 * i / 6 for i in range(7)])
    block = model.blocks[3]
    assert block.attn.qkv.bias is None and isinstance(block, CompactBlock)
    assert torch.equal(block.mlp.fc1.bias, torch.zeros_like(block.mlp.fc1.bias))
    assert torch.equal(block.norm2.weight, torch.ones(256))
    assert 0.015 < block.mlp.fc1.weight.std().item() < 0.025
    assert 0.15 < model.pos_embed.std().item() < 0.25


def test_attention_maps() -> None:
    model = cct_2_3x2().train()
    maps = model.get_attention_maps(torch.randn(1, 3, 32, 32))
    assert model.training and len(maps) == 2 and maps[0].shape == (1, 2, 64, 64)
    torch.testing.assert_close(maps[1].sum(-1), torch.ones(1, 2, 64))


def test_macs_cct_7_3x1() -> None:
    model = cct_7_3x1()
    macs = count_macs(model, (1, 3, 32, 32))
    assert model.training  # mode restored
    assert macs["conv"] == 3 * 256 * 9 * 32 * 32
    assert macs["conv"] + macs["linear"] == pytest.approx(0.947e9, rel=0.005)
    # QK^T and AV: 2 N^2 D per layer with N = D = 256, plus SeqPool's weighted sum (N D).
    assert macs["attention"] == 7 * 2 * 256**3 + 256 * 256
    assert macs["total"] == pytest.approx(1.18e9, rel=0.005)  # the paper: 1.19G
    assert macs["other"] == 0
