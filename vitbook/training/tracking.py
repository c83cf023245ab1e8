"""Experiment tracking with MLflow, embedded: runs go to a SQLite file inside the project.

Every run logs its parameters once and its metrics once per epoch with ``step=epoch``;
the chapters then read the runs back to draw their plots::

    with start_run("ch12-experiment-1", "vit lr=5e-4", params) as run:
        fit_logged(model, train_loader, test_loader, Recipe(lr=5e-4, epochs=3))
    runs = read_runs("ch12-experiment-1")                 # one row per run
    curves = metric_histories(runs, ["test_acc"])         # one row per (run, epoch)

The store is ``sqlite:///<project>/runs/mlflow.db`` (``runs/`` is not committed), or the
URI given to :func:`set_tracking_uri` (the book passes its ``BOOK_MLFLOW_URI``). :func:`ui_command` gives the command that opens MLflow's
web UI on it. MLflow's usage telemetry is switched off, since the book runs offline.
MLflow is the ``tracking`` extra (``pip install "vit-from-scratch[tracking]"``), imported
on first use: this module imports without it, and :func:`require_mlflow` says what to run.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pandas as pd
import torch
from torch import nn

from vitbook.data.paths import project_root
from vitbook.training.divergence import TrainingDiverged
from vitbook.training.loop import Callback, fit
from vitbook.training.recipe import Recipe

if TYPE_CHECKING:
    from mlflow.entities import Run

__all__ = [
    "INSTALL_HINT",
    "default_store",
    "fit_logged",
    "log_epoch",
    "log_epoch_end",
    "log_results",
    "metric_histories",
    "read_runs",
    "require_mlflow",
    "set_tracking_uri",
    "start_run",
    "tracking_uri",
    "ui_command",
    "use_experiment",
]

_state: dict[str, str | None] = {"uri": None}
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


def set_tracking_uri(uri: str | None) -> str | None:
    """Log to the MLflow store at ``uri`` from now on (None or "": the default store);
    return the URI set before (None: the default), so that a caller can put it back."""
    previous, _state["uri"] = _state["uri"], uri or None
    return previous


def tracking_uri() -> str:
    """The URI set by :func:`set_tracking_uri`, else ``sqlite:///`` + :func:`default_store`."""
    return _state["uri"] or f"sqlite:///{default_store()}"


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
    """Log per-epoch lists (as :func:`~vitbook.training.loop.fit` returns) with ``step`` = epoch number."""
    columns = {k: list(v) for k, v in results.items()}
    epochs = len(next(iter(columns.values()), []))
    if any(len(v) != epochs for v in columns.values()):
        raise ValueError("Every metric needs one value per epoch.")
    for i in range(epochs):
        log_epoch({k: v[i] for k, v in columns.items()}, first_epoch + i)


def log_epoch_end(epoch: int, results: Mapping[str, Sequence[float]]) -> None:
    """A :func:`~vitbook.training.loop.fit` callback: log the epoch's values (the last of
    each list in ``results``) to the active run, with ``step=epoch``."""
    log_epoch({k: v[-1] for k, v in results.items()}, epoch)


def fit_logged(
    model: nn.Module,
    train_data: Iterable,
    test_data: Iterable,
    recipe: Recipe,
    *,
    device: torch.device | str | None = None,
    callbacks: Sequence[Callback] = (),
    progress: bool = True,
) -> dict[str, list[float]]:
    """:func:`~vitbook.training.loop.fit` in the active MLflow run, logging every epoch.

    :func:`log_epoch_end` is added to ``callbacks``, so each epoch's losses, accuracies,
    steps and seconds (training and testing apart) are logged with ``step=epoch``. A run
    whose loss diverges (:class:`~vitbook.training.divergence.TrainingDiverged`) stops there: the
    run gets the tag ``diverged`` (the epoch) and the history of the epochs before it is
    returned.
    """
    mlflow = require_mlflow()
    if mlflow.active_run() is None:
        raise RuntimeError(
            "fit_logged() logs to the active run: call it in start_run()."
        )
    try:
        return fit(
            model,
            train_data,
            test_data,
            recipe,
            device=device,
            callbacks=[*callbacks, log_epoch_end],
            progress=progress,
        )
    except TrainingDiverged as error:
        mlflow.set_tag("diverged", str(error.epoch))
        if progress:
            print(f"Stopped in epoch {error.epoch}: {error}")
        return error.results


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
