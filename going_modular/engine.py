"""The course's training functions, over the book's training loop.

The "PyTorch Going Modular" chapter of the course this book follows writes ``engine.py``
with three functions; they work here unchanged, as thin faces of
:mod:`going_modular.training.loop` (one loop, whichever way it is called)::

    results = engine.train(model, train_dataloader, test_dataloader, optimizer, loss_fn,
                           epochs=5, device=device)
    train_loss, train_acc = engine.train_step(model, train_dataloader, loss_fn, optimizer,
                                              device)
    test_loss, test_acc = engine.test_step(model, test_dataloader, loss_fn, device)

Losses and accuracies are averaged per sample (the course averages per batch, which
weighs a small last batch as much as a full one). The book's own chapters call
:func:`fit` with a :class:`~going_modular.training.recipe.Recipe`; it, :func:`evaluate`,
:func:`train_one_epoch` and :func:`autocast` are importable from here too.
"""

from __future__ import annotations

import sys

import torch
from torch import nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from going_modular.training.loop import (
    RESULT_KEYS,
    Callback,
    autocast,
    evaluate,
    fit,
    train_one_epoch,
)
from going_modular.training.recipe import Recipe

__all__ = [
    "RESULT_KEYS",
    "Callback",
    "autocast",
    "evaluate",
    "fit",
    "test_step",
    "train",
    "train_one_epoch",
    "train_step",
]


def train_step(
    model: nn.Module,
    dataloader: DataLoader,
    loss_fn: nn.Module,
    optimizer: torch.optim.Optimizer,
    device: torch.device | str,
) -> tuple[float, float]:
    """Train ``model`` for one epoch; return ``(train_loss, train_acc)`` as floats."""
    return train_one_epoch(
        model, dataloader, loss_fn, optimizer, device, progress=False
    )


def test_step(
    model: nn.Module,
    dataloader: DataLoader,
    loss_fn: nn.Module,
    device: torch.device | str,
) -> tuple[float, float]:
    """Test ``model`` on ``dataloader``; return ``(test_loss, test_acc)`` as floats."""
    return evaluate(model, dataloader, loss_fn, device, progress=False)


def train(
    model: nn.Module,
    train_dataloader: DataLoader,
    test_dataloader: DataLoader,
    optimizer: torch.optim.Optimizer,
    loss_fn: nn.Module,
    epochs: int,
    device: torch.device | str,
) -> dict[str, list[float]]:
    """Train and test ``model`` for ``epochs`` epochs with the course's arguments.

    ``optimizer`` (already built over the model's parameters) and ``loss_fn`` (for training
    and testing) are used as given. Prints one line per epoch under a progress bar, and
    returns ``{"train_loss": [...], "train_acc": [...], "test_loss": [...],
    "test_acc": [...]}``, one value per epoch.
    """
    recipe = Recipe(optimizer=optimizer, loss_fn=loss_fn, epochs=epochs)
    with tqdm(total=epochs, file=sys.stdout) as bar:

        def report(epoch: int, results: dict[str, list[float]]) -> None:
            bar.write(
                f"Epoch: {epoch} | "
                + " | ".join(f"{k}: {results[k][-1]:.4f}" for k in RESULT_KEYS[:4])
            )
            bar.update()

        results = fit(
            model,
            train_dataloader,
            test_dataloader,
            recipe,
            device=device,
            callbacks=[report],
            progress=False,
        )
    return {key: results[key] for key in RESULT_KEYS[:4]}
