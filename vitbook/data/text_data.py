"""Text classification data as tensors: a word tokenizer, a vocabulary, padding with masks,
and DataLoaders (the datasets themselves come from :mod:`vitbook.data.text_datasets`).

The pieces, in the order a chapter uses them:

* :func:`tokenize`: lower-case, then split into runs of letters and digits.
* :class:`Vocabulary`: built from the *training* texts only; id 0 is ``<pad>``, id 1 ``<unk>``.
* :func:`encode`: texts -> ``(ids, mask)``, right-padded with ``<pad>``; ``mask`` is True for
  real words. Every text keeps at least one token (an empty text becomes ``<unk>``), so a mask
  row is never all False.
* :class:`TextDataset` and :func:`collate_padded`: variable-length id tensors, padded per batch
  to the batch's longest text. A batch is ``(ids, labels)``: a single tensor, as the book's
  engine expects (it calls ``model(X)``).
* :class:`WithPaddingMask`: the thin wrapper that lets a model with the signature
  ``model(ids, mask)`` (such as ``TextCCT``) train with that engine. ``<pad>`` never comes out of
  the tokenizer, so ``ids != pad_id`` *is* the padding mask; the wrapper derives it and passes
  it on. That is the whole design: no packed tensors, no special batch type.
* :class:`TextClassificationData`: the texts and labels of a train and a test split.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from going_modular.data.checks import check_sizes
from going_modular.data.loaders import train_test_loaders

__all__ = [
    "PAD",
    "PAD_ID",
    "UNK",
    "UNK_ID",
    "TextClassificationData",
    "TextDataset",
    "Vocabulary",
    "WithPaddingMask",
    "collate_padded",
    "encode",
    "pad_ids",
    "text_dataloaders",
    "text_to_ids",
    "tokenize",
]

PAD, UNK = "<pad>", "<unk>"
PAD_ID, UNK_ID = 0, 1
_WORD = re.compile(r"[a-z0-9]+")


# Tokenizer and vocabulary ----------------------------------------------------------------------


def tokenize(text: str) -> list[str]:
    """Lower-case ``text`` and return its words: maximal runs of ``a-z`` and ``0-9``.

    Punctuation and other symbols separate words and are dropped, e.g.
    ``"Don't panic: 42!"`` -> ``["don", "t", "panic", "42"]``.
    """
    return _WORD.findall(text.lower())


class Vocabulary:
    """A word <-> id table. ``itos[0]`` is ``<pad>``, ``itos[1]`` is ``<unk>``, then the words."""

    def __init__(self, itos: Sequence[str]):
        itos = list(itos)
        if itos[:2] != [PAD, UNK]:
            raise ValueError(
                f"A vocabulary starts with {PAD!r}, {UNK!r}; got {itos[:2]}."
            )
        if len(set(itos)) != len(itos):
            raise ValueError("Vocabulary entries must be unique.")
        self.itos = itos
        self.stoi = {word: i for i, word in enumerate(itos)}
        # the word counts of the texts it was built from (see build)
        self.counts: Counter[str] = Counter()

    @classmethod
    def build(
        cls, texts: Iterable[str], min_freq: int = 1, max_size: int | None = None
    ) -> Vocabulary:
        """Count the words of ``texts`` and keep those seen at least ``min_freq`` times.

        Words are ordered by falling count, ties alphabetically, so the same texts always give
        the same ids. ``max_size`` caps the number of entries, ``<pad>`` and ``<unk>`` included.
        """
        check_sizes(min_freq=min_freq)
        counts = Counter(word for text in texts for word in tokenize(text))
        words = sorted(
            (w for w, c in counts.items() if c >= min_freq),
            key=lambda w: (-counts[w], w),
        )
        if max_size is not None:
            words = words[: max(0, max_size - 2)]
        vocab = cls([PAD, UNK, *words])
        vocab.counts = counts
        return vocab

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, word: str) -> bool:
        return word in self.stoi

    def __getitem__(self, word: str) -> int:
        """The id of ``word``; ``UNK_ID`` for a word not in the vocabulary."""
        return self.stoi.get(word, UNK_ID)

    def lookup(self, words: Iterable[str]) -> list[int]:
        """Ids of ``words``, ``UNK_ID`` for unknown ones."""
        return [self.stoi.get(w, UNK_ID) for w in words]

    def decode(self, ids: Iterable[int], skip_pad: bool = True) -> list[str]:
        """Words of ``ids`` (a list or a 1-D tensor), without ``<pad>`` unless ``skip_pad=False``."""
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return [self.itos[i] for i in ids if not (skip_pad and i == PAD_ID)]

    def __repr__(self) -> str:
        return (
            f"Vocabulary({len(self)} entries: {PAD}, {UNK} and {len(self) - 2} words)"
        )


def text_to_ids(text: str, vocab: Vocabulary, max_len: int) -> list[int]:
    """Ids of the first ``max_len`` words of ``text``; ``[UNK_ID]`` if it has no words."""
    check_sizes(max_len=max_len)
    return vocab.lookup(tokenize(text)[:max_len]) or [UNK_ID]


def pad_ids(
    sequences: Sequence[Sequence[int]], length: int | None = None
) -> torch.Tensor:
    """Right-pad id sequences with ``PAD_ID`` into a (B, length) LongTensor (default: longest)."""
    length = max(len(s) for s in sequences) if length is None else length
    ids = torch.full((len(sequences), length), PAD_ID, dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.as_tensor(seq[:length], dtype=torch.long)
    return ids


def encode(
    texts: str | Sequence[str],
    vocab: Vocabulary,
    max_len: int,
    *,
    pad_to_longest: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Texts -> ``(ids, mask)``, both (B, L): word ids right-padded with ``<pad>``, and True
    where there is a real word.

    Texts longer than ``max_len`` words are truncated; L is ``max_len``, or with
    ``pad_to_longest`` the longest (truncated) text of the batch. Unknown words become
    ``<unk>``; an empty text becomes a single ``<unk>``.
    """
    if isinstance(texts, str):
        texts = [texts]
    if len(texts) == 0:
        raise ValueError("encode() needs at least one text.")
    sequences = [text_to_ids(t, vocab, max_len) for t in texts]
    ids = pad_ids(sequences, None if pad_to_longest else max_len)
    return ids, ids != PAD_ID


# Datasets and loaders ----------------------------------------------------------------------------


class TextDataset(Dataset):
    """``(ids, label)`` pairs: ``ids`` a 1-D LongTensor of at most ``max_len`` word ids."""

    def __init__(
        self,
        texts: Sequence[str],
        labels: Sequence[int],
        vocab: Vocabulary,
        max_len: int,
    ):
        if len(texts) != len(labels):
            raise ValueError(f"{len(texts)} texts but {len(labels)} labels.")
        self.texts = list(texts)
        self.labels = [int(y) for y in labels]
        self.max_len = max_len
        self.ids = [torch.tensor(text_to_ids(t, vocab, max_len)) for t in self.texts]

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.ids[index], self.labels[index]


def collate_padded(
    batch: Sequence[tuple[torch.Tensor, int]],
) -> tuple[torch.Tensor, torch.Tensor]:
    """A list of ``(ids, label)`` -> ``(ids (B, L), labels (B,))``, L the batch's longest text."""
    sequences, labels = zip(*batch)
    return pad_ids([s.tolist() for s in sequences]), torch.tensor(
        labels, dtype=torch.long
    )


def text_dataloaders(
    data: TextClassificationData,
    vocab: Vocabulary,
    max_len: int,
    batch_size: int,
    *,
    seed: int = 0,
    num_workers: int = 0,
) -> tuple[DataLoader, DataLoader]:
    """Train (shuffled with a seeded generator) and test DataLoaders of padded id batches."""
    return train_test_loaders(
        TextDataset(data.train_texts, data.train_labels, vocab, max_len),
        TextDataset(data.test_texts, data.test_labels, vocab, max_len),
        batch_size,
        num_workers=num_workers,
        seed=seed,
        collate_fn=collate_padded,
    )


class WithPaddingMask(nn.Module):
    """Wrap a ``model(ids, mask, **kwargs)`` so that it can be called as ``model(ids)``,
    and its ``pool_weights(ids, mask)`` as ``pool_weights(ids)``.

    The mask is ``ids != pad_id``: True for real words. This is exact for ids made by
    :func:`encode` or :func:`collate_padded`, where ``<pad>`` appears only as right padding.
    Keyword arguments pass through.
    """

    def __init__(self, model: nn.Module, pad_id: int = PAD_ID):
        super().__init__()
        self.model = model
        self.pad_id = pad_id

    def forward(self, ids: torch.Tensor, **kwargs: Any) -> Any:
        """``model(ids, ids != pad_id, **kwargs)``."""
        return self.model(ids, ids != self.pad_id, **kwargs)

    def pool_weights(self, ids: torch.Tensor) -> torch.Tensor:
        """``model.pool_weights(ids, ids != pad_id)``: SeqPool's (B, N) weights."""
        return self.model.pool_weights(ids, ids != self.pad_id)


# Texts and labels of a dataset ---------------------------------------------------------------


@dataclass
class TextClassificationData:
    """Texts and integer labels of a train and a test split, with the class names."""

    name: str
    class_names: list[str]
    train_texts: list[str]
    train_labels: list[int]
    test_texts: list[str]
    test_labels: list[int]
    stand_in: bool = False
    source: str = ""
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for split in ("train", "test"):
            texts, labels = (
                getattr(self, f"{split}_texts"),
                getattr(self, f"{split}_labels"),
            )
            if len(texts) != len(labels):
                raise ValueError(
                    f"{split}: {len(texts)} texts but {len(labels)} labels."
                )
            if labels and not 0 <= min(labels) <= max(labels) < len(self.class_names):
                raise ValueError(
                    f"{split}: labels must lie in [0, {len(self.class_names)})."
                )

    def subset(
        self, n_train: int | None = None, n_test: int | None = None, seed: int = 0
    ) -> TextClassificationData:
        """A random (seeded) subset with at most ``n_train`` / ``n_test`` examples, in which
        each class keeps its share (stratified); ``None`` keeps a split whole."""

        def pick(texts: list[str], labels: list[int], n: int | None, salt: int):
            if n is None or n >= len(texts):
                return list(texts), list(labels)
            rng = np.random.default_rng([seed, salt])
            labels_arr = np.asarray(labels)
            keep: list[int] = []
            for c in range(len(self.class_names)):
                members = np.flatnonzero(labels_arr == c)
                share = round(n * len(members) / len(texts))
                keep.extend(rng.permutation(members)[:share].tolist())
            keep.sort()
            return [texts[i] for i in keep], [labels[i] for i in keep]

        train = pick(self.train_texts, self.train_labels, n_train, 0)
        test = pick(self.test_texts, self.test_labels, n_test, 1)
        return TextClassificationData(
            self.name,
            list(self.class_names),
            *train,
            *test,
            self.stand_in,
            self.source,
            dict(self.extra),
        )

    def summary(self) -> str:
        """One line: name, sizes, classes."""
        kind = "stand-in" if self.stand_in else "real"
        return (
            f"{self.name} ({kind}): {len(self.train_texts)} train / {len(self.test_texts)} "
            f"test texts, {len(self.class_names)} classes: {', '.join(self.class_names)}"
        )
