"""Tests for going_modular.models.vitbn: shapes, parameter counts, BatchNorm statistics,
train/eval behaviour, and that every encoder block runs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from going_modular.models import build_model
from going_modular.models.vitbn import (
    TokenBatchNorm,
    ViT,
    ViTBN,
    ViTBNFFN,
    sinusoidal_positions,
)

NAMES = ("vitbn_vit", "vitbn_ffn", "vitbn")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def expected_params(
    d=64,
    depth=6,
    heads=8,
    dim_head=64,
    mlp=128,
    p=7,
    c=1,
    classes=10,
    batchnorm_ffn=False,
) -> int:
    """The article's configuration counted layer by layer (norms have 2 per feature)."""
    patch_dim, tokens, inner = c * p * p, (28 // p) ** 2 + 1, heads * dim_head
    embed = 2 * patch_dim + (patch_dim * d + d) + 2 * d + d + tokens * d  # + cls + pos
    attn = 2 * d + (d * 3 * inner + 3 * inner) + (inner * d + d)
    ff = (d * mlp + mlp) + (mlp * d + d) + (2 * mlp if batchnorm_ffn else 2 * d)
    return embed + depth * (attn + ff) + 2 * d + (d * classes + classes)


def test_parameter_counts_match_the_hand_count():
    assert n_params(build_model("vitbn_vit")) == expected_params() == 902_380
    for name in ("vitbn_ffn", "vitbn"):
        assert n_params(build_model(name)) == expected_params(batchnorm_ffn=True)
    assert expected_params(batchnorm_ffn=True) == 903_148


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("pool", ["cls", "mean"])
@pytest.mark.parametrize("pos_emb", ["learn", "pe1d"])
def test_shapes(name, pool, pos_emb):
    model = build_model(name, depth=2, pool=pool, pos_emb=pos_emb)
    out = model(torch.randn(4, 1, 28, 28))
    assert out.shape == (4, 10)
    fixed = pos_emb == "pe1d"
    assert ("pos_embedding" in dict(model.named_parameters())) is not fixed


def test_the_norms_are_where_the_article_puts_them():
    def kinds(model):
        return [
            type(m)
            for m in model.modules()
            if isinstance(m, nn.LayerNorm | nn.BatchNorm1d)
        ]

    vit, ffn, bn = (cls(depth=2) for cls in (ViT, ViTBNFFN, ViTBN))
    assert set(kinds(vit)) == {nn.LayerNorm} and len(kinds(vit)) == 2 + 2 * 2 + 1
    assert kinds(ffn).count(TokenBatchNorm) == 2 and kinds(ffn).count(nn.LayerNorm) == 5
    assert set(kinds(bn)) == {TokenBatchNorm} and len(kinds(bn)) == 2 + 2 * 2 + 1
    ff = ffn.transformer.layers[0].ff.net
    assert isinstance(ff[0], nn.Identity) and isinstance(ff[2], TokenBatchNorm)
    assert isinstance(ff[3], nn.GELU)


def test_token_batchnorm_statistics_are_over_batch_and_tokens():
    norm = TokenBatchNorm(5, momentum=None)  # cumulative running average
    x = torch.randn(3, 7, 5) * torch.arange(1, 6) + torch.arange(5)
    y = norm(x)
    flat = x.reshape(-1, 5)  # 21 values per feature: batch AND tokens
    mean, var = flat.mean(0), flat.var(0, unbiased=False)
    torch.testing.assert_close(y, (x - mean) / torch.sqrt(var + norm.eps))
    torch.testing.assert_close(norm.running_mean, mean)
    torch.testing.assert_close(norm.running_var, flat.var(0, unbiased=True))
    # per-token statistics (LayerNorm's axis or a batch-only BatchNorm) would differ
    assert not torch.allclose(y, (x - x.mean(0)) / x.std(0, unbiased=False))


def test_token_batchnorm_rejects_other_layouts():
    with pytest.raises(ValueError, match="batch, tokens, features"):
        TokenBatchNorm(4)(torch.randn(2, 4))


def test_eval_uses_running_statistics():
    torch.manual_seed(0)
    model = ViTBN(depth=2)
    images = torch.randn(8, 1, 28, 28)
    model.train()
    for _ in range(3):
        model(images)
    norm = model.transformer.layers[0].ff.net[2]
    assert norm.num_batches_tracked.item() == 3
    running = norm.running_mean.clone()
    model.eval()
    with torch.no_grad():
        alone = model(images[:1])
        in_batch = model(images)[:1]
    torch.testing.assert_close(alone, in_batch)  # no batch statistics in eval
    torch.testing.assert_close(norm.running_mean, running)  # and no update
    model.train()
    with torch.no_grad():
        assert not torch.allclose(model(images[:2])[:1], model(images)[:1])


@pytest.mark.parametrize("name", NAMES)
def test_every_encoder_block_runs(name):
    model = build_model(name)  # depth 6
    calls = []
    for i, block in enumerate(model.transformer.layers):
        block.register_forward_hook(lambda *_, i=i: calls.append(i))
    model(torch.randn(2, 1, 28, 28))
    assert calls == [0, 1, 2, 3, 4, 5]


def test_sinusoidal_positions():
    pe = sinusoidal_positions(17, 64)
    assert pe.shape == (17, 64)
    torch.testing.assert_close(pe[0], torch.cat([torch.zeros(32), torch.ones(32)]))
    torch.testing.assert_close(pe[:, :32] ** 2 + pe[:, 32:] ** 2, torch.ones(17, 32))
    with pytest.raises(ValueError, match="even"):
        sinusoidal_positions(4, 5)


def test_bad_arguments_are_explained():
    with pytest.raises(ValueError, match="divisible"):
        ViT(patch_size=5)
    with pytest.raises(ValueError, match="pool"):
        ViT(pool="max")
    with pytest.raises(ValueError, match="pos_emb"):
        ViT(pos_emb="2d")
    with pytest.raises(ValueError, match="image_size and channels"):
        ViT(depth=1)(torch.randn(2, 3, 28, 28))
