"""A Recipe may hold an optimiser already built (the course passes one to engine.train):
fit steps that very optimiser, with its own learning rate."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from vitbook.training.loop import fit
from vitbook.training.recipe import Recipe


def _data():
    torch.manual_seed(0)
    x = torch.randn(32, 4)
    return DataLoader(TensorDataset(x, (x.sum(1) > 0).long()), batch_size=8)


def test_an_optimiser_already_built_is_the_one_fit_steps():
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    recipe = Recipe(optimizer=optimizer, epochs=2)
    assert recipe.build_optimizer(model) is optimizer
    fit(model, _data(), None, recipe, device="cpu", progress=False)
    assert optimizer.param_groups[0]["lr"] == 0.5
    assert all("momentum_buffer" in optimizer.state[p] for p in model.parameters())


def test_an_optimiser_already_built_trains_as_the_same_class_would():
    def run(recipe_of):
        torch.manual_seed(1)
        model = nn.Linear(4, 2)
        results = fit(
            model, _data(), None, recipe_of(model), device="cpu", progress=False
        )
        return results["train_loss"], model.weight.detach().clone()

    built = run(lambda m: Recipe(optimizer=torch.optim.SGD(m.parameters(), lr=0.1)))
    named = run(lambda m: Recipe(optimizer=torch.optim.SGD, lr=0.1))
    assert built[0] == named[0] and torch.equal(built[1], named[1])


def test_weight_decay_belongs_to_an_optimiser_already_built():
    optimizer = torch.optim.SGD(nn.Linear(4, 2).parameters(), lr=0.1)
    with pytest.raises(ValueError, match="keeps its own"):
        Recipe(optimizer=optimizer, weight_decay=0.01)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_eval_steps": 0}, "max_eval_steps must be a positive integer, got 0"),
        ({"epochs": True}, "epochs must be a positive integer, got True"),
        ({"lr": float("nan")}, "lr must be a positive number, got nan"),
        ({"time_budget": float("inf")}, "time_budget must be a positive number"),
        (
            {"schedule": "warmup_cosine", "warmup_steps": -1},
            "warmup_steps must be a number >= 0, got -1",
        ),
    ],
)
def test_the_recipe_checks_its_fields_with_the_package_checks(fields, message):
    """data.checks' rules: no bool as a count, no NaN or infinity as a number."""
    with pytest.raises(ValueError, match=message):
        Recipe(**fields)
