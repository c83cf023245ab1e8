"""Tests for vitbook.training.tracking: a tiny run is logged to a temporary store and read back."""

from __future__ import annotations

import pytest
import torch

from vitbook.training import tracking
from vitbook.training.experiments import tensor_loaders
from vitbook.training.recipe import Recipe


@pytest.fixture
def store(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    previous = tracking.set_tracking_uri(uri)
    yield uri
    tracking.set_tracking_uri(previous)


def test_tracking_uri_and_ui_command(store):
    assert tracking.tracking_uri() == store
    assert tracking.ui_command() == f"mlflow ui --backend-store-uri {store}"
    assert tracking.set_tracking_uri(None) == store
    assert tracking.tracking_uri().endswith("runs/mlflow.db")
    assert (
        tracking.ui_command()
        == "mlflow ui --backend-store-uri sqlite:///runs/mlflow.db"
    )


def test_a_tiny_run_is_logged_and_read_back(store):
    torch.manual_seed(0)
    x, y = torch.randn(40, 1, 28, 28), torch.randint(0, 10, (40,))
    train, test = tensor_loaders((x, y), (x[:20], y[:20]), batch_size=20)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10))
    recipe = Recipe(optimizer=torch.optim.Adam, lr=1e-3, epochs=3)
    params = {"model": "vitbn", "lr": 1e-3, "batch_size": 20}
    with tracking.start_run("tiny", "vitbn lr=1e-3", params):
        history = tracking.fit_logged(model, train, test, recipe, progress=False)
    assert len(history["test_acc"]) == 3

    runs = tracking.read_runs("tiny")
    assert len(runs) == 1
    run = runs.iloc[0]
    assert run["params.model"] == "vitbn" and float(run["params.lr"]) == 1e-3
    assert run["metrics.test_acc"] == pytest.approx(history["test_acc"][-1])

    curves = tracking.metric_histories(runs, ["train_loss", "test_seconds"])
    loss = curves[curves.key == "train_loss"].sort_values("step")
    assert loss.step.tolist() == [1, 2, 3]
    assert loss.value.tolist() == pytest.approx(history["train_loss"])
    assert (curves[curves.key == "test_seconds"].value > 0).all()
    assert set(curves["params.model"]) == {"vitbn"}


def test_log_results_uses_epochs_as_steps(store):
    results = {"test_acc": [0.1, 0.5], "train_loss": [2.0, 1.0]}
    with tracking.start_run("results", "cli"):
        tracking.log_results(results)
    curves = tracking.metric_histories(tracking.read_runs("results"), ["test_acc"])
    assert sorted(zip(curves.step, curves.value)) == [(1, 0.1), (2, 0.5)]
    with pytest.raises(ValueError, match="one value per epoch"):
        with tracking.start_run("results", "bad"):
            tracking.log_results({"a": [1.0], "b": [1.0, 2.0]})


def test_fit_logged_needs_a_run(store):
    with pytest.raises(RuntimeError, match="start_run"):
        tracking.fit_logged(torch.nn.Linear(1, 1), [], [], Recipe())


def test_missing_experiment_reads_as_empty(store):
    assert tracking.read_runs("never-created").empty


def test_the_cli_logs_its_options_and_epochs(store):
    from vitbook.cli import build_parser, configure
    from vitbook.train import _log_to_mlflow

    args = build_parser().parse_args(["--model", "vitbn", "--lr", "0.01", "--mlflow"])
    config = configure(args)
    assert config.mlflow
    _log_to_mlflow(config, {"run_id": "r1"}, {"test_acc": [0.2, 0.4, 0.6]})
    runs = tracking.read_runs("cli")
    assert runs.loc[0, "params.model"] == "vitbn"
    assert float(runs.loc[0, "params.lr"]) == 0.01
    assert runs.loc[0, "metrics.test_acc"] == pytest.approx(0.6)


def test_a_diverging_run_is_tagged_and_stops(store):
    calls = []

    def poison_epoch_2(X, y):  # one batch per epoch: a NaN input in the second
        calls.append(1)
        return (X * float("nan") if len(calls) == 2 else X), y

    torch.manual_seed(0)
    x, y = torch.randn(20, 1, 28, 28), torch.randint(0, 10, (20,))
    train, test = tensor_loaders((x, y), (x, y), batch_size=20)
    recipe = Recipe(epochs=5, batch_transform=poison_epoch_2)
    with tracking.start_run("diverging", "nan"):
        history = tracking.fit_logged(
            torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10)),
            train,
            test,
            recipe,
            progress=False,
        )
    assert len(history["test_acc"]) == 1 and len(calls) == 2
    runs = tracking.read_runs("diverging")
    assert runs.loc[0, "tags.diverged"] == "2"
