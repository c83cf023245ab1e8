"""Chapter 11's helpers: the validation split, the TF-IDF baseline whose C is chosen on it,
and the verdict sentence for every outcome of claim_order."""

from __future__ import annotations

import pytest

from vitbook.book.ch11_lab import (
    ORDERS,
    holdout,
    split_indices,
    standing,
    tfidf_baseline,
)
from vitbook.data.text_data import TextClassificationData, tokenize


def _data(n_per_class: int = 30) -> TextClassificationData:
    words = {0: "cat dog mouse fur paw", 1: "stock bank market price trade"}
    texts, labels = [], []
    for c, vocab in words.items():
        vocab = vocab.split()
        for i in range(n_per_class):
            texts.append(f"{vocab[i % 5]} {vocab[(i + 2) % 5]} the {i}")
            labels.append(c)
    tests = ["cat paw", "market price", "fur the", "bank trade"]
    return TextClassificationData(
        "toy", ["animals", "money"], texts, labels, tests, [0, 1, 0, 1]
    )


def test_split_is_stratified_disjoint_and_seeded():
    labels = [0] * 50 + [1] * 10 + [2] * 2
    fit, held = split_indices(labels, 0.2, seed=3)
    assert sorted(fit + held) == list(range(len(labels)))
    assert not set(fit) & set(held)
    assert [sum(labels[i] == c for i in held) for c in range(3)] == [10, 2, 1]
    assert split_indices(labels, 0.2, seed=3) == (fit, held)
    assert split_indices(labels, 0.2, seed=4) != (fit, held)


def test_holdout_never_holds_the_test_texts():
    data = _data()
    val = holdout(data, 0.25)
    assert not set(val.test_texts) & set(data.test_texts)
    assert sorted(val.train_texts + val.test_texts) == sorted(data.train_texts)
    assert len(val.test_texts) == 16 and val.class_names == data.class_names


def test_tfidf_chooses_c_on_validation_not_on_test(monkeypatch):
    data = _data()
    result = tfidf_baseline(data, tokenize, min_df=1, cs=(0.01, 1.0, 100.0))
    assert set(result.validation) == {0.01, 1.0, 100.0}
    assert result.validation[result.c] == max(result.validation.values())
    assert result.test_acc == 1.0
    # Scrambling the test labels changes the test accuracy but not the choice of C.
    scrambled = TextClassificationData(
        "toy", data.class_names, data.train_texts, data.train_labels,
        data.test_texts, [1, 0, 1, 0],
    )  # fmt: skip
    again = tfidf_baseline(scrambled, tokenize, min_df=1, cs=(0.01, 1.0, 100.0))
    assert again.c == result.c and again.validation == result.validation
    assert again.test_acc == 0.0


def test_a_tie_keeps_the_stronger_regularisation():
    data = _data()
    result = tfidf_baseline(data, tokenize, min_df=1, cs=(10.0, 100.0, 1000.0))
    assert all(v == 1.0 for v in result.validation.values())
    assert result.c == 10.0


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("gap", [2.34, 0.3, 0.0, -0.02, -0.4, -3.13])
def test_every_assembled_sentence_reads_right(order, gap):
    if order == "beats" and gap <= 0 or order == "trails" and gap >= 0:
        with pytest.raises(ValueError, match="contradicts"):
            standing(order, gap, "TF-IDF", 5)
        return
    n = 3 if order == "is not separable from" else 5
    words = standing(order, gap, "TF-IDF", n)
    # A ranking word only with a significant test, and always with the right sign.
    assert words.startswith("ahead of") == (order == "beats")
    assert words.startswith("behind") == (order == "trails")
    assert ("level" not in words) and ("within the noise" not in words)
    if order == "is within the noise of":
        assert words.startswith("not told apart from TF-IDF")
    if order == "is not separable from":
        assert words.startswith("not ranked against TF-IDF")
        assert "3 seeds are too few" in words and "at least 5" in words
    # The mean's side is the sign of the gap, rounded as printed.
    if round(gap, 1) > 0:
        assert f"{round(gap, 1):.1f} points above TF-IDF's" in words
    elif round(gap, 1) < 0:
        assert f"{-round(gap, 1):.1f} points below TF-IDF's" in words
    else:
        assert "within 0.05 points of TF-IDF's" in words
        assert "above" not in words and "below" not in words


def test_one_seed_is_singular_and_unknown_outcomes_fail():
    assert "1 seed is too few" in standing("is not separable from", -1.0, "TF-IDF", 1)
    with pytest.raises(ValueError, match="unknown outcome"):
        standing("is level with", 0.0, "TF-IDF", 5)
