"""Where the texts come from: AG News and TREC when online, the docstring stand-in offline,
and GloVe's pretrained word vectors.

* :func:`get_ag_news`, :func:`get_trec`: the real datasets (downloaded with
  :func:`~vitbook.data.download.download_data`) as
  :class:`~vitbook.data.text_data.TextClassificationData`; offline, or when the download
  fails and ``fallback`` is True, the stand-in
  :func:`~vitbook.data.standins.make_docstring_corpus` (docstrings of installed libraries,
  classified by library), announced in one ``[STAND-IN]`` line.
* :func:`get_glove`: pretrained GloVe vectors for a vocabulary (online only).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch

from vitbook.data.download import DownloadError, download_data
from vitbook.data.paths import data_dir
from vitbook.data.standins import (
    STAND_IN_LIBRARIES,
    make_docstring_corpus,
    real_or_stand_in,
)
from vitbook.data.text_data import PAD_ID, TextClassificationData, Vocabulary

__all__ = [
    "AG_NEWS_CLASSES",
    "AG_NEWS_URLS",
    "GLOVE_URL",
    "TREC_CLASSES",
    "TREC_URLS",
    "get_ag_news",
    "get_glove",
    "get_trec",
    "read_ag_news_jsonl",
    "read_trec_labels",
    "read_word_vectors",
]


# AG News: the Hugging Face hub copy (JSON lines, fields "text" and "label") of Zhang et al.'s
# CSV files (NIPS 2015); labels 0-3 = World, Sports, Business, Sci/Tech.
AG_NEWS_URLS = {
    "train": "https://huggingface.co/datasets/SetFit/ag_news/resolve/main/train.jsonl",
    "test": "https://huggingface.co/datasets/SetFit/ag_news/resolve/main/test.jsonl",
}
AG_NEWS_CLASSES = ["World", "Sports", "Business", "Sci/Tech"]

# TREC question classification (Li and Roth, COLING 2002): the original files of
# cogcomp.seas.upenn.edu/Data/QA/QC/, as mirrored on the Hugging Face hub. Lines read
# "COARSE:fine question ...", in Latin-1.
TREC_URLS = {
    "train": "https://huggingface.co/datasets/SetFit/TREC-QC/resolve/main/train_5500.label",
    "test": "https://huggingface.co/datasets/SetFit/TREC-QC/resolve/main/TREC_10.label",
}
TREC_CLASSES = ["ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"]


def _read_examples(
    path: str | Path, encoding: str, parse: Callable[[str], tuple[str, int]]
) -> tuple[list[str], list[int]]:
    """Texts and labels of the non-blank lines of ``path``, each read by ``parse``, whose
    ValueError is raised again with the file's name and the line's number."""
    texts, labels = [], []
    with open(path, encoding=encoding) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                text, label = parse(line)
            except ValueError as e:
                raise ValueError(f"{Path(path).name} line {number}: {e}") from e
            texts.append(text)
            labels.append(label)
    return texts, labels


def _ag_news_record(line: str) -> tuple[str, int]:
    try:
        record = json.loads(line)
        text, label = str(record["text"]), int(record["label"])
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError("not an AG News record") from e
    if not 0 <= label < len(AG_NEWS_CLASSES):
        raise ValueError(f"label {label} out of range")
    return text, label


def _trec_question(line: str) -> tuple[str, int]:
    tag, _, question = line.strip().partition(" ")
    coarse = tag.split(":")[0]
    if coarse not in TREC_CLASSES or not question:
        raise ValueError("not a TREC line")
    return question, TREC_CLASSES.index(coarse)


def read_ag_news_jsonl(path: str | Path) -> tuple[list[str], list[int]]:
    """Texts and labels of an AG News JSON-lines file (one ``{"text", "label"}`` per line)."""
    return _read_examples(path, "utf-8", _ag_news_record)


def read_trec_labels(path: str | Path) -> tuple[list[str], list[int]]:
    """Questions and coarse labels of a TREC ``.label`` file (``"LOC:city Where is ...?"``)."""
    return _read_examples(path, "latin-1", _trec_question)


#: The real datasets: folder name, files, reader, classes and source, by name.
_SOURCES = {
    "AG News": (
        "ag_news",
        AG_NEWS_URLS,
        read_ag_news_jsonl,
        AG_NEWS_CLASSES,
        "Zhang, Zhao and LeCun (2015), via the Hugging Face hub (SetFit/ag_news)",
    ),
    "TREC": (
        "trec",
        TREC_URLS,
        read_trec_labels,
        TREC_CLASSES,
        "Li and Roth (2002), via the Hugging Face hub (SetFit/TREC-QC)",
    ),
}


def _download(name: str, root: Path) -> TextClassificationData:
    """Download both splits of the real dataset ``name`` into ``root`` and read them."""
    folder, urls, reader, classes, source = _SOURCES[name]
    splits = {}
    for split, url in urls.items():
        directory = download_data(url, f"{folder}_{split}", data_dir=root, timeout=60.0)
        path = directory / Path(url).name
        try:
            splits[split] = reader(path)
        except (OSError, ValueError) as e:
            raise DownloadError(
                f"{path.name} was downloaded but could not be read ({e}). Delete the folder "
                f"{path.parent.name} in the data folder and retry."
            ) from e
    return TextClassificationData(
        folder, list(classes), *splits["train"], *splits["test"], source=source
    )


def _real_or_docstrings(
    name: str, fallback: bool, root: str | Path | None
) -> TextClassificationData:
    """The real dataset ``name``, or its stand-in: the docstring corpus of as many
    libraries as it has classes (:func:`~vitbook.data.standins.real_or_stand_in`)."""
    root = Path(root) if root is not None else data_dir()
    libraries = STAND_IN_LIBRARIES[: len(_SOURCES[name][3])]
    return real_or_stand_in(
        name,
        lambda: _download(name, root),
        lambda: make_docstring_corpus(libraries),
        f"a {len(libraries)}-class corpus of docstrings from installed libraries "
        f"({', '.join(libraries)}), classified by library",
        fallback=fallback,
    )


def get_ag_news(
    *, fallback: bool = True, root: str | Path | None = None
) -> TextClassificationData:
    """AG News (120,000 train / 7,600 test news headlines and leads, 4 balanced topics).

    Offline, or when the download fails and ``fallback`` is True, the 4-class docstring
    stand-in (:func:`~vitbook.data.standins.make_docstring_corpus`); with
    ``fallback=False`` a :class:`~vitbook.data.download.DownloadError` instead.
    """
    return _real_or_docstrings("AG News", fallback, root)


def get_trec(
    *, fallback: bool = True, root: str | Path | None = None
) -> TextClassificationData:
    """TREC question classification, 6 coarse classes (5,452 train / 500 test questions).

    Offline, or when the download fails and ``fallback`` is True, the 6-class docstring
    stand-in; with ``fallback=False`` a :class:`~vitbook.data.download.DownloadError`.
    """
    return _real_or_docstrings("TREC", fallback, root)


# Pretrained word vectors -----------------------------------------------------------------------

GLOVE_URL = (
    "https://nlp.stanford.edu/data/glove.6B.zip"  # Pennington et al. (2014), 822 MB
)


def read_word_vectors(
    path: str | Path, vocab: Vocabulary, dim: int, seed: int = 0
) -> tuple[torch.Tensor, int]:
    """A (len(vocab), dim) embedding matrix from a GloVe-format text file (``word v1 ... vd``
    per line) and the number of vocabulary words found in it.

    Rows of words missing from the file are drawn from a normal distribution with the found
    vectors' standard deviation (seeded); the ``<pad>`` row is zero.
    """
    weights = torch.zeros(len(vocab), dim)
    found = torch.zeros(len(vocab), dtype=torch.bool)
    with open(path, encoding="utf-8") as f:
        for line in f:
            word, _, rest = line.rstrip().partition(" ")
            index = vocab.stoi.get(word)
            if index is None or index < 2:
                continue
            values = rest.split(" ")
            if len(values) != dim:
                raise ValueError(
                    f"{Path(path).name}: vector of {word!r} has {len(values)} != {dim} values"
                )
            weights[index] = torch.tensor([float(v) for v in values])
            found[index] = True
    std = weights[found].std().item() if found.sum() > 1 else 1.0
    generator = torch.Generator().manual_seed(seed)
    missing = ~found
    missing[PAD_ID] = False
    weights[missing] = torch.randn(int(missing.sum()), dim, generator=generator) * std
    return weights, int(found.sum())


def get_glove(
    vocab: Vocabulary, dim: int = 300, *, root: str | Path | None = None, seed: int = 0
) -> tuple[torch.Tensor, float]:
    """GloVe 6B vectors (``dim`` 50, 100, 200 or 300) for ``vocab``: the (len(vocab), dim)
    matrix and the fraction of the vocabulary's words that GloVe knows.

    Downloads and unpacks the 822 MB archive once into the data folder. There is no offline
    stand-in for pretrained vectors: offline this raises
    :class:`~vitbook.data.download.DownloadError`.
    """
    if dim not in (50, 100, 200, 300):
        raise ValueError(
            f"GloVe 6B comes in 50, 100, 200 or 300 dimensions, not {dim}."
        )
    root = Path(root) if root is not None else data_dir()
    folder = download_data(GLOVE_URL, "glove_6B", data_dir=root, timeout=60.0)
    weights, found = read_word_vectors(
        folder / f"glove.6B.{dim}d.txt", vocab, dim, seed
    )
    return weights, found / max(1, len(vocab) - 2)
