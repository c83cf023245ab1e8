"""Tests for going_modular.models.layers: the block against its equations in every variation,
attention against torch's, record_attention, DropPath, and the key-map loaders."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from going_modular.models.cct import CompactBlock
from going_modular.models.layers import (
    Attention,
    Block,
    DropPath,
    Mlp,
    collect_attention,
    conv_output_size,
    explicit_attention,
    record_attention,
    sinusoidal_embedding,
)
from going_modular.models.vitbn import TokenBatchNorm
from vitbook.models.convert import load_renamed, rename_keys


@torch.no_grad()
def randomize_(module: nn.Module) -> nn.Module:
    """Random values for every parameter, so that ones and zeros (norms, biases) are tested."""
    for p in module.parameters():
        p.normal_(0.0, 0.2).add_(1.0 if p.ndim == 1 else 0.0)
    return module


def attention_by_hand(attn: Attention, x: torch.Tensor, mask=None) -> torch.Tensor:
    """softmax(q k^T / sqrt(d_h)) v per head, heads concatenated, then the output projection."""
    q, k, v = attn.qkv(x).chunk(3, dim=-1)
    q, k, v = (
        t.unflatten(-1, (attn.heads, attn.head_dim)).transpose(1, 2) for t in (q, k, v)
    )
    scores = q @ k.transpose(-2, -1) / math.sqrt(attn.head_dim)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    heads = scores.softmax(dim=-1) @ v
    return attn.proj(heads.transpose(1, 2).flatten(2))


def mlp_by_hand(mlp: Mlp, x: torch.Tensor) -> torch.Tensor:
    return mlp.fc2(F.gelu(mlp.norm(mlp.fc1(x))))


# The block, variation by variation --------------------------------------------------------------


def test_vit_block_is_eq_2_then_eq_3():
    torch.manual_seed(0)
    block = randomize_(
        Block(32, 4, 2.0, norm_layer=partial(nn.LayerNorm, eps=1e-6))
    ).eval()
    x = torch.randn(2, 7, 32)
    with torch.no_grad():
        x1 = x + attention_by_hand(block.attn, block.norm1(x))  # Eq. 2
        expected = x1 + mlp_by_hand(block.mlp, block.norm2(x1))  # Eq. 3
        torch.testing.assert_close(block(x), expected, atol=1e-5, rtol=1e-4)
    assert block.attn.qkv.bias is not None and block.mlp.fc1.out_features == 64
    assert block.norm1.eps == 1e-6 and isinstance(block.mlp.norm, nn.Identity)


def test_cct_block_normalises_the_stream_after_attention():
    torch.manual_seed(0)
    block = randomize_(CompactBlock(16, 2, 2.0, qkv_bias=False)).eval()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        y = block.norm2(x + attention_by_hand(block.attn, block.norm1(x)))
        torch.testing.assert_close(
            block(x), y + mlp_by_hand(block.mlp, y), atol=1e-5, rtol=1e-4
        )
    assert block.attn.qkv.bias is None


def test_batchnorm_block_has_its_norm_inside_the_mlp():
    torch.manual_seed(0)
    block = Block(
        16,
        2,
        2.0,
        head_dim=12,
        norm_layer=TokenBatchNorm,
        norm2_layer=nn.Identity,
        mlp_layer=partial(Mlp, norm_layer=TokenBatchNorm),
    )
    randomize_(block)
    assert isinstance(block.norm2, nn.Identity) and isinstance(
        block.mlp.norm, TokenBatchNorm
    )
    x = torch.randn(3, 5, 16)

    def batch_norm(norm, z):
        """Training mode: this batch's statistics, over images and tokens."""
        mean, var = z.mean(dim=(0, 1)), z.var(dim=(0, 1), unbiased=False)
        return norm.weight * (z - mean) / torch.sqrt(var + norm.eps) + norm.bias

    with torch.no_grad():
        x1 = x + attention_by_hand(block.attn, batch_norm(block.norm1, x))
        hidden = batch_norm(block.mlp.norm, block.mlp.fc1(x1))
        expected = x1 + block.mlp.fc2(F.gelu(hidden))
        block.attn.attn_drop_rate = 0.0  # train mode for BatchNorm, without dropout
        torch.testing.assert_close(block.train()(x), expected, atol=1e-5, rtol=1e-4)


def test_block_rejects_an_mlp_of_width_zero():
    with pytest.raises(ValueError, match=r"mlp_ratio=0.01 .* = 0"):
        Block(32, 2, 0.01)


def test_block_state_dict_keys_are_the_package_vocabulary():
    # the names the chapters' own classes use, so that plain load_state_dict works
    assert list(Block(8, 2, 2.0).state_dict()) == [
        "norm1.weight",
        "norm1.bias",
        "attn.qkv.weight",
        "attn.qkv.bias",
        "attn.proj.weight",
        "attn.proj.bias",
        "norm2.weight",
        "norm2.bias",
        "mlp.fc1.weight",
        "mlp.fc1.bias",
        "mlp.fc2.weight",
        "mlp.fc2.bias",
    ]


def test_conv_output_size_is_that_of_conv_and_pool_layers():
    x = torch.zeros(1, 1, 37)
    for kernel, stride, padding in [(3, 1, 1), (7, 2, 3), (2, 2, 1), (4, 3, 0)]:
        conv = nn.Conv1d(1, 1, kernel, stride, padding)
        pool = nn.MaxPool1d(kernel, stride, min(padding, kernel // 2))
        assert conv_output_size(37, kernel, stride, padding) == conv(x).shape[-1]
        assert conv_output_size(37, kernel, stride, pool.padding) == pool(x).shape[-1]
    lengths = torch.tensor([5, 37])
    assert conv_output_size(lengths, 3, 2, 1).tolist() == [3, 19]


def test_sinusoidal_embedding_layouts():
    pe = sinusoidal_embedding(17, 64)[0]
    angle = torch.arange(17.0)[:, None] / 10000 ** (torch.arange(32) * 2 / 64)
    torch.testing.assert_close(pe[:, 0::2], angle.sin())  # interleaved: sin, cos, ...
    torch.testing.assert_close(pe[:, 1::2], angle.cos())
    concatenated = sinusoidal_embedding(17, 64, interleave=False)[0]
    torch.testing.assert_close(concatenated[:, :32], angle.sin())  # sines, then cosines
    torch.testing.assert_close(concatenated[:, 32:], angle.cos())
    assert pe.dtype == torch.float32 and sinusoidal_embedding(3, 5).shape == (1, 3, 5)
    with pytest.raises(ValueError, match="even"):
        sinusoidal_embedding(4, 5, interleave=False)


def test_dropout_is_where_the_paper_puts_it_and_off_in_eval():
    block = Block(16, 2, drop_rate=0.1, attn_drop_rate=0.2, drop_path_rate=0.3)
    dropouts = {n: m.p for n, m in block.named_modules() if isinstance(m, nn.Dropout)}
    assert dropouts == {"attn.proj_drop": 0.1, "mlp.drop1": 0.1, "mlp.drop2": 0.1}
    assert block.attn.attn_drop_rate == 0.2 and block.drop_path.p == 0.3
    x = torch.randn(4, 6, 16)
    with torch.no_grad():
        assert not torch.equal(block.train()(x), block(x))
        assert torch.equal(block.eval()(x), block(x))


# Attention --------------------------------------------------------------------------------------


def test_attention_matches_nn_multihead_attention():
    torch.manual_seed(0)
    mha = randomize_(nn.MultiheadAttention(24, 4, batch_first=True)).eval()
    attn = Attention(24, 4).eval()
    rules = [(r"^in_proj_", "qkv."), (r"^out_proj\.", "proj.")]
    load_renamed(attn, mha, rules)
    x = torch.randn(2, 9, 24)
    with torch.no_grad():
        expected, expected_weights = mha(x, x, x, average_attn_weights=False)
        with record_attention(attn) as maps:
            out = attn(x)
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(maps[0], expected_weights, atol=1e-6, rtol=1e-4)
        torch.testing.assert_close(attn(x), expected, atol=1e-5, rtol=1e-4)


def test_attention_with_heads_wider_than_dim_over_heads():
    torch.manual_seed(0)
    attn = Attention(
        16, 8, head_dim=64, qkv_bias=True
    ).eval()  # the ViTBN article's shapes
    assert attn.qkv.weight.shape == (3 * 8 * 64, 16) and attn.proj.weight.shape == (
        16,
        512,
    )
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        torch.testing.assert_close(
            attn(x), attention_by_hand(attn, x), atol=1e-5, rtol=1e-4
        )


def test_attention_needs_heads_to_divide_dim_or_a_head_dim():
    with pytest.raises(
        ValueError, match="dim=100 is not divisible by heads=12.*head_dim"
    ):
        Attention(100, 12)
    assert Attention(100, 12, head_dim=8).proj.in_features == 96


def test_fused_attn_switches_each_attention_and_explicit_attention_restores_it(
    monkeypatch,
):
    torch.manual_seed(0)
    blocks = nn.Sequential(Block(16, 2), Block(16, 2)).eval()
    other = Attention(16, 2).eval()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        fused = blocks(x)
    calls = []
    sdpa = F.scaled_dot_product_attention

    def counting_sdpa(*args, **kwargs):
        calls.append(1)
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counting_sdpa)
    assert blocks[0].attn.fused_attn and other.fused_attn  # SDPA by default
    blocks[1].attn.fused_attn = False  # one module explicit, as timm's attribute
    with torch.no_grad():
        torch.testing.assert_close(blocks(x), fused, atol=1e-6, rtol=1e-5)
        assert len(calls) == 1
        with explicit_attention(blocks):  # this model's attentions only
            assert not blocks[0].attn.fused_attn and other.fused_attn
            torch.testing.assert_close(blocks(x), fused, atol=1e-6, rtol=1e-5)
            other(x)
        assert len(calls) == 2  # other's
    assert blocks[0].attn.fused_attn and not blocks[1].attn.fused_attn  # restored


# record_attention -------------------------------------------------------------------------------


def test_record_attention_gives_the_softmax_used_in_forward():
    torch.manual_seed(0)
    attn = randomize_(Attention(16, 4, qkv_bias=False)).eval()
    x = torch.randn(2, 6, 16)
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])[:, None, None, :]
    with torch.no_grad():
        with record_attention(attn) as maps:
            recorded = attn(x, mask)
        fused = attn(x, mask)
        (weights,) = maps
        assert weights.shape == (2, 4, 6, 6)
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 6))
        assert (weights[1, ..., 4:] == 0).all()  # masked keys
        torch.testing.assert_close(recorded, fused, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(
            recorded, attention_by_hand(attn, x, mask), atol=1e-5, rtol=1e-4
        )
        # the weights are those forward uses: A v, projected, is the output
        v = attn.qkv(x).chunk(3, dim=-1)[2].unflatten(-1, (4, 4)).transpose(1, 2)
        torch.testing.assert_close(
            attn.proj((weights @ v).transpose(1, 2).flatten(2)), recorded
        )
    assert attn.recorded is None  # recording stops with the block


def test_record_attention_collects_one_map_per_block_in_order():
    torch.manual_seed(0)
    blocks = nn.Sequential(*(Block(16, 2) for _ in range(3))).train()
    x = torch.randn(2, 5, 16)
    with torch.no_grad(), record_attention(blocks) as maps:
        blocks(x)
    assert len(maps) == 3 and all(m.shape == (2, 2, 5, 5) for m in maps)
    with torch.no_grad(), record_attention(blocks[1]) as second:
        blocks(x)
    assert len(second) == 1
    maps_eval = collect_attention(blocks, x)
    assert blocks.training and len(maps_eval) == 3  # eval inside, train mode restored
    with pytest.raises(ValueError, match="no going_modular.models.layers.Attention"):
        with record_attention(nn.Linear(2, 2)):
            pass
    with pytest.raises(RuntimeError, match="already active"):
        with record_attention(blocks), record_attention(blocks):
            pass


# DropPath ---------------------------------------------------------------------------------------


def test_drop_path_is_the_identity_in_eval_and_keeps_the_mean_in_training():
    x = torch.randn(2000, 3, 4)
    drop = DropPath(0.25)
    assert torch.equal(drop.eval()(x), x)
    assert torch.equal(DropPath(0.0).train()(x), x)
    torch.manual_seed(0)
    y = drop.train()(x)
    kept = (y != 0).flatten(1).any(dim=1)
    torch.testing.assert_close(y[kept], x[kept] / 0.75)  # whole samples kept, rescaled
    assert (y[~kept] == 0).all() and 0.7 < kept.float().mean() < 0.8


# Key maps ---------------------------------------------------------------------------------------


def test_rename_keys_applies_every_rule_in_turn():
    rules = [(r"^encoder\.(\d+)\.", r"blocks.\1."), (r"\.linear1\.", ".mlp.fc1.")]
    renamed = rename_keys({"encoder.3.linear1.weight": 1, "head.bias": 2}, rules)
    assert renamed == {"blocks.3.mlp.fc1.weight": 1, "head.bias": 2}
    with pytest.raises(ValueError, match="Two source keys"):
        rename_keys({"a.x": 1, "b.x": 2}, [(r"^[ab]\.", "")])


def test_load_renamed_names_what_does_not_fit():
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, norm_first=True)
    rules = [
        (r"^self_attn\.in_proj_", "attn.qkv."),
        (r"^self_attn\.out_proj\.", "attn.proj."),
        (r"^linear([12])\.", r"mlp.fc\1."),
    ]
    with pytest.raises(ValueError, match="LayerNorm eps mismatch.*eps=1e-05"):
        load_renamed(
            Block(16, 2, 2.0, norm_layer=partial(nn.LayerNorm, eps=1e-6)), layer, rules
        )
    with pytest.raises(
        ValueError, match=r"Shape mismatch for mlp.fc1.weight <- linear1.weight"
    ):
        load_renamed(Block(16, 2, 4.0), layer, rules)
    with pytest.raises(
        ValueError, match="no place in this model.*self_attn.in_proj_weight"
    ):
        load_renamed(Block(16, 2, 2.0), layer, rules[1:])
    with pytest.raises(
        ValueError, match="12 tensors of this model get no source tensor.*norm1.weight"
    ):
        load_renamed(Block(16, 2, 2.0), {}, rules)
    block = load_renamed(Block(16, 2, 2.0), layer, rules)
    assert torch.equal(block.attn.qkv.weight, layer.self_attn.in_proj_weight)
