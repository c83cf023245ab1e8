"""going_modular.text_data: tokenizer, vocabulary, padding masks, loaders, getters, stand-in."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from going_modular import text_data as td
from going_modular.download import DownloadError


@pytest.fixture(scope="module")
def corpus() -> td.TextClassificationData:
    return td.make_docstring_corpus()


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


def test_dataset_collate_and_loaders(corpus) -> None:
    vocab = td.Vocabulary.build(corpus.train_texts)
    ds = td.TextDataset(["a b c", "a"], [1, 0], vocab, max_len=8)
    ids, labels = td.collate_padded([ds[0], ds[1]])
    assert ids.shape == (2, 3) and labels.tolist() == [1, 0] and ids[1, 1:].eq(0).all()
    train_dl, test_dl = td.text_dataloaders(corpus, vocab, max_len=16, batch_size=32)
    X, y = next(iter(train_dl))
    assert X.ndim == 2 and X.shape[0] == 32 and X.shape[1] <= 16 and y.shape == (32,)
    assert (X != 0).sum(1).min() >= 1 and len(test_dl.dataset) == len(corpus.test_texts)
    first = [
        next(iter(td.text_dataloaders(corpus, vocab, 16, 8, seed=3)[0]))[1]
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
    from going_modular.models.cct import text_cct_2

    torch.manual_seed(0)
    cct = text_cct_2(
        vocab_size=30, num_classes=3, kernel_size=2, seq_len=16, padding_idx=0
    )
    model = td.WithPaddingMask(cct).eval()
    ids = torch.tensor([[4, 5, 6, 7, 0, 0], [8, 9, 0, 0, 0, 0]])
    longer = torch.cat([ids, torch.zeros(2, 5, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model(longer), model(ids))


def test_stand_in_is_real_deterministic_and_disjoint(corpus) -> None:
    assert corpus.stand_in and corpus.class_names == [
        "numpy",
        "torch",
        "matplotlib",
        "scikit-learn",
    ]
    assert len(corpus.train_texts) > 1500 and len(corpus.test_texts) > 300
    assert set(corpus.train_labels) == set(corpus.test_labels) == {0, 1, 2, 3}
    assert not set(corpus.extra["train_names"]) & set(corpus.extra["test_names"])
    assert not set(corpus.train_texts) & set(corpus.test_texts)
    assert all(len(t.split()) >= 3 for t in corpus.train_texts)  # prose, not fragments
    joined = " ".join(corpus.train_texts).lower()
    assert not any(
        f" {name} " in f" {joined} " for name in ("numpy", "torch", "sklearn")
    )
    td.library_docstrings.cache_clear()
    again = td.make_docstring_corpus()
    assert (
        again.train_texts == corpus.train_texts
        and again.test_labels == corpus.test_labels
    )


def test_subset_is_stratified_and_seeded(corpus) -> None:
    small = corpus.subset(n_train=400, n_test=100, seed=1)
    assert (
        abs(len(small.train_texts) - 400) <= 4 and abs(len(small.test_texts) - 100) <= 4
    )
    assert set(small.train_labels) == {0, 1, 2, 3}
    assert small.train_texts == corpus.subset(400, 100, seed=1).train_texts
    assert set(small.train_texts) <= set(corpus.train_texts)


def test_getters_fall_back_offline(capsys) -> None:
    data = td.get_ag_news()
    out = capsys.readouterr().out
    assert data.stand_in and len(data.class_names) == 4
    assert out.count("[STAND-IN]") == 1 and "AG News" in out
    trec = td.get_trec()
    assert trec.stand_in and len(trec.class_names) == 6
    assert capsys.readouterr().out.count("[STAND-IN]") == 1


@pytest.mark.parametrize("getter", [td.get_ag_news, td.get_trec])
def test_no_fallback_offline_raises(getter) -> None:
    with pytest.raises(DownloadError, match="BOOK_OFFLINE=1"):
        getter(fallback=False)


def test_failed_download_falls_back_or_raises(monkeypatch, capsys) -> None:
    monkeypatch.setenv("BOOK_OFFLINE", "0")

    def refuse(source, destination, **kwargs):
        raise DownloadError(f"Could not download {source}: network error (test)")

    monkeypatch.setattr(td, "download_data", refuse)
    data = td.get_trec()
    out = capsys.readouterr().out
    assert (
        data.stand_in
        and "[INFO] Could not get TREC" in out
        and out.count("[STAND-IN]") == 1
    )
    with pytest.raises(DownloadError, match="network error"):
        td.get_ag_news(fallback=False)


def test_readers_parse_the_real_formats(tmp_path, monkeypatch) -> None:
    trec = tmp_path / "TREC_10.label"
    trec.write_bytes(
        b"LOC:city Where is the sister\xf0city ?\nNUM:date When was it built ?\n"
    )
    texts, labels = td.read_trec_labels(trec)
    assert labels == [td.TREC_CLASSES.index("LOC"), td.TREC_CLASSES.index("NUM")]
    assert texts[1] == "When was it built ?"
    ag = tmp_path / "train.jsonl"
    rows = [
        {"text": "Stocks rise", "label": 2, "label_text": "Business"},
        {"text": "Win", "label": 1},
    ]
    ag.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert td.read_ag_news_jsonl(ag) == (["Stocks rise", "Win"], [2, 1])
    ag.write_text('{"title": "no text field"}\n')
    with pytest.raises(ValueError, match="not an AG News record"):
        td.read_ag_news_jsonl(ag)

    # Online with already-downloaded files: the getter reads them (download_data skips).
    monkeypatch.setenv("BOOK_OFFLINE", "0")
    for split in ("train", "test"):
        folder = tmp_path / "data" / f"ag_news_{split}"
        folder.mkdir(parents=True)
        (folder / f"{split}.jsonl").write_text(json.dumps(rows[0]) + "\n")
    data = td.get_ag_news(root=tmp_path / "data")
    assert (
        not data.stand_in
        and data.train_texts == ["Stocks rise"]
        and data.class_names[2] == "Business"
    )


def test_word_vectors(tmp_path) -> None:
    vocab = td.Vocabulary.build(["cat dog emu"])
    path = tmp_path / "vectors.txt"
    path.write_text("cat 1.0 2.0\nzebra 9 9\ndog -1 0.5\n")
    weights, found = td.read_word_vectors(path, vocab, dim=2)
    assert weights.shape == (len(vocab), 2) and found == 2
    assert (
        weights[vocab["cat"]].tolist() == [1.0, 2.0] and weights[td.PAD_ID].eq(0).all()
    )
    assert weights[vocab["emu"]].abs().sum() > 0  # missing word: random, not zero
    with pytest.raises(DownloadError, match="BOOK_OFFLINE"):
        td.get_glove(vocab, dim=50)
    with pytest.raises(ValueError, match="50, 100, 200 or 300"):
        td.get_glove(vocab, dim=64)
