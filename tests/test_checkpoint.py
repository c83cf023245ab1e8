"""Training checkpoints: an interrupted run, resumed, gives exactly the uninterrupted losses;
a checkpoint of another model or recipe, or one this version cannot read, is refused
saying what to do (the CLI's --resume: tests/test_cli.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from going_modular import utils
from going_modular.engine import fit
from going_modular.training.checkpoint import (
    CHECKPOINT_NAME,
    CheckpointMismatchError,
    read_checkpoint,
)
from going_modular.training.recipe import Recipe

LOSSES = ("train_loss", "train_acc", "test_loss", "test_acc")


def _one_cycle(optimizer, total_steps):
    return torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.05, total_steps=total_steps)


def _setup(out_features: int = 2):
    """A small problem whose every epoch draws random numbers: shuffling, dropout, AdamW
    with a per-step schedule."""
    utils.set_seeds(0)
    x = torch.randn(40, 3, 8, 8)
    y = (x.mean(dim=(1, 2, 3)) > 0).long()
    train_dl = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)
    test_dl = DataLoader(TensorDataset(x[:16], y[:16]), batch_size=8)
    model = nn.Sequential(
        nn.Flatten(), nn.Dropout(0.3), nn.Linear(192, 16), nn.ReLU(), nn.Linear(16, 2)
    )
    if out_features != 2:
        model[-1] = nn.Linear(16, out_features)
    return model, train_dl, test_dl


def _recipe(epochs: int = 4) -> Recipe:
    return Recipe(lr=0.01, weight_decay=0.01, schedule=_one_cycle, epochs=epochs)


def _train(epochs=4, checkpoint_dir=None, callbacks=(), out_features=2):
    model, train_dl, test_dl = _setup(out_features)
    return fit(
        model,
        train_dl,
        test_dl,
        _recipe(epochs),
        device="cpu",
        callbacks=callbacks,
        checkpoint_dir=checkpoint_dir,
        progress=False,
    )


def _stop_after_epoch_2(epoch, results):
    if epoch == 2:
        raise KeyboardInterrupt


def test_interrupted_then_resumed_equals_uninterrupted(tmp_path, capsys):
    uninterrupted = _train()
    with pytest.raises(KeyboardInterrupt):
        _train(checkpoint_dir=tmp_path, callbacks=[_stop_after_epoch_2])
    assert read_checkpoint(tmp_path)["epoch"] == 2
    torch.manual_seed(123)  # whatever happened meanwhile, the saved states are restored
    resumed = _train(checkpoint_dir=tmp_path)
    assert (
        capsys.readouterr()
        .out.strip()
        .endswith("2 of 4 epochs done; continuing with epoch 3.")
    )
    for key in LOSSES:
        assert resumed[key] == uninterrupted[key], key
    assert len(resumed["epoch_seconds"]) == 4 and resumed["steps"] == [5] * 4


def test_a_finished_checkpoint_returns_its_results_without_training(tmp_path, capsys):
    done = _train(epochs=2, checkpoint_dir=tmp_path)
    calls = []
    model, train_dl, test_dl = _setup()
    model.register_forward_hook(lambda *args: calls.append(1))
    again = fit(
        model,
        train_dl,
        test_dl,
        _recipe(2),
        device="cpu",
        checkpoint_dir=tmp_path,
        progress=False,
    )
    assert again == done and calls == []
    assert "2 of 2 epochs done; nothing left to train." in capsys.readouterr().out


def test_a_checkpoint_of_other_epochs_or_another_model_is_refused(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        _train(checkpoint_dir=tmp_path, callbacks=[_stop_after_epoch_2])
    with pytest.raises(CheckpointMismatchError, match="epochs=4 there but 5 here"):
        _train(epochs=5, checkpoint_dir=tmp_path)
    model, train_dl, test_dl = _setup()
    with pytest.raises(CheckpointMismatchError, match="lr=0.01 there but 0.02"):
        fit(
            model,
            train_dl,
            test_dl,
            _recipe().replace(lr=0.02),
            checkpoint_dir=tmp_path,
        )
    with pytest.raises(
        CheckpointMismatchError,
        match=r"another model .*4.bias: \[2\] there but \[3\] here",
    ):
        _train(checkpoint_dir=tmp_path, out_features=3)
    torch.save({"format": 99}, tmp_path / CHECKPOINT_NAME)
    with pytest.raises(CheckpointMismatchError, match="format 99"):
        _train(checkpoint_dir=tmp_path)


def test_an_unreadable_checkpoint_is_refused_saying_what_to_do(tmp_path):
    assert read_checkpoint(tmp_path) is None  # none yet: start afresh
    (tmp_path / CHECKPOINT_NAME).write_bytes(b"half a file")
    with pytest.raises(
        CheckpointMismatchError,
        match="Cannot read the training checkpoint .*Move it away to start afresh",
    ):
        read_checkpoint(tmp_path)
