"""Tests for going_modular.models.cct (ViT-Lite, CVT, CCT, text CCT) and models.complexity."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from going_modular.models import build_model, list_models
from going_modular.models.cct import (
    CCT,
    Attention,
    SeqPool,
    TextCCT,
    TransformerEncoderLayer,
    cct_2_3x2,
    cct_7_3x1,
    cvt_7_4,
    text_cct_2,
    text_cct_4,
    text_cct_6,
    vit_lite_7_4,
)
from going_modular.models.complexity import count_macs

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


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", sorted(PARAMS_32))
def test_parameter_count(name: str) -> None:
    assert n_params(build_model(name, img_size=32)) == PARAMS_32[name]


def test_parameter_count_cct_14_7x2_imagenet() -> None:
    # The paper's ImageNet CCT-14/7x2: 22.36M parameters at 224 px and 1000 classes.
    model = build_model("cct_14_7x2", num_classes=1000)
    assert model.img_size == (224, 224) and model.grid_size == (14, 14)
    assert n_params(model) == 22_367_273


@pytest.mark.parametrize(
    ("factory", "kernel_size", "expected"),
    [
        # The reference README's text models (AGNews, 4 classes): 0.238M, 0.276M, 0.353M, 0.436M,
        # 3.237M, 3.467M trainable parameters, word embeddings excluded.
        (text_cct_2, 1, 237_701),
        (text_cct_2, 2, 276_101),
        (text_cct_2, 4, 352_901),
        (text_cct_4, 1, 436_101),
        (text_cct_6, 1, 3_236_613),
        (text_cct_6, 4, 3_467_013),
    ],
)
def test_text_parameter_count(factory, kernel_size: int, expected: int) -> None:
    model = factory(vocab_size=50, num_classes=4, kernel_size=kernel_size)
    trainable = sum(
        p.numel()
        for name, p in model.named_parameters()
        if p.requires_grad and not name.startswith("embedding.")
    )
    assert trainable == expected


def test_registry_builds_all_variants() -> None:
    assert set(PARAMS_32) <= set(list_models())
    model = build_model("cct_2_3x2")
    assert isinstance(model, CCT)
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    model = build_model(
        "cct_2_3x2", num_classes=100, in_channels=1, img_size=28, dropout=0.1
    )
    assert model(torch.randn(1, 1, 28, 28)).shape == (1, 100)


def test_state_dict_keys_follow_the_reference() -> None:
    keys = set(cct_7_3x1().state_dict())
    for key in (
        "tokenizer.conv_layers.0.0.weight",
        "classifier.positional_emb",
        "classifier.attention_pool.weight",
        "classifier.attention_pool.bias",
        "classifier.blocks.6.pre_norm.weight",
        "classifier.blocks.6.self_attn.qkv.weight",
        "classifier.blocks.6.self_attn.proj.bias",
        "classifier.blocks.6.linear1.weight",
        "classifier.blocks.6.norm1.weight",
        "classifier.blocks.6.linear2.weight",
        "classifier.norm.weight",
        "classifier.fc.weight",
    ):
        assert key in keys
    assert "classifier.blocks.0.self_attn.qkv.bias" not in keys
    assert "classifier.class_emb" in vit_lite_7_4().state_dict()


def test_sine_embedding_is_a_fixed_buffer() -> None:
    model = cct_7_3x1(positional_embedding="sine")
    pe = model.classifier.positional_emb
    assert pe.shape == (1, 256, 256) and not pe.requires_grad
    assert all(p is not pe for p in model.parameters())
    assert any(b is pe for b in model.buffers())
    assert "classifier.positional_emb" in model.state_dict()
    assert n_params(model) == PARAMS_32["cct_7_3x1"] - 256 * 256
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
    assert torch.equal(model.classifier.positional_emb, before)


def test_sine_embedding_with_class_token() -> None:
    model = vit_lite_7_4(positional_embedding="sine")
    assert model.classifier.positional_emb.shape == (
        1,
        65,
        256,
    )  # 64 patches + class token
    assert n_params(model) == PARAMS_32["vit_lite_7_4"] - 65 * 256
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


@pytest.mark.parametrize("factory", [cct_2_3x2, cvt_7_4, vit_lite_7_4])
def test_no_positional_embedding(factory) -> None:
    learnable = factory()
    model = factory(positional_embedding="none")
    assert model.classifier.positional_emb is None
    assert not any("positional_emb" in key for key in model.state_dict())
    assert (
        n_params(learnable) - n_params(model)
        == learnable.classifier.positional_emb.numel()
    )
    out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 10) and torch.isfinite(out).all()


def test_bad_positional_embedding() -> None:
    with pytest.raises(ValueError, match="positional_embedding"):
        build_model("cct_7_3x1", positional_embedding="rotary")
    with pytest.raises(ValueError, match="positional_embedding"):
        text_cct_2(vocab_size=10, num_classes=2, positional_embedding="sinusoidal")


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
    logits, weights = model(torch.randn(3, 3, 32, 32), return_pool_weights=True)
    assert logits.shape == (3, 10) and weights.shape == (3, 256)
    assert torch.allclose(weights.sum(dim=1), torch.ones(3))
    assert (weights >= 0).all()
    assert weights.reshape(3, *model.grid_size).shape == (3, 16, 16)
    with pytest.raises(ValueError, match="class token"):
        vit_lite_7_4()(torch.randn(1, 3, 32, 32), return_pool_weights=True)


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


def test_stochastic_depth_and_init() -> None:
    model = cct_7_3x1()
    rates = [block.drop_path.p for block in model.classifier.blocks]
    assert rates == pytest.approx([0.1 * i / 6 for i in range(7)])
    block = model.classifier.blocks[3]
    assert block.self_attn.qkv.bias is None
    assert torch.equal(block.linear1.bias, torch.zeros_like(block.linear1.bias))
    assert torch.equal(block.norm1.weight, torch.ones(256))
    assert 0.015 < block.linear1.weight.std().item() < 0.025
    assert 0.15 < model.classifier.positional_emb.std().item() < 0.25


def test_encoder_layer_wiring() -> None:
    torch.manual_seed(0)
    layer = TransformerEncoderLayer(16, 2, 32).eval()
    x = torch.randn(2, 5, 16)
    y = layer.norm1(x + layer.self_attn(layer.pre_norm(x)))
    expected = y + layer.linear2(F.gelu(layer.linear1(y)))
    assert torch.allclose(layer(x), expected, atol=1e-6)


def test_attention_weights_path_matches_sdpa() -> None:
    torch.manual_seed(0)
    attn = Attention(16, 4).eval()
    x = torch.randn(2, 6, 16)
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])[:, None, None, :]
    out, weights = attn(x, mask, need_weights=True)
    assert torch.allclose(out, attn(x, mask), atol=1e-6)
    assert weights.shape == (2, 4, 6, 6)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 4, 6))
    assert (weights[1, ..., 4:] == 0).all()
    maps = cct_2_3x2().get_attention_maps(torch.randn(1, 3, 32, 32))
    assert len(maps) == 2 and maps[0].shape == (1, 2, 64, 64)


def _padded_batch(
    lengths: list[int], width: int, vocab: int
) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(2, vocab, (len(lengths), width))
    mask = torch.arange(width)[None] < torch.tensor(lengths)[:, None]
    return torch.where(mask, ids, 1), mask  # 1 = the padding index


def test_text_forward_backward_with_mask() -> None:
    torch.manual_seed(0)
    model = text_cct_2(vocab_size=100, num_classes=3, seq_len=32).train()
    ids, mask = _padded_batch([32, 20, 5], 32, 100)
    out = model(ids, mask)
    assert out.shape == (3, 3) and torch.isfinite(out).all()
    out.sum().backward()
    assert model.embedding.weight.grad is not None
    _, weights = model(ids, mask, return_pool_weights=True)
    assert torch.allclose(weights.sum(dim=1), torch.ones(3))
    assert (
        weights[2, 4:] == 0
    ).all()  # 5 words -> 4 real tokens after conv and pooling


@pytest.mark.parametrize("kernel_size", [1, 2, 4])
@pytest.mark.parametrize("positional_embedding", ["sine", "learnable"])
def test_text_padding_does_not_change_output(
    kernel_size: int, positional_embedding: str
) -> None:
    torch.manual_seed(0)
    model = text_cct_4(
        vocab_size=100,
        num_classes=3,
        kernel_size=kernel_size,
        seq_len=48,
        positional_embedding=positional_embedding,
    ).eval()
    lengths = [37, 11, 2]
    ids, mask = _padded_batch(lengths, 40, 100)
    out = model(ids, mask)
    # Other token ids at the padded positions.
    noisy = torch.where(mask, ids, torch.randint(2, 100, ids.shape))
    assert torch.allclose(model(noisy, mask), out, atol=1e-5)
    # More padding.
    longer_ids = torch.cat([ids, torch.ones(3, 8, dtype=ids.dtype)], dim=1)
    longer_mask = torch.cat([mask, torch.zeros(3, 8, dtype=torch.bool)], dim=1)
    assert torch.allclose(model(longer_ids, longer_mask), out, atol=1e-5)
    # Each sequence alone, without padding or mask.
    for i, n in enumerate(lengths):
        assert torch.allclose(model(ids[i : i + 1, :n])[0], out[i], atol=1e-5)


def test_text_mask_errors_and_embeddings() -> None:
    weights = torch.randn(20, 8)
    model = TextCCT(20, 2, seq_len=16, word_embedding_dim=8, embedding_weights=weights)
    assert (
        torch.equal(model.embedding.weight, weights)
        and model.embedding.weight.requires_grad
    )
    frozen = TextCCT(20, 2, word_embedding_dim=8, freeze_embedding=True)
    assert not frozen.embedding.weight.requires_grad
    ids = torch.randint(0, 20, (2, 16))
    with pytest.raises(ValueError, match="right-padded"):
        model(ids, torch.tensor([[False] * 4 + [True] * 12, [True] * 16]))
    with pytest.raises(ValueError, match="seq_len"):
        model(torch.randint(0, 20, (2, 17)))
    with pytest.raises(ValueError, match="embedding_weights"):
        TextCCT(21, 2, word_embedding_dim=8, embedding_weights=weights)


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


@pytest.mark.parametrize("positional_embedding", ["sine", "learnable"])
def test_text_model_avoids_the_reference_bugs(positional_embedding: str) -> None:
    """The package's answers to chapter 11's bug hunt: mask shape, table rows, word width."""
    model = text_cct_2(
        vocab_size=50,
        num_classes=3,
        seq_len=24,
        word_embedding_dim=100,
        positional_embedding=positional_embedding,
    )
    n_tokens = model.tokenizer.sequence_length(24)
    assert model.classifier.positional_emb.shape == (
        1,
        n_tokens,
        128,
    )  # N rows, not N+1
    assert model.tokenizer.conv_layers[0].in_channels == 100
    ids, mask = _padded_batch([24, 6], 24, 50)
    _, token_mask = model.tokenizer(model.embedding(ids), mask)
    assert token_mask.shape == (2, n_tokens) and token_mask.dtype == torch.bool
    assert model(ids, mask).shape == (2, 3)
