"""Seeds and checkpoints."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from going_modular import utils
from going_modular.models import build_model


def test_set_seeds_makes_every_generator_repeat():
    def draw():
        return random.random(), np.random.rand(), torch.rand(1).item()

    utils.set_seeds(7)
    first = draw()
    utils.set_seeds(7)
    assert draw() == first


def test_checkpoint_round_trip_gives_identical_predictions(tmp_path):
    model = build_model("tinyvgg", num_classes=3, img_size=32).eval()
    x = torch.randn(4, 3, 32, 32)
    path = utils.save_model(model, tmp_path, "tiny.pth", class_names=["a", "b", "c"])
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "tiny.pth"
    ]  # no temporary file left
    rebuilt = utils.load_model(path).eval()
    assert torch.equal(model(x), rebuilt(x))
    into = build_model("tinyvgg", num_classes=3, img_size=32)
    assert torch.equal(model(x), utils.load_model(path, into).eval()(x))
    assert utils.load_checkpoint(path)["class_names"] == ["a", "b", "c"]


def test_checkpoint_that_does_not_fit_the_model(tmp_path):
    path = utils.save_model(build_model("tinyvgg", num_classes=3), tmp_path, "m.pt")
    with pytest.raises(
        ValueError, match="(?s)does not match this model.*same architecture"
    ):
        utils.load_model(path, build_model("tinyvgg", num_classes=5))


def test_bad_names_and_files(tmp_path):
    with pytest.raises(ValueError, match=r"\.pt' or '\.pth'"):
        utils.save_model(torch.nn.Linear(1, 1), tmp_path, "model.bin")
    with pytest.raises(FileNotFoundError, match="No checkpoint"):
        utils.load_model(tmp_path / "missing.pth")
    torch.save({"weights": torch.ones(1)}, tmp_path / "foreign.pth")
    with pytest.raises(ValueError, match="not a checkpoint written by"):
        utils.load_model(tmp_path / "foreign.pth")
    plain = utils.save_model(torch.nn.Linear(1, 1), tmp_path, "plain.pth")
    with pytest.raises(ValueError, match="pass the model to load into"):
        utils.load_model(plain)


def test_unknown_model_name():
    with pytest.raises(
        ValueError, match="Unknown model 'resnet9000'. Choose one of: .*tinyvgg"
    ):
        build_model("resnet9000")


def test_get_device():
    assert utils.get_device().type in {"cpu", "cuda"}
