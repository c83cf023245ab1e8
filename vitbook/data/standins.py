"""Offline stand-ins: small, real, learnable datasets made from data that packages ship, and
:func:`real_or_stand_in`, the one rule for when a getter uses one.

Readers with internet use the real datasets; CI and offline readers get these instead, and
every getter says so in one ``[STAND-IN]`` line. None of them is noise:

* ``texture_photos``: for pizza/steak/sushi. Crops of scikit-image's brick, grass and gravel
  photographs, train and test cut from disjoint rows of each photograph, in ImageFolder layout.
* ``DigitsMNIST``: for MNIST. scikit-learn's 1,797 real 8x8 handwritten digits, upscaled to 28x28.
* ``PhotoDigits``: for CIFAR-10's 32x32 RGB, 10 classes. The same handwritten digits, coloured
  and placed on crops of real photographs shipped with scikit-image.
* :func:`make_docstring_corpus`: for AG News and TREC. The first paragraph of the public
  docstrings of installed libraries (numpy, PyTorch, matplotlib, scikit-learn; for TREC's six
  classes also SciPy and scikit-image), classified by the library they come from: real,
  human-written English, a few to a few dozen words long, like TREC's questions and AG News'
  headlines. The library names are replaced by the neutral word ``LIB``, texts that occur
  more than once are dropped, and train and test are split by a hash of each function's
  qualified name, so the split is deterministic and disjoint.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import pkgutil
import re
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import TypeVar

import numpy as np
from PIL import Image
from torch.utils.data import Dataset

from vitbook.data.download import DownloadError
from vitbook.data.files import atomic_folder
from vitbook.data.network import OFFLINE, is_offline
from vitbook.data.text_data import TextClassificationData

__all__ = [
    "STAND_IN_LIBRARIES",
    "TEXTURE_CLASSES",
    "DigitsMNIST",
    "PhotoDigits",
    "first_paragraph",
    "library_docstrings",
    "make_docstring_corpus",
    "make_texture_photos",
    "real_or_stand_in",
]

T = TypeVar("T")
TEXTURE_CLASSES = ("brick", "grass", "gravel")
_BACKGROUND_PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field")


def real_or_stand_in(
    name: str,
    load_real: Callable[[], T],
    make_stand_in: Callable[[], T],
    stand_in: str,
    *,
    fallback: bool,
    try_offline: bool = False,
) -> T:
    """``load_real()``; or, when the real data cannot be had and ``fallback`` allows it,
    ``make_stand_in()``, announced in one ``[STAND-IN]`` line that names ``stand_in``.

    Offline (:func:`~vitbook.data.network.is_offline`) the real data is not tried, unless ``try_offline`` (for a
    ``load_real`` that looks on this machine first). A failed attempt (a
    :class:`~vitbook.data.download.DownloadError`, or the RuntimeError or OSError of
    torchvision's downloads) is explained in one ``[INFO]`` line before the stand-in; with
    ``fallback=False`` it is raised instead, as a DownloadError that says what to do.
    """
    if is_offline() and not try_offline:
        if not fallback:
            raise DownloadError(
                f"The library is {OFFLINE} and fallback=False: {name} cannot be "
                "fetched. Call set_offline(False) (or unset BOOK_OFFLINE for the book), "
                "or allow the stand-in."
            )
    else:
        try:
            return load_real()
        except (RuntimeError, OSError) as error:  # DownloadError is a RuntimeError
            if not fallback:
                if isinstance(error, DownloadError):
                    raise
                raise DownloadError(
                    f"Could not download {name}: {error}. Check your connection, or "
                    "pass fallback=True to use the stand-in."
                ) from error
            print(f"[INFO] Could not get {name}: {error}")
    print(f"[STAND-IN] {name} is not available offline: using {stand_in} instead.")
    return make_stand_in()


# Images ------------------------------------------------------------------------------------


def _texture(name: str) -> np.ndarray:
    from skimage import data

    return np.asarray(getattr(data, name)(), dtype=np.uint8)


def make_texture_photos(
    root: Path,
    train_per_class: int = 75,
    test_per_class: int = 25,
    crop: int = 128,
    seed: int = 0,
) -> Path:
    """Write the 3-class texture dataset to ``root`` (ImageFolder layout) and return it.

    Train crops come from the top 65% of each 512x512 photograph's rows, test crops from the
    bottom 30%, so no test pixel was ever seen in training. The folder appears atomically
    (:func:`~vitbook.data.files.atomic_folder`).
    """
    if (root / "train").is_dir() and (root / "test").is_dir():
        return root
    rng = np.random.default_rng(seed)
    with atomic_folder(root) as staging:
        for name in TEXTURE_CLASSES:
            photo = _texture(name)
            height = photo.shape[0]
            regions = {
                "train": (0, int(0.65 * height), train_per_class),
                "test": (int(0.70 * height), height, test_per_class),
            }
            for split, (top, bottom, count) in regions.items():
                folder = staging / split / name
                folder.mkdir(parents=True)
                for i in range(count):
                    size = int(rng.integers(crop // 2, min(crop * 2, bottom - top) + 1))
                    y = int(rng.integers(top, bottom - size + 1))
                    x = int(rng.integers(0, photo.shape[1] - size + 1))
                    patch = Image.fromarray(photo[y : y + size, x : x + size]).convert(
                        "RGB"
                    )
                    if rng.random() < 0.5:
                        patch = patch.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
                    patch.resize((crop, crop), Image.Resampling.BICUBIC).save(
                        folder / f"{name}_{i:03d}.jpg", quality=92
                    )
    return root


def _digits_split(train: bool) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits, split 80/20 with a fixed, stratified seed."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images * (255.0 / 16.0)).astype(np.uint8)
    x_train, x_test, y_train, y_test = train_test_split(
        images, digits.target, test_size=0.2, stratify=digits.target, random_state=0
    )
    return (x_train, y_train) if train else (x_test, y_test)


class _ImageListDataset(Dataset):
    """A list of PIL images and integer labels, with an optional transform, like torchvision's."""

    classes: list[str]

    def __init__(self, images: list[Image.Image], targets: list[int], transform=None):
        self.images, self.targets, self.transform = images, targets, transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int):
        image = self.images[index]
        return (self.transform(image) if self.transform else image), self.targets[index]


class DigitsMNIST(_ImageListDataset):
    """MNIST's shape (28x28 grayscale, 10 classes) from scikit-learn's real handwritten digits."""

    classes = [
        f"{d} - {w}"
        for d, w in enumerate(
            "zero one two three four five six seven eight nine".split()
        )
    ]

    def __init__(self, train: bool = True, transform=None):
        images, labels = _digits_split(train)
        pil = [
            Image.fromarray(im).resize((28, 28), Image.Resampling.BILINEAR)
            for im in images
        ]
        super().__init__(pil, [int(t) for t in labels], transform)


class PhotoDigits(_ImageListDataset):
    """CIFAR-10's shape (32x32 RGB, 10 classes): real handwritten digits on real photographs.

    Each digit is drawn ``copies`` times, each time scaled, coloured and placed at random
    over a random crop of one of scikit-image's photographs. The 1,797 digits are split 80/20
    at random (stratified by class): scikit-learn's digits carry no writer ids, so the same
    person's writing may be on both sides. The backgrounds come from disjoint photo halves.
    """

    classes = [str(d) for d in range(10)]

    def __init__(
        self,
        train: bool = True,
        transform=None,
        copies: int | None = None,
        seed: int = 0,
    ):
        from skimage import data

        copies = copies if copies is not None else (4 if train else 2)
        rng = np.random.default_rng(seed + (0 if train else 1))
        photos = [np.asarray(getattr(data, n)())[..., :3] for n in _BACKGROUND_PHOTOS]
        halves = [
            p[: p.shape[0] // 2] if train else p[p.shape[0] // 2 :] for p in photos
        ]
        digits, labels = _digits_split(train)
        images, targets = [], []
        for digit, label in zip(digits, labels, strict=True):
            for _ in range(copies):
                images.append(
                    self._render(digit, halves[rng.integers(len(halves))], rng)
                )
                targets.append(int(label))
        super().__init__(images, targets, transform)

    @staticmethod
    def _render(
        digit: np.ndarray, photo: np.ndarray, rng: np.random.Generator
    ) -> Image.Image:
        y = int(rng.integers(0, photo.shape[0] - 32))
        x = int(rng.integers(0, photo.shape[1] - 32))
        canvas = photo[y : y + 32, x : x + 32].astype(np.float32) * 0.6
        size = int(rng.integers(18, 29))
        glyph = Image.fromarray(digit).resize((size, size), Image.Resampling.BILINEAR)
        alpha = np.asarray(glyph, dtype=np.float32)[..., None] / 255.0
        colour = rng.uniform(120, 255, size=3).astype(np.float32)
        top, left = (int(v) for v in rng.integers(0, 32 - size + 1, size=2))
        region = canvas[top : top + size, left : left + size]
        canvas[top : top + size, left : left + size] = (
            alpha * colour + (1 - alpha) * region
        )
        return Image.fromarray(canvas.clip(0, 255).astype(np.uint8))


# Text --------------------------------------------------------------------------------------

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
    """The text stand-in: docstring first paragraphs, labelled by the library they document.

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
