"""Tests for going_modular.models.text_cct: the reference's parameter counts, padding that
changes nothing, masks, attention maps and embeddings."""

from __future__ import annotations

import pytest
import torch

from going_modular.models.layers import record_attention
from going_modular.models.text_cct import TextCCT, text_cct_2, text_cct_4, text_cct_6
from vitbook.data.text_data import WithPaddingMask

CCT_6 = dict(dim=256, depth=6, heads=4, mlp_ratio=2.0)  # the paper's text CCT-6


@pytest.mark.parametrize(
    ("sizes", "kernel_size", "expected"),
    [
        # The reference README's text models (AGNews, 4 classes): 0.238M, 0.276M, 0.353M, 0.436M,
        # 3.237M, 3.467M trainable parameters, word embeddings excluded.
        ({}, 1, 237_701),
        ({}, 2, 276_101),
        ({}, 4, 352_901),
        ({"depth": 4}, 1, 436_101),
        (CCT_6, 1, 3_236_613),
        (CCT_6, 4, 3_467_013),
    ],
)
def test_text_parameter_count(sizes: dict, kernel_size: int, expected: int) -> None:
    model = text_cct_2(vocab_size=50, num_classes=4, kernel_size=kernel_size, **sizes)
    trainable = sum(
        p.numel()
        for name, p in model.named_parameters()
        if p.requires_grad and not name.startswith("embedding.")
    )
    assert trainable == expected


def _trainable_without_embedding(model: TextCCT) -> int:
    return sum(
        p.numel()
        for name, p in model.named_parameters()
        if p.requires_grad and not name.startswith("embedding.")
    )


@pytest.mark.parametrize(
    ("factory", "kernel_size", "expected", "sizes"),
    [  # the reference README's text CCT-2/1, CCT-2/4, CCT-4/1, CCT-6/1 and CCT-6/4 (AGNews)
        (text_cct_2, 1, 237_701, (2, 128, 2, 128)),
        (text_cct_2, 4, 352_901, (2, 128, 2, 128)),
        (text_cct_4, 1, 436_101, (4, 128, 2, 128)),
        (text_cct_6, 1, 3_236_613, (6, 256, 4, 512)),
        (text_cct_6, 4, 3_467_013, (6, 256, 4, 512)),
    ],
)
def test_text_factories_have_the_reference_s_sizes(
    factory, kernel_size: int, expected: int, sizes: tuple[int, int, int, int]
) -> None:
    model = factory(vocab_size=50, num_classes=4, kernel_size=kernel_size)
    assert _trainable_without_embedding(model) == expected
    depth, dim, heads, mlp = sizes
    block = model.blocks[0]
    assert (len(model.blocks), model.norm.normalized_shape[0]) == (depth, dim)
    assert (block.attn.heads, block.mlp.fc1.out_features) == (heads, mlp)
    assert model.embedding.weight.shape == (50, 300)


def test_text_forward_is_forward_head_of_forward_features() -> None:
    torch.manual_seed(0)
    model = text_cct_2(vocab_size=50, num_classes=4).eval()
    ids, mask = _padded_batch([7, 20], 20, 50)
    with torch.no_grad():
        features = model.forward_features(ids, mask)
        token_mask = model.tokenizer.token_mask(mask)
        logits, weights = model(ids, mask), model.pool_weights(ids, mask)
        by_parts = model.forward_head(features, token_mask)
        _, pooled_with = model.pool_tokens(features, token_mask)
    assert features.shape == (2, 11, 128) and token_mask.shape == (2, 11)
    assert torch.equal(by_parts, logits) and torch.equal(pooled_with, weights)
    assert (weights[~token_mask] == 0).all()


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
    weights = model.pool_weights(ids, mask)
    assert torch.allclose(weights.sum(dim=1), torch.ones(3))
    assert (
        weights[2, 4:] == 0
    ).all()  # 5 words -> 4 real tokens after conv and pooling


def test_text_pool_weights_ignore_padding_also_through_the_wrapper() -> None:
    torch.manual_seed(0)
    model = text_cct_2(vocab_size=50, num_classes=3, seq_len=32).eval()
    ids, mask = _padded_batch([20, 5], 32, 50)  # padded with 1, the padding index
    real = model.tokenizer.sequence_length(5)
    with torch.no_grad():
        weights = model.pool_weights(ids, mask)
        alone = model.pool_weights(ids[1:, :5])
        wrapped = WithPaddingMask(model, pad_id=1).pool_weights(ids)
    torch.testing.assert_close(weights[1, :real], alone[0], atol=1e-6, rtol=1e-5)
    assert (weights[1, real:] == 0).all() and torch.equal(wrapped, weights)
    with pytest.raises(TypeError):
        model(ids, mask, return_pool_weights=True)  # forward gives the logits only


@pytest.mark.parametrize("kernel_size", [1, 2, 4])
@pytest.mark.parametrize("pos_embed", ["sine", "learnable"])
def test_text_padding_does_not_change_output(kernel_size: int, pos_embed: str) -> None:
    torch.manual_seed(0)
    model = text_cct_2(
        vocab_size=100,
        num_classes=3,
        kernel_size=kernel_size,
        seq_len=48,
        depth=4,
        pos_embed=pos_embed,
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


def test_attention_maps_with_and_without_the_padding_mask() -> None:
    torch.manual_seed(0)
    model = text_cct_2(vocab_size=50, num_classes=3, kernel_size=1, seq_len=24).train()
    ids, mask = _padded_batch([24, 6], 24, 50)
    maps = model.get_attention_maps(ids, mask)
    assert model.training and len(maps) == 2
    n_tokens = model.tokenizer.sequence_length(24)
    real = model.tokenizer.sequence_length(6)
    assert maps[0].shape == (2, 2, n_tokens, n_tokens)
    assert (maps[0][1, ..., real:] == 0).all()  # no real token reads a padded one
    # chapter 11's comparison: the same tokens, with and without the key-padding mask
    with torch.no_grad():
        tokens, token_mask = model.tokenizer(model.embedding(ids), mask)
        with record_attention(model) as unmasked:
            model.eval().forward_tokens(tokens)
    assert (unmasked[0][1, ..., real:] > 0).all()


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
    with pytest.raises(ValueError, match="pos_embed"):
        text_cct_2(vocab_size=10, num_classes=2, pos_embed="sinusoidal")


@pytest.mark.parametrize("pos_embed", ["sine", "learnable"])
def test_text_model_avoids_the_reference_bugs(pos_embed: str) -> None:
    """The package's answers to chapter 11's bug hunt: mask shape, table rows, word width."""
    model = text_cct_2(
        vocab_size=50,
        num_classes=3,
        seq_len=24,
        word_embedding_dim=100,
        pos_embed=pos_embed,
    )
    n_tokens = model.tokenizer.sequence_length(24)
    assert model.pos_embed.shape == (1, n_tokens, 128)  # N rows, not N+1
    assert model.tokenizer.conv_layers[0].in_channels == 100
    ids, mask = _padded_batch([24, 6], 24, 50)
    _, token_mask = model.tokenizer(model.embedding(ids), mask)
    assert token_mask.shape == (2, n_tokens) and token_mask.dtype == torch.bool
    assert model(ids, mask).shape == (2, 3)
