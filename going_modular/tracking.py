"""Experiment tracking with MLflow, embedded: runs go to a SQLite file inside the project.

Every run logs its parameters once and its metrics once per epoch with ``step=epoch``;
the chapters then read the runs back to draw their plots::

    with start_run("ch12-experiment-1", "vit lr=5e-4", params) as run:
        fit_logged(model, train_loader, test_loader, optimizer, epochs=3)
    runs = read_runs("ch12-experiment-1")                 # one row per run
    curves = metric_histories(runs, ["test_acc"])         # one row per (run, epoch)

The store is ``sqlite:///<project>/runs/mlflow.db`` (``runs/`` is not committed), or
``$BOOK_MLFLOW_URI`` when set. :func:`ui_command` gives the command that opens MLflow's
web UI on it. MLflow's usage telemetry is switched off, since the book runs offline.
MLflow is the ``tracking`` extra (``pip install "vit-from-scratch[tracking]"``), imported
on first use: this module imports without it, and :func:`require_mlflow` says what to run.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pandas as pd
import torch
from torch import nn

from . import engine
from .paths import project_root

if TYPE_CHECKING:
    from mlflow.entities import Run

URI_VARIABLE = "BOOK_MLFLOW_URI"
INSTALL_HINT = (
    'MLflow and Ax are not installed: run  pip install "vit-from-scratch[tracking]"  '
    "(or, from a checkout,  pip install -e '.[tracking]')."
)


def require_mlflow() -> ModuleType:
    """``mlflow``, imported on first use (it is an extra); a clear ImportError if absent."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    try:
        import mlflow
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(INSTALL_HINT, name="mlflow") from error
    return mlflow


def default_store() -> Path:
    """The SQLite file of the default store: ``runs/mlflow.db`` in the checkout (or cwd)."""
    root = project_root()
    return (root if root is not None else Path.cwd()) / "runs" / "mlflow.db"


def tracking_uri() -> str:
    """``$BOOK_MLFLOW_URI`` if set, else ``sqlite:///`` + :func:`default_store`."""
    return os.environ.get(URI_VARIABLE) or f"sqlite:///{default_store()}"


def ui_command(uri: str | None = None) -> str:
    """The shell command that opens MLflow's web UI on the store (then browse port 5000)."""
    uri = uri or tracking_uri()
    root = project_root()
    if root is not None and uri == f"sqlite:///{default_store()}":
        uri = "sqlite:///runs/mlflow.db"  # from the project's root, as the README says
    return f"mlflow ui --backend-store-uri {uri}"


def _artifact_root(uri: str) -> str | None:
    """Artifacts next to a SQLite store (not in a stray ./mlruns of the current folder)."""
    if uri.startswith("sqlite:///"):
        return (Path(uri.removeprefix("sqlite:///")).parent / "artifacts").as_uri()
    return None


@contextlib.contextmanager
def _store_lock(uri: str) -> Iterator[None]:
    """Serialise the first creation of a SQLite store between processes (POSIX only):
    two notebooks creating the same new database at once would race its schema set-up."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    path = Path(uri.removeprefix("sqlite:///"))
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # Windows: no lock; one notebook at a time is fine there
        yield
        return
    with open(path.with_name(path.name + ".lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def use_experiment(name: str, uri: str | None = None) -> str:
    """Point MLflow at the store and at experiment ``name`` (created if new); return its id."""
    mlflow = require_mlflow()
    uri = uri or tracking_uri()
    with _store_lock(uri):
        mlflow.set_tracking_uri(uri)
        experiment = mlflow.get_experiment_by_name(name)
        if experiment is None:
            experiment_id = mlflow.create_experiment(
                name, artifact_location=_artifact_root(uri)
            )
        else:
            experiment_id = experiment.experiment_id
    mlflow.set_experiment(experiment_id=experiment_id)
    return experiment_id


@contextlib.contextmanager
def start_run(
    experiment: str,
    run_name: str,
    params: Mapping[str, Any] | None = None,
    tags: Mapping[str, str] | None = None,
    uri: str | None = None,
) -> Iterator[Run]:
    """A run of ``experiment`` with ``params`` logged; metrics logged inside go to it."""
    mlflow = require_mlflow()
    use_experiment(experiment, uri)
    with mlflow.start_run(run_name=run_name, tags=dict(tags or {})) as run:
        if params:
            mlflow.log_params({k: _loggable(v) for k, v in params.items()})
        yield run


def _loggable(value: Any) -> Any:
    return value if isinstance(value, (int, float, str, bool)) else str(value)


def log_epoch(metrics: Mapping[str, float], epoch: int) -> None:
    """Log one epoch's metrics to the active run, with ``step=epoch``."""
    mlflow = require_mlflow()
    mlflow.log_metrics({k: float(v) for k, v in metrics.items()}, step=epoch)


def log_results(results: Mapping[str, Iterable[float]], first_epoch: int = 1) -> None:
    """Log per-epoch lists (as :func:`engine.train` returns) with ``step`` = epoch number."""
    columns = {k: list(v) for k, v in results.items()}
    epochs = len(next(iter(columns.values()), []))
    if any(len(v) != epochs for v in columns.values()):
        raise ValueError("Every metric needs one value per epoch.")
    for i in range(epochs):
        log_epoch({k: v[i] for k, v in columns.items()}, first_epoch + i)


def fit_logged(
    model: nn.Module,
    train_loader: Iterable,
    test_loader: Iterable,
    optimizer: torch.optim.Optimizer,
    epochs: int,
    device: torch.device | str = "cpu",
    loss_fn: nn.Module | None = None,
    progress: bool = True,
) -> dict[str, list[float]]:
    """Train and test for ``epochs`` epochs, logging each epoch to the active MLflow run.

    Per epoch: ``train_loss``, ``train_acc``, ``test_loss``, ``test_acc`` and the seconds
    spent training (``train_seconds``) and testing (``test_seconds``) separately, so that
    speed can be compared phase by phase. Returns the same values as per-epoch lists.

    A run whose loss becomes NaN or infinite (the engine raises a ``FloatingPointError``)
    stops there: the run gets the tag ``diverged`` (the epoch) and the history ends with
    the last complete epoch.
    """
    mlflow = require_mlflow()
    if epochs <= 0:
        raise ValueError(f"epochs must be a positive integer, got {epochs}.")
    if mlflow.active_run() is None:
        raise RuntimeError(
            "fit_logged() logs to the active run: call it in start_run()."
        )
    loss_fn = loss_fn or nn.CrossEntropyLoss()
    model.to(device)
    history: dict[str, list[float]] = {}
    for epoch in range(1, epochs + 1):
        start = time.perf_counter()
        try:
            train_loss, train_acc = engine.train_step(
                model, train_loader, loss_fn, optimizer, device, progress=progress
            )
            middle = time.perf_counter()
            test_loss, test_acc = engine.test_step(
                model, test_loader, loss_fn, device, progress=progress
            )
        except FloatingPointError as error:
            mlflow.set_tag("diverged", str(epoch))
            if progress:
                print(f"Stopped in epoch {epoch}: {error}")
            break
        metrics = {
            "train_loss": train_loss,
            "train_acc": train_acc,
            "test_loss": test_loss,
            "test_acc": test_acc,
            "train_seconds": middle - start,
            "test_seconds": time.perf_counter() - middle,
        }
        log_epoch(metrics, epoch)
        for key, value in metrics.items():
            history.setdefault(key, []).append(value)
    return history


def read_runs(
    experiment: str, filter_string: str = "", uri: str | None = None
) -> pd.DataFrame:
    """The finished runs of ``experiment`` (one row each, ``params.*`` and the last
    ``metrics.*``), oldest first; empty if the experiment does not exist."""
    mlflow = require_mlflow()
    mlflow.set_tracking_uri(uri or tracking_uri())
    if mlflow.get_experiment_by_name(experiment) is None:
        return pd.DataFrame()
    runs = mlflow.search_runs(
        experiment_names=[experiment],
        filter_string=filter_string,
        order_by=["attributes.start_time ASC"],
    )
    return runs[runs["status"] == "FINISHED"].reset_index(drop=True)


def metric_histories(
    runs: pd.DataFrame, keys: Iterable[str], uri: str | None = None
) -> pd.DataFrame:
    """Every logged value of ``keys`` for ``runs``: columns run_id, key, step, value plus
    the runs' ``params.*`` columns, one row per (run, metric, step)."""
    mlflow = require_mlflow()
    client = mlflow.MlflowClient(uri or tracking_uri())
    params = [c for c in runs.columns if c.startswith("params.")]
    rows = []
    for _, run in runs.iterrows():
        for key in keys:
            for metric in client.get_metric_history(run["run_id"], key):
                rows.append(
                    {
                        "run_id": run["run_id"],
                        "key": key,
                        "step": metric.step,
                        "value": metric.value,
                        **{p: run[p] for p in params},
                    }
                )
    return pd.DataFrame(rows)
