"""The step-budget loader of chapter 6: exact batch counts and fair cycling over the data."""

import pytest
import torch

from going_modular.experiments import step_loader


def test_step_loader_yields_exactly_the_steps_asked_for():
    x, y = torch.arange(10.0)[:, None], torch.arange(10)
    loader = step_loader((x, y), batch_size=4, steps=7, seed=0)
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
    loader = step_loader((x, y), batch_size=50, steps=1, seed=3)
    first, second = next(iter(loader))[1], next(iter(loader))[1]
    assert not torch.equal(first, second)
    again = step_loader((x, y), batch_size=50, steps=1, seed=3)
    assert torch.equal(next(iter(again))[1], first)


def test_step_loader_refuses_a_zero_budget():
    x, y = torch.zeros(3, 1), torch.zeros(3, dtype=torch.long)
    with pytest.raises(ValueError, match="steps and batch_size must be positive"):
        step_loader((x, y), batch_size=2, steps=0)
