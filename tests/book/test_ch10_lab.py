"""Chapter 10's small-data runs and pixel baseline (vitbook.book.ch10_lab)."""

import math

import pytest
import torch

from vitbook.book.ch10_lab import confidence, logistic_baseline, small_run
from vitbook.training.cct_recipes import CCT_CIFAR_300


def _blobs(n_per_class: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 images (N, 1, 12, 12) whose class is which of 10 pixels is bright."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(10).repeat_interleave(n_per_class)
    images = torch.randint(0, 60, (len(labels), 1, 12, 12), generator=g)
    images.view(len(labels), -1)[torch.arange(len(labels)), 13 * labels] = 255
    return images.to(torch.uint8), labels


def test_confidence_is_the_mean_largest_softmax_probability():
    logits = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]])
    assert confidence(logits) == pytest.approx((0.5 + 0.75) / 2)


def test_logistic_baseline_breaks_ties_toward_stronger_regularisation_and_converges():
    x, y = _blobs(12)
    x_test, y_test = _blobs(5, seed=1)
    result = logistic_baseline(x, y, x_test, y_test, Cs=(1.0, 1e-6))
    assert result["C"] == 1e-6  # both separate the validation split: the smaller C
    assert result["converged"]
    assert result["test_acc"] > 0.9


def test_logistic_baseline_never_sees_the_test_labels():
    x, y = _blobs(12)
    x_test, y_test = _blobs(5, seed=1)
    a = logistic_baseline(x, y, x_test, y_test, Cs=(1e-3, 1.0))
    b = logistic_baseline(x, y, x_test, (y_test + 1) % 10, Cs=(1e-3, 1.0))
    assert a["C"] == b["C"]


def test_logistic_baseline_holds_out_one_image_a_class_from_a_tiny_subset():
    # 4 images a class: a fifth would be 8 images, fewer than the 10 classes.
    x, y = _blobs(4)
    x_test, y_test = _blobs(5, seed=1)
    result = logistic_baseline(x, y, x_test, y_test, Cs=(1e-3, 1.0))
    assert result["C"] in (1e-3, 1.0)
    assert 0.0 <= result["test_acc"] <= 1.0


def test_small_run_trains_and_reports():
    x, y = _blobs(4)
    recipe = CCT_CIFAR_300.replace(batch_size=8, lr=1e-3)
    result = small_run(
        recipe,
        0,
        x,
        y,
        x,
        y,
        steps=3,
        mean=(0.3,),
        std=(0.3,),
        model_name="tinyvgg",
        model_kwargs=dict(hidden_units=4),
    )
    assert result["steps"] == 3
    assert set(result) >= {"test_acc", "train_acc", "confidence", "cpu_seconds"}
    assert 0.1 - 1e-6 <= result["confidence"] <= 1.0
    assert 0.0 <= result["test_acc"] <= 1.0
