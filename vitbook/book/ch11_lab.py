"""Chapter 11's helpers: a validation split carved out of the training texts, the TF-IDF +
logistic regression baseline with its ``C`` chosen on that split (never on the test set), and
the sentence that reports how the text CCT stands against a baseline, for every outcome of
:func:`vitbook.book.stats.claim_order`.

* :func:`holdout` keeps the test split out of every choice: a stratified, seeded part of the
  training texts becomes the data a choice is scored on.
* :func:`tfidf_baseline` scores each candidate ``C`` on a validation split of the training
  texts, refits the chosen one on all of them and only then reads the test texts once.
* :func:`standing` turns claim_order's outcome and the mean paired difference into words that
  never contradict each other ("level with ..., 1 point below" cannot be assembled).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression

from vitbook.book.stats import MIN_SEEDS
from vitbook.data.text_data import TextClassificationData

__all__ = [
    "ORDERS",
    "TfidfResult",
    "holdout",
    "split_indices",
    "standing",
    "tfidf_baseline",
]

#: The outcomes of :func:`vitbook.book.stats.claim_order`.
ORDERS = ("beats", "trails", "is within the noise of", "is not separable from")


def split_indices(
    labels: Sequence[int], fraction: float = 0.2, seed: int = 0
) -> tuple[list[int], list[int]]:
    """Stratified split of ``range(len(labels))``: about ``fraction`` of each class (at
    least one example of a class with two or more) to the validation part, the rest to the
    fitting part; both sorted and disjoint."""
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must lie in (0, 1), got {fraction}")
    labels_arr = np.asarray(labels)
    rng = np.random.default_rng(seed)
    held: list[int] = []
    for c in np.unique(labels_arr):
        members = rng.permutation(np.flatnonzero(labels_arr == c))
        n = int(round(fraction * len(members)))
        if len(members) >= 2:
            n = min(max(n, 1), len(members) - 1)
        else:
            n = 0
        held.extend(members[:n].tolist())
    held_set = set(held)
    fit = [i for i in range(len(labels_arr)) if i not in held_set]
    return fit, sorted(held)


def holdout(
    data: TextClassificationData, fraction: float = 0.2, seed: int = 0
) -> TextClassificationData:
    """``data``'s training texts split in two: the fitting part as the training split and
    a stratified ``fraction`` as the "test" split, for choices scored without the test
    texts (which this copy does not hold)."""
    fit, held = split_indices(data.train_labels, fraction, seed)
    return TextClassificationData(
        f"{data.name}, validation split",
        list(data.class_names),
        [data.train_texts[i] for i in fit],
        [data.train_labels[i] for i in fit],
        [data.train_texts[i] for i in held],
        [data.train_labels[i] for i in held],
        data.stand_in,
        data.source,
        dict(data.extra),
    )


@dataclass(frozen=True)
class TfidfResult:
    """The baseline's test accuracy, the ``C`` chosen and each candidate's validation
    accuracy."""

    test_acc: float
    c: float
    validation: dict[float, float]


def _fit_tfidf(
    texts: Sequence[str],
    labels: Sequence[int],
    c: float,
    tokenize: Callable[[str], list[str]],
    min_df: int,
):
    vectorizer = TfidfVectorizer(
        tokenizer=tokenize,
        lowercase=False,
        token_pattern=None,
        ngram_range=(1, 2),
        min_df=min_df,
        sublinear_tf=True,
    )
    features = vectorizer.fit_transform(texts)
    classifier = LogisticRegression(C=c, max_iter=5000).fit(features, list(labels))
    return vectorizer, classifier


def _accuracy(vectorizer, classifier, texts, labels) -> float:
    predictions = classifier.predict(vectorizer.transform(texts))
    return float((predictions == np.asarray(labels)).mean())


def tfidf_baseline(
    data: TextClassificationData,
    tokenize: Callable[[str], list[str]],
    *,
    min_df: int = 2,
    cs: Sequence[float] = (0.1, 1.0, 10.0, 100.0),
    fraction: float = 0.2,
    seed: int = 0,
) -> TfidfResult:
    """TF-IDF (words and word pairs, sublinear tf) + logistic regression on ``data``.

    Each ``C`` in ``cs`` is fitted on the training texts less a stratified ``fraction``
    and scored on that held-out part; the best (the smaller ``C`` on a tie: the stronger
    regularisation) is refitted on all the training texts, vocabulary included, and
    scored once on the test texts.
    """
    fit, held = split_indices(data.train_labels, fraction, seed)
    texts, labels = data.train_texts, data.train_labels
    validation = {}
    for c in cs:
        vectorizer, classifier = _fit_tfidf(
            [texts[i] for i in fit], [labels[i] for i in fit], c, tokenize, min_df
        )
        validation[float(c)] = _accuracy(
            vectorizer, classifier, [texts[i] for i in held], [labels[i] for i in held]
        )
    best = max(sorted(validation), key=lambda c: (validation[c], -c))
    vectorizer, classifier = _fit_tfidf(texts, labels, best, tokenize, min_df)
    test_acc = _accuracy(vectorizer, classifier, data.test_texts, data.test_labels)
    return TfidfResult(test_acc, best, validation)


def _where(gap: float, other: str) -> str:
    rounded = round(gap, 1)
    if rounded > 0:
        return f"its mean {rounded:.1f} points above {other}'s"
    if rounded < 0:
        return f"its mean {-rounded:.1f} points below {other}'s"
    return f"its mean within 0.05 points of {other}'s"


def standing(order: str, gap: float, other: str, n: int) -> str:
    """How the model stands against ``other``, in words that fit every outcome.

    ``order`` is :func:`~vitbook.book.stats.claim_order`'s outcome for the model's
    accuracies against ``other``'s, ``gap`` the mean paired difference in points (model
    minus ``other``) and ``n`` the number of seeds. "ahead" and "behind" are said only
    when the paired t-test rejects at 5%, with the sign of ``gap``; otherwise the sentence
    gives the mean difference and says that it is not told apart from the noise, or that
    too few seeds were run to test it.
    """
    if order not in ORDERS:
        raise ValueError(f"unknown outcome {order!r}; expected one of {ORDERS}")
    if order == "beats" and not gap > 0 or order == "trails" and not gap < 0:
        raise ValueError(f"outcome {order!r} contradicts a mean difference of {gap:+g}")
    where = _where(gap, other)
    if order == "beats":
        return (
            f"ahead of {other} ({where}; the paired t-test over {n} seeds rejects "
            "'no difference' at 5%)"
        )
    if order == "trails":
        return (
            f"behind {other} ({where}; the paired t-test over {n} seeds rejects "
            "'no difference' at 5%)"
        )
    if order == "is within the noise of":
        return (
            f"not told apart from {other} ({where}, a difference that the paired "
            f"t-test over {n} seeds does not separate from seed-to-seed variation at 5%)"
        )
    return (
        f"not ranked against {other} ({where}, but {n} seed{'' if n == 1 else 's'} "
        f"{'is' if n == 1 else 'are'} too few for a verdict, which needs at least "
        f"{MIN_SEEDS})"
    )
