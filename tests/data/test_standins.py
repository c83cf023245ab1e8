"""vitbook.data.standins: the stand-ins are real, learnable and split without overlap, and
real_or_stand_in is the one rule for when a getter uses one."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from vitbook.data import image_folders
from vitbook.data import standins
from vitbook.data.download import DownloadError


def _getter(load_real, fallback=True, try_offline=False):
    return standins.real_or_stand_in(
        "Pizza",
        load_real,
        lambda: "stand-in",
        "bread",
        fallback=fallback,
        try_offline=try_offline,
    )


def test_offline_the_real_data_is_not_tried(capsys):
    def never():
        raise AssertionError("tried offline")

    assert _getter(never) == "stand-in"
    assert capsys.readouterr().out == (
        "[STAND-IN] Pizza is not available offline: using bread instead.\n"
    )
    with pytest.raises(
        DownloadError, match=r"set_offline\(True\).* and fallback=False: Pizza"
    ):
        _getter(never, fallback=False)
    assert _getter(lambda: "local", try_offline=True) == "local"


def test_a_failure_is_explained_then_replaced_or_raised(monkeypatch, capsys, online):

    def fails(error):
        def load():
            raise error

        return load

    assert _getter(fails(DownloadError("HTTP status 503"))) == "stand-in"
    assert capsys.readouterr().out.splitlines() == [
        "[INFO] Could not get Pizza: HTTP status 503",
        "[STAND-IN] Pizza is not available offline: using bread instead.",
    ]
    with pytest.raises(DownloadError, match="^HTTP status 503$"):  # as it was
        _getter(fails(DownloadError("HTTP status 503")), fallback=False)
    with pytest.raises(DownloadError, match="Could not download Pizza: timed out"):
        _getter(fails(OSError("timed out")), fallback=False)  # torchvision's kind
    with pytest.raises(ValueError, match="a bug"):  # not a failed download
        _getter(fails(ValueError("a bug")))
    assert _getter(lambda: "real") == "real" and capsys.readouterr().out == ""


def test_texture_photos_layout(texture_photos):
    for split, count in (("train", 75), ("test", 25)):
        classes = image_folders.check_image_folder(texture_photos / split)
        assert classes == list(standins.TEXTURE_CLASSES)
        for name in classes:
            assert len(list((texture_photos / split / name).glob("*.jpg"))) == count
    assert [p.name for p in texture_photos.parent.iterdir()] == ["texture_photos"]


def test_texture_train_and_test_are_different_images(texture_photos):
    def pixels(split):
        return {
            Image.open(p).tobytes()
            for p in sorted((texture_photos / split).rglob("*.jpg"))
        }

    assert not pixels("train") & pixels("test")


def test_digit_splits_are_disjoint():
    train_images, _ = standins._digits_split(train=True)
    test_images, _ = standins._digits_split(train=False)
    train_set = {im.tobytes() for im in train_images}
    overlap = sum(im.tobytes() in train_set for im in test_images)
    assert overlap <= 2  # sklearn's digits hold a couple of exact duplicates
    assert (
        np.unique(np.concatenate([train_images, test_images]), axis=0).shape[0] > 1780
    )


def test_first_paragraph_keeps_prose_only():
    doc = """add(x1, x2, /, out=None)

    Add arguments element-wise, as :func:`~numpy.sum` does for a whole array.

    Parameters
    ----------
    """
    assert standins.first_paragraph(doc) == (
        "Add arguments element-wise, as numpy.sum does for a whole array."
    )
    assert standins.first_paragraph("Too short.\n\n.. note:: a directive") is None


def test_docstring_corpus_is_real_deterministic_and_disjoint(docstring_corpus):
    corpus = docstring_corpus
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
    standins.library_docstrings.cache_clear()
    again = standins.make_docstring_corpus()
    assert (
        again.train_texts == corpus.train_texts
        and again.test_labels == corpus.test_labels
    )
