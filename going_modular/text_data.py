"""Text classification data: a word tokenizer, a vocabulary, padding with masks, DataLoaders,
AG News and TREC when online, and an honest offline stand-in made from real English text.

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
* :func:`get_ag_news`, :func:`get_trec`: the real datasets (downloaded with
  :func:`~going_modular.download.download_data`); offline, or when the download fails and
  ``fallback`` is True, the stand-in :func:`make_docstring_corpus`, announced in one
  ``[STAND-IN]`` line.
* :func:`get_glove`: pretrained GloVe vectors for a vocabulary (online only).

The stand-in classifies the first paragraph of the public docstrings of installed libraries
(numpy, PyTorch, matplotlib, scikit-learn; for TREC's six classes also SciPy and scikit-image)
by the library they come from: real, human-written English, a few to a few dozen words long,
like TREC's questions and AG News' headlines. The library names themselves are replaced by the
neutral word ``LIB``, texts that occur more than once are dropped, and train and test are split
by a hash of each function's qualified name, so the split is deterministic and disjoint.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import pkgutil
import re
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from .download import DownloadError, download_data
from .paths import data_dir
from .settings import is_offline

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
        self.counts: Counter[str] = (
            Counter()
        )  # word counts of the texts it was built from

    @classmethod
    def build(
        cls, texts: Iterable[str], min_freq: int = 1, max_size: int | None = None
    ) -> Vocabulary:
        """Count the words of ``texts`` and keep those seen at least ``min_freq`` times.

        Words are ordered by falling count, ties alphabetically, so the same texts always give
        the same ids. ``max_size`` caps the number of entries, ``<pad>`` and ``<unk>`` included.
        """
        if min_freq < 1:
            raise ValueError(f"min_freq must be at least 1, got {min_freq}.")
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
    if max_len < 1:
        raise ValueError(f"max_len must be at least 1, got {max_len}.")
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
    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size}.")
    train = TextDataset(data.train_texts, data.train_labels, vocab, max_len)
    test = TextDataset(data.test_texts, data.test_labels, vocab, max_len)
    generator = torch.Generator().manual_seed(seed)
    common = dict(
        batch_size=batch_size, collate_fn=collate_padded, num_workers=num_workers
    )
    return (
        DataLoader(train, shuffle=True, generator=generator, **common),
        DataLoader(test, shuffle=False, **common),
    )


class WithPaddingMask(nn.Module):
    """Wrap a ``model(ids, mask, **kwargs)`` so that it can be called as ``model(ids)``.

    The mask is ``ids != pad_id``: True for real words. This is exact for ids made by
    :func:`encode` or :func:`collate_padded`, where ``<pad>`` appears only as right padding.
    Keyword arguments (e.g. ``return_pool_weights=True``) pass through.
    """

    def __init__(self, model: nn.Module, pad_id: int = PAD_ID):
        super().__init__()
        self.model = model
        self.pad_id = pad_id

    def forward(self, ids: torch.Tensor, **kwargs):
        return self.model(ids, ids != self.pad_id, **kwargs)


# The data ----------------------------------------------------------------------------------------


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


def _announce_stand_in(real: str, stand_in: str) -> None:
    print(f"[STAND-IN] {real} is not available offline: using {stand_in} instead.")


def _real_or_stand_in(
    name: str, load_real, stand_in_classes: int, fallback: bool, root
):
    root = Path(root) if root is not None else data_dir()
    if not is_offline():
        try:
            return load_real(root)
        except DownloadError as error:
            if not fallback:
                raise
            print(f"[INFO] Could not get {name}: {error}")
    elif not fallback:
        raise DownloadError(
            f"BOOK_OFFLINE=1 and fallback=False: {name} cannot be fetched. "
            "Unset BOOK_OFFLINE or allow the stand-in."
        )
    libraries = STAND_IN_LIBRARIES[:stand_in_classes]
    _announce_stand_in(
        name,
        f"a {stand_in_classes}-class corpus of docstrings from installed libraries "
        f"({', '.join(libraries)}), classified by library",
    )
    return make_docstring_corpus(libraries)


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
TREC_CLASS_MEANINGS = {
    "ABBR": "abbreviation",
    "DESC": "description",
    "ENTY": "entity",
    "HUM": "human",
    "LOC": "location",
    "NUM": "numeric value",
}


def _download_file(url: str, folder: str, root: Path) -> Path:
    directory = download_data(url, folder, data_dir=root, timeout=60.0)
    return directory / Path(url).name


def read_ag_news_jsonl(path: str | Path) -> tuple[list[str], list[int]]:
    """Texts and labels of an AG News JSON-lines file (one ``{"text", "label"}`` per line)."""
    texts, labels = [], []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                text, label = str(record["text"]), int(record["label"])
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(
                    f"{Path(path).name} line {number}: not an AG News record"
                ) from e
            if not 0 <= label < len(AG_NEWS_CLASSES):
                raise ValueError(
                    f"{Path(path).name} line {number}: label {label} out of range"
                )
            texts.append(text)
            labels.append(label)
    return texts, labels


def read_trec_labels(path: str | Path) -> tuple[list[str], list[int]]:
    """Questions and coarse labels of a TREC ``.label`` file (``"LOC:city Where is ...?"``)."""
    texts, labels = [], []
    with open(path, encoding="latin-1") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            tag, _, question = line.strip().partition(" ")
            coarse = tag.split(":")[0]
            if coarse not in TREC_CLASSES or not question:
                raise ValueError(f"{Path(path).name} line {number}: not a TREC line")
            texts.append(question)
            labels.append(TREC_CLASSES.index(coarse))
    return texts, labels


def _load(name: str, urls: dict, reader, classes: list[str], root: Path, source: str):
    splits = {}
    for split, url in urls.items():
        path = _download_file(url, f"{name}_{split}", root)
        try:
            splits[split] = reader(path)
        except (OSError, ValueError) as e:
            raise DownloadError(
                f"{path.name} was downloaded but could not be read ({e}). Delete the folder "
                f"{path.parent.name} in the data folder and retry."
            ) from e
    return TextClassificationData(
        name,
        list(classes),
        *splits["train"],
        *splits["test"],
        stand_in=False,
        source=source,
    )


def get_ag_news(
    *, fallback: bool = True, root: str | Path | None = None
) -> TextClassificationData:
    """AG News (120,000 train / 7,600 test news headlines and leads, 4 balanced topics).

    Offline, or when the download fails and ``fallback`` is True, the 4-class docstring
    stand-in (:func:`make_docstring_corpus`); with ``fallback=False`` a
    :class:`~going_modular.download.DownloadError` instead.
    """

    def load(root: Path) -> TextClassificationData:
        return _load(
            "ag_news",
            AG_NEWS_URLS,
            read_ag_news_jsonl,
            AG_NEWS_CLASSES,
            root,
            "Zhang, Zhao and LeCun (2015), via the Hugging Face hub (SetFit/ag_news)",
        )

    return _real_or_stand_in("AG News", load, 4, fallback, root)


def get_trec(
    *, fallback: bool = True, root: str | Path | None = None
) -> TextClassificationData:
    """TREC question classification, 6 coarse classes (5,452 train / 500 test questions).

    Offline, or when the download fails and ``fallback`` is True, the 6-class docstring
    stand-in; with ``fallback=False`` a :class:`~going_modular.download.DownloadError`.
    """

    def load(root: Path) -> TextClassificationData:
        return _load(
            "trec",
            TREC_URLS,
            read_trec_labels,
            TREC_CLASSES,
            root,
            "Li and Roth (2002), via the Hugging Face hub (SetFit/TREC-QC)",
        )

    return _real_or_stand_in("TREC", load, 6, fallback, root)


# The stand-in: docstrings classified by library ----------------------------------------------

STAND_IN_LIBRARIES = (
    "numpy",
    "torch",
    "matplotlib",
    "scikit-learn",
    "scipy",
    "scikit-image",
)
_MODULES = {
    "numpy": ("numpy", "numpy.linalg", "numpy.fft", "numpy.random", "numpy.ma", "numpy.polynomial"),
    "torch": (
        "torch", "torch.nn", "torch.nn.functional", "torch.linalg", "torch.fft", "torch.optim",
        "torch.distributions", "torch.utils.data", "torch.autograd", "torch.special",
        "torch.nn.init", "torch.nn.utils",
    ),
    "matplotlib": (
        "matplotlib.pyplot", "matplotlib.axes", "matplotlib.figure", "matplotlib.colors",
        "matplotlib.patches", "matplotlib.lines", "matplotlib.text", "matplotlib.ticker",
        "matplotlib.cm", "matplotlib.collections", "matplotlib.transforms", "matplotlib.image",
        "matplotlib.legend", "matplotlib.axis", "matplotlib.artist", "matplotlib.dates",
    ),
    "scikit-learn": (
        "sklearn.linear_model", "sklearn.ensemble", "sklearn.preprocessing", "sklearn.metrics",
        "sklearn.cluster", "sklearn.decomposition", "sklearn.model_selection", "sklearn.svm",
        "sklearn.tree", "sklearn.neighbors", "sklearn.feature_extraction.text",
        "sklearn.pipeline", "sklearn.impute", "sklearn.manifold", "sklearn.naive_bayes",
        "sklearn.mixture", "sklearn.covariance", "sklearn.feature_selection",
        "sklearn.gaussian_process", "sklearn.neural_network", "sklearn.datasets",
        "sklearn.cross_decomposition", "sklearn.calibration", "sklearn.inspection",
        "sklearn.compose", "sklearn.discriminant_analysis", "sklearn.random_projection",
        "sklearn.multiclass", "sklearn.kernel_ridge",
    ),
    "scipy": (
        "scipy.stats", "scipy.optimize", "scipy.signal", "scipy.linalg", "scipy.sparse",
        "scipy.integrate", "scipy.interpolate", "scipy.special", "scipy.spatial",
        "scipy.ndimage", "scipy.fft", "scipy.cluster.hierarchy", "scipy.io",
        "scipy.sparse.linalg", "scipy.sparse.csgraph",
    ),
    "scikit-image": ("skimage",),  # expanded to its public subpackages
}  # fmt: skip
# Names of the libraries (and their usual aliases), replaced by the neutral word "LIB" in the
# texts: the model must recognise a library from how its documentation talks, not its name.
_LIBRARY_NAMES = re.compile(
    r"\b(numpy|np|torch|pytorch|scikit-learn|sklearn|matplotlib|mpl|pyplot|plt|scipy|"
    r"scikit-image|skimage|scikit)\b",
    re.IGNORECASE,
)
_SIGNATURE = re.compile(r"^[\w.]+\(.*\)")
_ROLE = re.compile(r":[\w:]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")


def _modules(library: str) -> list[str]:
    names = list(_MODULES[library])
    if library == "scikit-image":
        import skimage

        names = sorted(
            f"skimage.{m.name}"
            for m in pkgutil.iter_modules(skimage.__path__)
            if not m.name.startswith("_") and m.name not in {"conftest", "future"}
        )
    return names


def first_paragraph(doc: str) -> str | None:
    """The first paragraph of a docstring that reads as prose, or None.

    Skipped: call signatures (``add(x1, x2, /, ...)``), reStructuredText directives
    (``.. note::``), numpydoc sections (``Parameters\n----------``), lists, code examples,
    paragraphs introducing a literal block (``::``), LaTeX, and anything under five words. Sphinx roles (``:class:`~a.B```) are reduced to
    their text.
    """
    for paragraph in re.split(r"\n\s*\n", inspect.cleandoc(doc)):
        text = " ".join(paragraph.split())
        if (
            len(text.split()) < 5
            or _SIGNATURE.match(text)
            or text.startswith(("..", "- ", "* ", ">>>", "|", "+", "="))
            or text.endswith("::")
            or "\\" in text
            or "---" in text
            or sum(c.isalpha() for c in text) < 0.6 * len(text)
        ):
            continue
        return _ROLE.sub(r"\1", text)
    return None


def _public_callables(module_name: str):
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None) or [
        n for n in dir(module) if not n.startswith("_")
    ]
    for name in sorted(set(names)):
        try:
            obj = getattr(module, name)
        except Exception:  # a lazy attribute that fails to load: skip it
            continue
        if inspect.ismodule(obj) or not callable(obj):
            continue
        yield f"{module_name}.{name}", obj
        if inspect.isclass(obj):
            for attr, member in sorted(vars(obj).items()):
                if not attr.startswith("_") and callable(member):
                    yield f"{module_name}.{name}.{attr}", member


@cache
def library_docstrings(library: str) -> tuple[tuple[str, str], ...]:
    """``(qualified name, first paragraph)`` of every public function, class and method of an
    installed library (one of :data:`STAND_IN_LIBRARIES`) that has a prose docstring. A text
    shared by several names (aliases, wrappers) is kept once, under its first name in
    alphabetical order."""
    if library not in _MODULES:
        raise ValueError(
            f"Unknown library {library!r}; choose from {STAND_IN_LIBRARIES}."
        )
    first_name: dict[str, str] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for module_name in _modules(library):
            for qualified, obj in _public_callables(module_name):
                doc = getattr(obj, "__doc__", None)
                if not isinstance(doc, str):
                    continue
                text = first_paragraph(doc)
                if text is not None and qualified < first_name.get(text, "\uffff"):
                    first_name[text] = qualified
    return tuple(sorted((name, text) for text, name in first_name.items()))


def _hash(salt: str, name: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{salt}:{name}".encode()).digest()[:8], "big")


def make_docstring_corpus(
    libraries: Sequence[str] = STAND_IN_LIBRARIES[:4],
    per_class: int = 750,
    test_fraction: float = 0.2,
) -> TextClassificationData:
    """The offline stand-in: docstring first paragraphs, labelled by the library they document.

    The library names are replaced by ``LIB`` in the texts, then every text that occurs more
    than once (in one library or several) is dropped, so no text is in both splits. Each class
    keeps (at most) ``per_class`` texts chosen by a hash of the qualified name, and a second,
    independent hash of the name puts ``test_fraction`` of them in the test split: the corpus
    is deterministic for given installed versions, and no function is in both splits.
    """
    libraries = list(libraries)
    cleaned = {
        lib: [
            (name, " ".join(_LIBRARY_NAMES.sub("LIB", text).split()))
            for name, text in items
        ]
        for lib, items in ((lib, library_docstrings(lib)) for lib in libraries)
    }
    # How often each cleaned text occurs over all libraries: keep only the unique ones.
    occurrences = Counter(text for items in cleaned.values() for _, text in items)
    splits: dict[str, tuple[list[str], list[int], list[str]]] = {
        "train": ([], [], []),
        "test": ([], [], []),
    }
    cutoff = int(test_fraction * 2**64)
    for label, library in enumerate(libraries):
        items = [
            (name, text) for name, text in cleaned[library] if occurrences[text] == 1
        ]
        items.sort(key=lambda item: _hash("select", item[0]))
        for name, text in sorted(items[:per_class]):
            texts, labels, names = splits[
                "test" if _hash("split", name) < cutoff else "train"
            ]
            texts.append(text)
            labels.append(label)
            names.append(name)
    (train_texts, train_labels, train_names), (test_texts, test_labels, test_names) = (
        splits["train"],
        splits["test"],
    )
    return TextClassificationData(
        f"docstrings ({len(libraries)} libraries)",
        libraries,
        train_texts,
        train_labels,
        test_texts,
        test_labels,
        stand_in=True,
        source="docstrings of the installed " + ", ".join(libraries),
        extra={"train_names": train_names, "test_names": test_names},
    )


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
    :class:`~going_modular.download.DownloadError`.
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
