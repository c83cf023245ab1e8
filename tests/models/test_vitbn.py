"""Tests for going_modular.models.vitbn: shapes, parameter counts, BatchNorm statistics,
train/eval behaviour, and that every encoder block runs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from going_modular.models import build_model
from going_modular.models.vitbn import (
    TokenBatchNorm,
    Transformer,
    ViTBN,
    ViTBNFFN,
    ViTLN,
)
from vitbook.models.complexity import count_params

NAMES = ("vitbn_vit", "vitbn_ffn", "vitbn")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def expected_params(
    d=64,
    depth=6,
    heads=8,
    head_dim=64,
    mlp=128,
    p=7,
    c=1,
    classes=10,
    batchnorm_ffn=False,
) -> int:
    """The article's configuration counted layer by layer (norms have 2 per feature)."""
    patch_dim, tokens, inner = c * p * p, (28 // p) ** 2 + 1, heads * head_dim
    embed = 2 * patch_dim + (patch_dim * d + d) + 2 * d + d + tokens * d  # + cls + pos
    attn = 2 * d + (d * 3 * inner + 3 * inner) + (inner * d + d)
    ff = (d * mlp + mlp) + (mlp * d + d) + (2 * mlp if batchnorm_ffn else 2 * d)
    return embed + depth * (attn + ff) + 2 * d + (d * classes + classes)


def test_parameter_counts_match_the_hand_count():
    assert count_params(build_model("vitbn_vit")) == expected_params() == 902_380
    for name in ("vitbn_ffn", "vitbn"):
        assert count_params(build_model(name)) == expected_params(batchnorm_ffn=True)
    assert expected_params(batchnorm_ffn=True) == 903_148


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("pool", ["cls", "mean"])
@pytest.mark.parametrize("pos_embed", ["learnable", "sine"])
def test_shapes(name, pool, pos_embed):
    model = build_model(name, depth=2, pool=pool, pos_embed=pos_embed)
    out = model(torch.randn(4, 1, 28, 28))
    assert out.shape == (4, 10)
    fixed = pos_embed == "sine"
    assert ("pos_embed" in dict(model.named_parameters())) is not fixed
    assert model.pos_embed.shape == (1, 17, 64)


def test_the_norms_are_where_the_article_puts_them():
    def kinds(model):
        return [
            type(m)
            for m in model.modules()
            if isinstance(m, nn.LayerNorm | nn.BatchNorm1d)
        ]

    vit, ffn, bn = (cls(depth=2) for cls in (ViTLN, ViTBNFFN, ViTBN))
    assert set(kinds(vit)) == {nn.LayerNorm} and len(kinds(vit)) == 2 + 2 * 2 + 1
    assert kinds(ffn).count(TokenBatchNorm) == 2 and kinds(ffn).count(nn.LayerNorm) == 5
    assert set(kinds(bn)) == {TokenBatchNorm} and len(kinds(bn)) == 2 + 2 * 2 + 1
    block = ffn.transformer.blocks[0]
    assert isinstance(block.norm2, nn.Identity) and isinstance(
        block.mlp.norm, TokenBatchNorm
    )
    assert block.attn.heads == 8 and block.attn.head_dim == 64
    assert (
        block.attn.qkv.weight.shape == (3 * 512, 64)
        and block.mlp.fc1.out_features == 128
    )


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
    norm = model.transformer.blocks[0].mlp.norm
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
    for i, block in enumerate(model.transformer.blocks):
        block.register_forward_hook(lambda *_, i=i: calls.append(i))
    model(torch.randn(2, 1, 28, 28))
    assert calls == [0, 1, 2, 3, 4, 5]


def test_sine_positions_are_the_article_s_pe1d():
    # sines of dim / 2 frequencies, then the cosines, in a buffer outside the state dict
    model = build_model("vitbn", pos_embed="sine")
    pe = model.pos_embed[0]
    assert pe.shape == (17, 64) and "pos_embed" not in model.state_dict()
    torch.testing.assert_close(pe[0], torch.cat([torch.zeros(32), torch.ones(32)]))
    torch.testing.assert_close(pe[:, :32] ** 2 + pe[:, 32:] ** 2, torch.ones(17, 32))
    omega = 10_000 ** (-torch.arange(32) / 32)
    torch.testing.assert_close(pe[:, :32], (torch.arange(17.0)[:, None] * omega).sin())


def test_the_article_s_early_return_bug_can_be_replayed():
    """Chapter 12 subclasses Transformer with the article's bug: `return` inside the loop."""

    class EarlyReturnTransformer(Transformer):
        def forward(self, x):
            for block in self.blocks:
                x = block(x)
                return self.norm(x)

    model = build_model("vitbn")
    model.transformer.__class__ = EarlyReturnTransformer
    calls = []
    for block in model.transformer.blocks:
        block.register_forward_hook(lambda *_: calls.append(1))
    model(torch.randn(2, 1, 28, 28))
    assert len(calls) == 1 and len(model.transformer.blocks) == 6


def test_chapter_12_variants_by_class_attributes():
    class ViTNoFFNorm(ViTLN):
        pre_mlp_norm = False

    class ViTGNFFN(ViTBNFFN):
        mlp_norm_layer = staticmethod(lambda d: nn.GroupNorm(1, d))

    assert count_params(ViTNoFFNorm()) == 902_380 - 6 * 2 * 64
    assert isinstance(ViTGNFFN(depth=1).transformer.blocks[0].mlp.norm, nn.GroupNorm)


def test_bad_arguments_are_explained():
    with pytest.raises(ValueError, match="divisible"):
        ViTLN(patch_size=5)
    with pytest.raises(ValueError, match="pool"):
        ViTLN(pool="max")
    with pytest.raises(ValueError, match="pos_embed"):
        ViTLN(pos_embed="2d")
    with pytest.raises(ValueError, match="img_size and in_channels"):
        ViTLN(depth=1)(torch.randn(2, 3, 28, 28))
