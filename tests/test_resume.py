"""Resumable training: an interrupted run, resumed, gives exactly the uninterrupted losses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
import torch
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from going_modular import engine, runs, train, utils

LOSSES = ("train_loss", "train_acc", "test_loss", "test_acc")


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
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.05, total_steps=20)
    return model, train_dl, test_dl, optimizer, scheduler


def _train(epochs=4, checkpoint_dir=None, on_epoch_end=None, out_features=2):
    model, train_dl, test_dl, optimizer, scheduler = _setup(out_features)
    return engine.train(
        model,
        train_dl,
        test_dl,
        optimizer,
        nn.CrossEntropyLoss(),
        epochs,
        "cpu",
        scheduler=scheduler,
        progress=False,
        on_epoch_end=on_epoch_end,
        checkpoint_dir=checkpoint_dir,
    )


def _stop_after_epoch_2(epoch, results):
    if epoch == 2:
        raise KeyboardInterrupt


def test_interrupted_then_resumed_equals_uninterrupted(tmp_path, capsys):
    uninterrupted = _train()
    with pytest.raises(KeyboardInterrupt):
        _train(checkpoint_dir=tmp_path, on_epoch_end=_stop_after_epoch_2)
    assert engine.read_checkpoint(tmp_path)["epoch"] == 2
    torch.manual_seed(123)  # whatever happened meanwhile, the saved states are restored
    resumed = _train(checkpoint_dir=tmp_path)
    assert (
        capsys.readouterr()
        .out.strip()
        .endswith("2 of 4 epochs done; continuing with epoch 3.")
    )
    for key in LOSSES:
        assert resumed[key] == uninterrupted[key], key
    assert len(resumed["epoch_seconds"]) == 4


def test_a_finished_checkpoint_returns_its_results_without_training(tmp_path, capsys):
    done = _train(epochs=2, checkpoint_dir=tmp_path)
    calls = []
    model, train_dl, test_dl, optimizer, scheduler = _setup()
    model.register_forward_hook(lambda *args: calls.append(1))
    again = engine.train(
        model,
        train_dl,
        test_dl,
        optimizer,
        nn.CrossEntropyLoss(),
        2,
        "cpu",
        scheduler=scheduler,
        progress=False,
        checkpoint_dir=tmp_path,
    )
    assert again == done and calls == []
    assert "2 of 2 epochs done; nothing left to train." in capsys.readouterr().out


def test_a_checkpoint_of_other_epochs_or_another_model_is_refused(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        _train(checkpoint_dir=tmp_path, on_epoch_end=_stop_after_epoch_2)
    with pytest.raises(
        engine.CheckpointMismatchError, match="epochs=4 there but 5 here"
    ):
        _train(epochs=5, checkpoint_dir=tmp_path)
    with pytest.raises(
        engine.CheckpointMismatchError,
        match=r"another model .*4.bias: \[2\] there but \[3\] here",
    ):
        _train(checkpoint_dir=tmp_path, out_features=3)
    torch.save({"format": 99}, tmp_path / engine.CHECKPOINT_NAME)
    with pytest.raises(engine.CheckpointMismatchError, match="format 99"):
        _train(checkpoint_dir=tmp_path)


CHILD = textwrap.dedent(
    """
    import sys, time
    from going_modular import engine, train

    save = engine._save_checkpoint

    def save_then_wait(checkpoint_dir, epoch, *args, **kwargs):
        save(checkpoint_dir, epoch, *args, **kwargs)
        if epoch == 2:  # wait here for the test's SIGTERM
            print("epoch 2 saved", flush=True)
            time.sleep(120)

    engine._save_checkpoint = save_then_wait
    train._Run._plot = lambda self, results: None  # a second saved: not tested here
    train.main(sys.argv[1:])
    """
)


def _tiny_images(root):
    """An ImageFolder of 2 classes of random 8x8 images, 8 training and 2 test each."""
    generator = torch.Generator().manual_seed(0)
    for split, count in (("train", 8), ("test", 2)):
        for name in ("a", "b"):
            (root / split / name).mkdir(parents=True)
            for k in range(count):
                pixels = torch.randint(0, 256, (8, 8, 3), generator=generator)
                Image.fromarray(pixels.to(torch.uint8).numpy()).save(
                    root / split / name / f"{k}.png"
                )
    return root


def test_cli_sigterm_then_resume_equals_an_uninterrupted_run(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(train._Run, "_plot", lambda self, results: None)
    data = _tiny_images(tmp_path / "own")
    options = ["--data-dir", str(data), "--img-size", "8", "--batch-size", "4"]
    options += ["--epochs", "4"]
    out = tmp_path / "runs"
    env = os.environ | {"OMP_NUM_THREADS": str(torch.get_num_threads())}
    process = subprocess.Popen(
        [sys.executable, "-c", CHILD, *options, "--output-dir", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        for line in process.stdout:
            if "epoch 2 saved" in line:
                break
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 143, stderr
    run = (out / "latest").resolve()
    assert stderr.strip().splitlines()[-1] == (
        f"Interrupted during epoch 3: saved epoch 2's checkpoint and the results so far "
        f"(marked interrupted) to {run}/. Continue with: python -m going_modular.train "
        f"--resume {run}"
    )
    stopped = json.loads((run / "results.json").read_text())
    assert stopped["status"] == "interrupted" and len(stopped["train_loss"]) == 2

    with pytest.raises(SystemExit) as info:
        train.main(["--resume", str(out / "latest"), "--lr", "0.1"])
    assert info.value.code == 2
    assert "--lr cannot be given with it" in capsys.readouterr().err
    train.main(["--resume", str(out / "latest")])
    resumed = json.loads((run / "results.json").read_text())
    train.main([*options, "--output-dir", str(tmp_path / "again")])
    uninterrupted = json.loads(
        (tmp_path / "again" / "latest" / "results.json").read_text()
    )
    assert resumed["status"] == "complete" and resumed["run_id"] == run.name
    for key in LOSSES:
        assert resumed[key] == uninterrupted[key], key
    assert runs.pair_matches(run)
    with pytest.raises(SystemExit):
        train.main(["--resume", str(run)])
    assert "that run is complete (4 epochs)" in capsys.readouterr().err
