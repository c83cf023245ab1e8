"""Training checkpoints: an interrupted run, resumed, gives exactly the uninterrupted losses;
a checkpoint of another model or recipe, or one this version cannot read, is refused
saying what to do (the CLI's --resume: tests/test_cli.py)."""

from __future__ import annotations

import errno

import pytest
import torch
from stateful_transform import Jitter
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from going_modular import utils
from vitbook.training import loop
from vitbook.training.checkpoint import (
    CHECKPOINT_NAME,
    CheckpointMismatchError,
    CorruptCheckpointError,
    read_checkpoint,
    write_verified,
)
from vitbook.training.loop import fit
from vitbook.training.recipe import Recipe

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


def _train(epochs=4, checkpoint_dir=None, callbacks=(), out_features=2, identity=None):
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
        identity=identity,
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


def test_a_checkpoint_of_another_run_identity_is_refused_field_by_field(
    tmp_path, capsys
):
    """A sibling run's checkpoint (another seed) was resumed without complaint (issue
    53): the identity fit is given is saved, and compared on resuming."""
    mine = {"run_id": "20240101-000000-aaaaaaaa", "seed": 42, "lr": 0.01}
    sibling = mine | {"run_id": "20240101-000000-bbbbbbbb", "seed": 7}
    uninterrupted = _train()
    with pytest.raises(KeyboardInterrupt):
        _train(checkpoint_dir=tmp_path, callbacks=[_stop_after_epoch_2], identity=mine)
    assert read_checkpoint(tmp_path)["config"]["run"] == mine
    with pytest.raises(CheckpointMismatchError) as info:
        _train(checkpoint_dir=tmp_path, identity=sibling)
    assert (
        "run_id='20240101-000000-aaaaaaaa' there but '20240101-000000-bbbbbbbb' here; "
        "seed=42 there but 7 here. Call fit()"
    ) in str(info.value)
    resumed = _train(checkpoint_dir=tmp_path, identity=mine)
    for key in LOSSES:  # the identity changes nothing of the training
        assert resumed[key] == uninterrupted[key], key


def test_a_checkpoint_from_before_run_identities_still_resumes(tmp_path, capsys):
    with pytest.raises(KeyboardInterrupt):
        _train(checkpoint_dir=tmp_path, callbacks=[_stop_after_epoch_2])
    assert "run" not in read_checkpoint(tmp_path)["config"]
    assert len(_train(checkpoint_dir=tmp_path, identity={"seed": 42})["test_acc"]) == 4


def test_an_unreadable_checkpoint_is_refused_saying_what_to_do(tmp_path):
    assert read_checkpoint(tmp_path) is None  # none yet: start afresh
    (tmp_path / CHECKPOINT_NAME).write_bytes(b"half a file")
    with pytest.raises(
        CheckpointMismatchError,
        match="Cannot read the training checkpoint .*Move it away to start afresh",
    ):
        read_checkpoint(tmp_path)


def _train_jittered(checkpoint_dir=None, callbacks=()):
    model, train_dl, test_dl = _setup()
    transform = Jitter(5)
    results = fit(
        model,
        train_dl,
        test_dl,
        _recipe().replace(batch_transform=transform),
        device="cpu",
        callbacks=callbacks,
        checkpoint_dir=checkpoint_dir,
        progress=False,
    )
    return results, transform, model


def test_a_stateful_batch_transform_resumes_exactly(tmp_path):
    uninterrupted, transform, model = _train_jittered()
    with pytest.raises(KeyboardInterrupt):
        _train_jittered(tmp_path, callbacks=[_stop_after_epoch_2])
    assert read_checkpoint(tmp_path)["local"][0]["batch_transform"]["batches"] == 10
    resumed, resumed_transform, resumed_model = _train_jittered(tmp_path)
    for key in LOSSES:
        assert resumed[key] == uninterrupted[key], key
    assert resumed_transform.batches == transform.batches == 20
    for name, value in model.state_dict().items():
        assert torch.equal(resumed_model.state_dict()[name], value), name


def test_a_loaders_own_generator_is_restored(tmp_path):
    def train(checkpoint_dir=None, callbacks=()):
        model, train_dl, test_dl = _setup()
        generator = torch.Generator().manual_seed(9)
        shuffled = DataLoader(
            train_dl.dataset, batch_size=8, shuffle=True, generator=generator
        )
        return fit(model, shuffled, test_dl, _recipe(), device="cpu", progress=False,
                   callbacks=callbacks, checkpoint_dir=checkpoint_dir)  # fmt: skip

    uninterrupted = train()
    with pytest.raises(KeyboardInterrupt):
        train(tmp_path, callbacks=[_stop_after_epoch_2])
    resumed = train(tmp_path)
    for key in LOSSES:
        assert resumed[key] == uninterrupted[key], key


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_corrupt_checkpoint_is_refused_and_never_trained_from(tmp_path, damage):
    _train(epochs=2, checkpoint_dir=tmp_path)
    path = tmp_path / CHECKPOINT_NAME
    content = bytearray(path.read_bytes())
    if damage == "flip":
        content[len(content) // 2] ^= 0x10  # one bit, inside the saved weights
    else:
        content = content[: len(content) - 100]
    path.write_bytes(bytes(content))
    model, train_dl, test_dl = _setup()
    calls = []
    model.register_forward_hook(lambda *args: calls.append(1))
    with pytest.raises(CorruptCheckpointError, match=f"{path}.*(corrupt|truncated)"):
        fit(model, train_dl, test_dl, _recipe(2), device="cpu",
            checkpoint_dir=tmp_path, progress=False)  # fmt: skip
    assert calls == []


def test_a_run_stopped_by_its_time_budget_continues_with_a_new_budget(
    tmp_path, capsys, monkeypatch
):
    clock = iter(range(0, 10_000, 5))  # every reading 5 s after the last
    monkeypatch.setattr(loop.time, "perf_counter", lambda: float(next(clock)))
    model, train_dl, test_dl = _setup()

    def run(budget):
        recipe = _recipe(4).replace(time_budget=budget)
        return fit(model, train_dl, test_dl, recipe, device="cpu",
                   checkpoint_dir=tmp_path, progress=True)  # fmt: skip

    first = run(1)  # spent at the first step: the first epoch ends there
    saved = read_checkpoint(tmp_path)
    again = run(1)  # the same budget: nothing more to train
    longer = run(10_000)
    assert len(first["train_loss"]) == 1 and first["steps"] == [1]
    assert saved["epoch"] == 1 and saved["seconds"] > 1
    assert again == first
    assert len(longer["train_loss"]) == 4 and longer["steps"] == [1, 5, 5, 5]
    assert longer["train_loss"][0] == first["train_loss"][0]
    out = capsys.readouterr().out
    assert out.count("Time budget of 1 s spent: stopped in epoch 1.") == 2
    assert "1 of 4 epochs done; continuing with epoch 2." in out


@pytest.mark.parametrize("limit", [3000, 30000])
def test_a_full_disk_while_saving_raises_its_own_error(tmp_path, limit):
    """A write cut short (here by a file-size limit, as a full disk cuts it) is the OSError
    that names the file, not torch's "unexpected pos" RuntimeError; the old file stays."""
    resource = pytest.importorskip("resource")
    path = write_verified(tmp_path / "state.pth", {"w": torch.zeros(4)})
    before = path.read_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        with pytest.raises(OSError) as info:
            write_verified(path, {"w": torch.zeros(50_000)})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert info.value.errno == errno.EFBIG and info.value.filename == str(path)
    assert path.read_bytes() == before and list(tmp_path.iterdir()) == [path]
