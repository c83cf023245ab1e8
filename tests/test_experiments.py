"""Subsets, loaders and seed summaries used by the chapters' experiments."""

import pytest
import torch

from going_modular import experiments


def test_balanced_subset_takes_per_class_and_is_reproducible():
    labels = torch.tensor([0] * 10 + [1] * 5 + [2] * 7)
    idx = experiments.balanced_subset(labels, per_class=4, seed=3)
    assert torch.bincount(labels[idx]).tolist() == [4, 4, 4]
    assert len(set(idx.tolist())) == 12
    assert torch.equal(idx, experiments.balanced_subset(labels, per_class=4, seed=3))
    assert not torch.equal(
        idx, experiments.balanced_subset(labels, per_class=4, seed=4)
    )
    only = experiments.balanced_subset(labels, per_class=2, classes=[2])
    assert labels[only].tolist() == [2, 2]


def test_balanced_subset_refuses_too_few():
    with pytest.raises(ValueError, match="class 1 has 5 examples"):
        experiments.balanced_subset(torch.tensor([0] * 9 + [1] * 5), per_class=6)


def test_tensor_loaders_shuffle_by_seed():
    x, y = torch.arange(20.0)[:, None], torch.arange(20)
    a, _ = experiments.tensor_loaders((x, y), (x, y), batch_size=20, seed=1)
    b, test = experiments.tensor_loaders((x, y), (x, y), batch_size=20, seed=1)
    assert torch.equal(next(iter(a))[1], next(iter(b))[1])
    assert sorted(next(iter(a))[1].tolist()) == list(range(20))
    assert next(iter(test))[1].tolist() == list(range(20))


def test_over_seeds_seeds_each_run():
    draws = experiments.over_seeds(lambda seed: torch.rand(1).item(), seeds=(5, 5, 6))
    assert draws[0] == draws[1] != draws[2]


def test_summarize_and_format():
    assert experiments.summarize([0.8, 0.9]) == pytest.approx(
        (0.85, 0.0707106), abs=1e-6
    )
    assert experiments.summarize([0.5]) == (0.5, 0.0)
    assert experiments.format_mean_std([0.8, 0.9]) == "85.0 ± 7.1"
    with pytest.raises(ValueError):
        experiments.summarize([])
