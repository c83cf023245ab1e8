"""vitbook.data.text_data: tokenizer, vocabulary, padding masks, datasets and loaders."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vitbook.data import text_data as td


def test_tokenize() -> None:
    assert td.tokenize("Don't PANIC: 42 towels!") == [
        "don",
        "t",
        "panic",
        "42",
        "towels",
    ]
    assert td.tokenize("  ...  ") == []


def test_vocabulary_order_min_freq_and_unknown_words() -> None:
    vocab = td.Vocabulary.build(["b a a", "c a b", "d"], min_freq=2)
    assert vocab.itos == ["<pad>", "<unk>", "a", "b"]  # by count, then alphabetically
    assert (td.PAD_ID, td.UNK_ID) == (0, 1)
    assert vocab["a"] == 2 and vocab["c"] == td.UNK_ID and "c" not in vocab
    assert vocab.lookup(["b", "zebra"]) == [3, td.UNK_ID]
    assert vocab.decode(torch.tensor([3, 2, 0, 0])) == ["b", "a"]
    assert vocab.counts["c"] == 1 and len(vocab) == 4
    assert len(td.Vocabulary.build(["a b c d e"], max_size=4)) == 4
    with pytest.raises(ValueError, match="starts with"):
        td.Vocabulary(["a", "b"])


def test_encode_padding_truncation_and_mask() -> None:
    vocab = td.Vocabulary.build(["the cat sat on the mat"])
    ids, mask = td.encode(
        ["the cat", "the dog sat on the mat again", ""], vocab, max_len=5
    )
    assert (
        ids.shape == mask.shape == (3, 5)
        and ids.dtype == torch.long
        and mask.dtype == torch.bool
    )
    the, cat, sat, on = vocab["the"], vocab["cat"], vocab["sat"], vocab["on"]
    assert ids[0].tolist() == [the, cat, 0, 0, 0]
    assert ids[1].tolist() == [
        the,
        td.UNK_ID,
        sat,
        on,
        the,
    ]  # "dog" unknown; truncated to 5
    assert ids[2].tolist() == [td.UNK_ID, 0, 0, 0, 0]  # an empty text keeps one token
    assert mask.tolist() == [
        [True, True, False, False, False],
        [True] * 5,
        [True] + [False] * 4,
    ]
    assert torch.equal(mask, ids != td.PAD_ID)
    short, short_mask = td.encode(
        ["the cat", "mat"], vocab, max_len=5, pad_to_longest=True
    )
    assert short.shape == (2, 2) and short_mask.tolist() == [
        [True, True],
        [True, False],
    ]
    single, _ = td.encode("the mat", vocab, max_len=3)
    assert single.shape == (1, 3)


def test_dataset_collate_and_loaders(docstring_corpus) -> None:
    vocab = td.Vocabulary.build(docstring_corpus.train_texts)
    ds = td.TextDataset(["a b c", "a"], [1, 0], vocab, max_len=8)
    ids, labels = td.collate_padded([ds[0], ds[1]])
    assert ids.shape == (2, 3) and labels.tolist() == [1, 0] and ids[1, 1:].eq(0).all()
    train_dl, test_dl = td.text_dataloaders(
        docstring_corpus, vocab, max_len=16, batch_size=32
    )
    X, y = next(iter(train_dl))
    assert X.ndim == 2 and X.shape[0] == 32 and X.shape[1] <= 16 and y.shape == (32,)
    assert (X != 0).sum(1).min() >= 1 and len(test_dl.dataset) == len(
        docstring_corpus.test_texts
    )
    first = [
        next(iter(td.text_dataloaders(docstring_corpus, vocab, 16, 8, seed=3)[0]))[1]
        for _ in "ab"
    ]
    assert torch.equal(*first)  # seeded shuffling


def test_with_padding_mask_passes_the_right_mask() -> None:
    class Spy(nn.Module):
        def forward(self, ids, mask, scale=1):
            self.mask = mask
            return ids.float() * scale

    spy = Spy()
    model = td.WithPaddingMask(spy)
    ids = torch.tensor([[5, 6, 0], [7, 0, 0]])
    assert torch.equal(model(ids, scale=2), ids.float() * 2)
    assert spy.mask.tolist() == [[True, True, False], [True, False, False]]


def test_text_cct_through_the_wrapper_ignores_padding() -> None:
    from going_modular.models.text_cct import text_cct_2

    torch.manual_seed(0)
    cct = text_cct_2(
        vocab_size=30, num_classes=3, kernel_size=2, seq_len=16, padding_idx=0
    )
    model = td.WithPaddingMask(cct).eval()
    ids = torch.tensor([[4, 5, 6, 7, 0, 0], [8, 9, 0, 0, 0, 0]])
    longer = torch.cat([ids, torch.zeros(2, 5, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model(longer), model(ids))


def test_subset_is_stratified_and_seeded(docstring_corpus) -> None:
    small = docstring_corpus.subset(n_train=400, n_test=100, seed=1)
    assert (
        abs(len(small.train_texts) - 400) <= 4 and abs(len(small.test_texts) - 100) <= 4
    )
    assert set(small.train_labels) == {0, 1, 2, 3}
    assert small.train_texts == docstring_corpus.subset(400, 100, seed=1).train_texts
    assert set(small.train_texts) <= set(docstring_corpus.train_texts)
