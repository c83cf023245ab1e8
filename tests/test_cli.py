"""The ``python -m going_modular.train`` entry point, end to end."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from going_modular import train, utils
from going_modular.models import list_models


def test_help_lists_the_options():
    out = subprocess.run(
        [sys.executable, "-m", "going_modular.train", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for option in (
        "--model",
        "--dataset",
        "--epochs",
        "--batch-size",
        "--lr",
        "--output-dir",
    ):
        assert option in out


def test_run_writes_checkpoint_results_and_curves(tmp_path, capsys):
    out = tmp_path / "run"
    train.main(
        [
            "--model",
            "tinyvgg",
            "--dataset",
            "mnist",
            "--epochs",
            "2",
            "--batch-size",
            "64",
            "--max-steps",
            "5",
            "--warmup-epochs",
            "0.5",
            "--output-dir",
            str(out),
        ]
    )
    assert sorted(p.name for p in out.iterdir()) == [
        "loss_curves.png",
        "model.pth",
        "results.json",
    ]
    results = json.loads((out / "results.json").read_text())
    assert len(results["train_loss"]) == 2
    assert (out / "loss_curves.png").read_bytes()[:4] == b"\x89PNG"
    model = utils.load_model(out / "model.pth").eval()
    assert utils.load_checkpoint(out / "model.pth")["extra"]["img_size"] == 28
    x = torch.rand(3, 1, 28, 28)
    again = utils.load_model(out / "model.pth").eval()
    assert torch.equal(model(x), again(x))
    assert "[STAND-IN] MNIST" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "resnet9000"], "invalid choice: 'resnet9000'"),
        (["--dataset", "imagenet"], "invalid choice: 'imagenet'"),
        (["--batch-size", "0"], "must be a positive integer, got 0"),
        (["--epochs", "-1"], "must be a positive integer, got -1"),
    ],
)
def test_bad_arguments_are_explained(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        train.build_parser().parse_args(argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_every_registered_model_is_a_choice():
    assert "tinyvgg" in list_models()
    assert train.build_parser().parse_args(["--model", list_models()[0]]).model
