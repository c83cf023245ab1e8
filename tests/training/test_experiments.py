"""Subsets, loaders and seed summaries used by the chapters' experiments."""

import pytest
import torch

from vitbook.training import experiments


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


def test_step_loader_yields_exactly_the_steps_asked_for():
    x, y = torch.arange(10.0)[:, None], torch.arange(10)
    loader = experiments.step_loader((x, y), batch_size=4, steps=7, seed=0)
    batches = list(loader)
    assert len(loader) == 7 and len(batches) == 7
    assert all(len(xb) == 4 for xb, _ in batches)
    seen = torch.cat([yb for _, yb in batches])
    # 28 draws cycle through the 10 examples: the first 20 are two full permutations.
    assert sorted(seen[:10].tolist()) == list(range(10))
    assert sorted(seen[10:20].tolist()) == list(range(10))
    assert torch.equal(x[seen, 0], torch.cat([xb[:, 0] for xb, _ in batches]))


def test_step_loader_reshuffles_on_each_pass_and_is_reproducible():
    x, y = torch.arange(50.0)[:, None], torch.arange(50)
    loader = experiments.step_loader((x, y), batch_size=50, steps=1, seed=3)
    first, second = next(iter(loader))[1], next(iter(loader))[1]
    assert not torch.equal(first, second)
    again = experiments.step_loader((x, y), batch_size=50, steps=1, seed=3)
    assert torch.equal(next(iter(again))[1], first)


def test_step_loader_refuses_a_zero_budget():
    x, y = torch.zeros(3, 1), torch.zeros(3, dtype=torch.long)
    with pytest.raises(ValueError, match="steps must be a positive integer, got 0"):
        experiments.step_loader((x, y), batch_size=2, steps=0)
