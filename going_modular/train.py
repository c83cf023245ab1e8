"""Train a model from the command line: ``python -m going_modular.train --help``.

Each run writes into its own new folder ``<output-dir>/<YYYYmmdd-HHMMSS>-<id>/`` (``runs/``
by default): the model (``model.pth``), the per-epoch results (``results.json``, strict JSON
with the run's id, status, options and the SHA-256 of the ``model.pth`` they belong to, written
after it) and the loss and accuracy curves (``loss_curves.png``); until the run is complete, it
also holds the training checkpoint that ``--resume`` continues from (``checkpoint.pth``).
``<output-dir>/latest`` then points to the newest run that saved a model. No run deletes or
moves another run's files, and a lock refuses a second run into the same output folder while
one is running.

Bad numbers, an unusable output folder and a model that does not fit the images are refused
before any data is prepared: :mod:`going_modular.cli` checks the options once into a
:class:`~going_modular.cli.RunConfig`, the one thing :func:`run` receives. Ctrl-C, SIGTERM
(``kill``, ``timeout``, ``docker stop``, a scheduler) and SIGHUP (unless ``nohup`` ignores
it) save the last completed epoch, mark the run ``interrupted`` and exit with 130, 143 or
129; ``--resume RUN_DIR`` continues it from there, once the checkpoint, the model, the
recipe and the data are found to be the run's own (a refusal leaves the run folder as it
was). A signal after the last epoch lets the save finish: the run is complete. A run that
fails (a NaN or exploding loss, a corrupt image, a full disk) also saves its completed
epochs, is marked ``failed`` with the error, and exits with 1. A failing optional step (the
figure, MLflow) is only a warning. The run's files: :class:`going_modular.training.runs.Run`.

``--dataset fashion_mnist`` trains on Fashion-MNIST (28x28 grey), padded to 32x32 or repeated
to RGB only when the model needs it; ``--data-dir PATH`` trains on your own images (an
ImageFolder with ``train/`` and ``test/`` class folders).

``--recipe cct`` (or ``cct200``) trains with a Compact Transformers recipe from
:mod:`going_modular.data.augment`: its augmentations (on cifar10), MixUp/CutMix (cct), label
smoothing, AdamW (cct exempts biases and norms from weight decay) and warmup + cosine. The recipe
supplies the defaults of ``--epochs``, ``--batch-size``, ``--lr``, ``--weight-decay``,
``--warmup-epochs`` and ``--label-smoothing``; options given explicitly override them.
``--time-budget MINUTES`` stops training when the time is spent (see ``engine.fit``).

Launched by ``torchrun --nproc_per_node=N -m going_modular.train ...`` (or with ``--nnodes``
and ``--rdzv-endpoint`` on several machines), each process joins the process group
(:func:`~going_modular.training.distributed.from_environment`: NCCL on CUDA, gloo on a CPU)
and trains a replica on its shard of every global batch of ``N x --batch-size`` images;
the learning rate is used as given. Rank 0 alone locks the output folder, creates the run
folder (whose path it sends to the others) and writes the checkpoints, results, curves and
MLflow records, and prints; every rank restores a ``--resume``d checkpoint, which must come
from as many processes. A rank that dies or hangs ends the others after ``--dist-timeout``
seconds at most, each saying which rank it is; rank 0 keeps the completed epochs.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import matplotlib

matplotlib.use("Agg")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402
from torchvision import transforms  # noqa: E402

from going_modular import data_setup, engine, utils  # noqa: E402
from going_modular.book import settings  # noqa: E402
from going_modular.cli import (  # noqa: E402
    RunConfig,
    UsageError,
    build_parser,
    configure,
    locked_output_dir,
)
from going_modular.data import augment, datasets, gpu_augment  # noqa: E402
from going_modular.data.download import DownloadError  # noqa: E402
from going_modular.models import build_model  # noqa: E402
from going_modular.training import distributed, runs  # noqa: E402
from going_modular.training.checkpoint import (  # noqa: E402
    CHECKPOINT_NAME,
    CheckpointMismatchError,
    config_mismatches,
    training_config,
)
from going_modular.training.distributed import Distributed  # noqa: E402
from going_modular.training.divergence import TrainingDiverged  # noqa: E402
from going_modular.training.recipe import Recipe  # noqa: E402

__all__ = [
    "FAILURES",
    "ProcessGroupFailed",
    "TrainingFailed",
    "TrainingInterrupted",
    "main",
    "make_dataloaders",
    "run",
]


class ProcessGroupFailed(RuntimeError):
    """Under torchrun: another process ended, or did not answer within ``--dist-timeout``."""


# Errors that end a run with one line (the run marked failed and the CLI exiting with 1); any
# other error is a bug, whose traceback is worth more than a line.
FAILURES = (
    TrainingDiverged,
    CheckpointMismatchError,
    data_setup.ImageDecodeError,
    DownloadError,
    OSError,
    ProcessGroupFailed,
)
_T = TypeVar("_T")


class TrainingInterrupted(KeyboardInterrupt):
    """A stop (Ctrl-C, SIGTERM, SIGHUP) during a run, after its completed epochs were saved;
    ``exit_code`` is 128 + the signal's number."""

    def __init__(self, message: str, exit_code: int = 130):
        super().__init__(message)
        self.exit_code = exit_code


class TrainingFailed(RuntimeError):
    """An error stopped a run after its completed epochs were saved and it was marked
    ``failed``; the message says what happened and what was kept."""


# --- The data ------------------------------------------------------------------------------------


def _datasets(
    dataset: str | None,
    img_size: int,
    fallback: bool,
    train_transform: Callable,
    test_transform: Callable,
    channels: int | None,
    data_dir: Path | None,
) -> tuple[Dataset, Dataset]:
    """The training and test datasets of :func:`make_dataloaders`."""
    if data_dir is not None or dataset in ("food", "food20"):
        checked = data_dir is not None  # the CLI checked --data-dir before the run
        if data_dir is None:
            subset = "10%" if dataset == "food" else "20%"
            data_dir = datasets.get_food_data(subset, fallback=fallback).root
        return data_setup.image_splits(
            data_dir / "train",
            data_dir / "test",
            train_transform,
            test_transform,
            check_images=not checked,
        )
    getter = datasets.get_cifar10 if dataset == "cifar10" else datasets.get_mnist
    if dataset == "fashion_mnist":
        getter = functools.partial(
            datasets.get_fashion_mnist, pad_to_32=img_size == 32, rgb=channels == 3
        )
    return (
        getter(train=True, transform=train_transform, fallback=fallback),
        getter(train=False, transform=test_transform, fallback=fallback),
    )


def make_dataloaders(
    dataset: str | None,
    img_size: int,
    batch_size: int,
    num_workers: int | None,
    fallback: bool,
    *,
    train_transform=None,
    test_transform=None,
    channels: int | None = None,
    data_dir: Path | None = None,
) -> tuple[DataLoader, DataLoader, list[str]]:
    """Dataloaders (:func:`~going_modular.data_setup.train_test_loaders`) and class names
    for one of :data:`~going_modular.cli.DATASETS`, resized to ``img_size``.

    ``train_transform``/``test_transform`` replace the default (resize + to tensor) per split.
    Fashion-MNIST is padded (not resized) to a 32 ``img_size`` and repeated to RGB when
    ``channels`` is 3. With ``data_dir`` the images come from ``data_dir/train`` and
    ``data_dir/test`` (ImageFolder layout) instead of ``dataset``.
    """
    transform = transforms.Compose(
        [transforms.Resize((img_size, img_size)), transforms.ToTensor()]
    )
    train_data, test_data = _datasets(
        dataset,
        img_size,
        fallback,
        train_transform or transform,
        test_transform or transform,
        channels,
        data_dir,
    )
    workers = data_setup.default_num_workers() if num_workers is None else num_workers
    train_dl, test_dl = data_setup.train_test_loaders(
        train_data, test_data, batch_size, num_workers=workers
    )
    return train_dl, test_dl, list(train_data.classes)


def _device_loaders(config: RunConfig, img_size: int, device: torch.device):
    """cifar10 as uint8 tensors on ``device``, the recipe's augmentation batched there."""
    fallback = not config.no_fallback
    train_data = datasets.get_cifar10(train=True, fallback=fallback)
    test_data = datasets.get_cifar10(train=False, fallback=fallback)
    train_dl, test_dl = gpu_augment.recipe_loaders(
        train_data,
        test_data,
        config.cct,
        img_size,
        config.batch_size,
        device,
        augment.CIFAR10_MEAN,
        augment.CIFAR10_STD,
    )
    print(f"[INFO] Augmenting batches on {device} (--gpu-augment).")
    return train_dl, test_dl, list(train_data.classes)


def _loaders(
    config: RunConfig,
    img_size: int,
    channels: int,
    device: torch.device,
    one_process: bool = True,
):
    """The training and test loaders and the class names the config asks for (the
    augmentation on the device only in ``one_process``: a sampler cannot shard it)."""
    if one_process and config.augments_on(device.type):
        return _device_loaders(config, img_size, device)
    split_transforms = {}
    if config.cct is not None and config.dataset == "cifar10":
        split_transforms = {
            "train_transform": config.cct.train_transform(img_size),
            "test_transform": config.cct.test_transform(img_size),
        }
    return make_dataloaders(
        config.dataset,
        img_size,
        config.batch_size,
        config.num_workers,
        not config.no_fallback,
        channels=channels,
        data_dir=config.data_dir,
        **split_transforms,
    )


# --- The model -----------------------------------------------------------------------------------


def _first_fit(config: RunConfig) -> tuple[nn.Module, int, int, Exception | None]:
    """``config.model`` built for the first input shape it takes, checked with one forward
    pass of zeros: ``(model, img_size, channels, the first shape's error)``."""
    first_error = None
    for img_size, channels in config.inputs:
        try:
            model = build_model(
                config.model,
                num_classes=config.num_classes,
                img_size=img_size,
                in_channels=channels,
            )
            model.eval()
            with torch.no_grad():
                model(torch.zeros(2, channels, img_size, img_size))
            model.train()
        except (ValueError, RuntimeError) as error:
            first_error = first_error or error
            continue
        return model, img_size, channels, first_error
    size, channels = config.inputs[0]
    raise UsageError(
        f"--model {config.model} does not fit {config.data_label} "
        f"({channels} channel(s), {size}x{size} pixels): {first_error} "
        "Pass an --img-size the model takes, or choose another --model."
    )


def _fitting_model(config: RunConfig) -> tuple[nn.Module, int, int]:
    """The model for the first input shape it takes (saying how the images are changed
    for it): ``(model, img_size, channels)``, or UsageError."""
    model, img_size, channels, first_error = _first_fit(config)
    if (img_size, channels) != config.inputs[0]:
        size, grey = config.inputs[0]
        changes = [] if channels == grey else ["grey repeated to RGB"]
        if img_size != size:
            how = "padded" if (size, img_size) == (28, 32) else "resized"
            changes.insert(0, f"{how} to {img_size}x{img_size}")
        print(
            f"[INFO] {config.model} does not take {config.data_label}'s {size}x{size} "
            f"images as they are ({first_error}), so they are {' and '.join(changes)}."
        )
    batch_norms = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
    if config.batch_size == 1 and any(
        isinstance(m, batch_norms) for m in model.modules()
    ):
        raise UsageError(
            f"--model {config.model} has BatchNorm layers, which cannot train on a batch "
            "of one image (every batch would be skipped): use --batch-size 2 or more"
        )
    return model, img_size, channels


def _prepare_model(model: nn.Module, compile_model: bool) -> nn.Module:
    """The model the engine runs: channels-last weights when that is faster
    (:func:`~going_modular.utils.prefer_channels_last`) and, with ``--compile``, compiled
    (opt-in: on this book's CPU it was 0.87x as fast; the checkpoint keeps the uncompiled
    module, which shares its weights)."""
    utils.prefer_channels_last(model)
    if not compile_model:
        return model
    print("[INFO] torch.compile: the first steps compile the model and are slow.")
    return torch.compile(model)


# --- The recipe ----------------------------------------------------------------------------------


def _recipe(config: RunConfig, steps_per_epoch: int, num_classes: int) -> Recipe:
    """The engine's recipe for this run: AdamW with the options' learning rate, weight decay
    (biases and norms exempt), label smoothing and warmup + cosine, or the CCT recipe's
    (:meth:`~going_modular.training.cct_recipes.CCTRecipe.training_recipe`); with the
    options' length, time budget, gradient clipping and mixed precision, and a dry run's
    step caps (``BOOK_DRY_RUN=1``, :func:`~going_modular.book.settings.capped`)."""
    if config.cct is None:
        recipe = Recipe(
            lr=config.lr,
            weight_decay=config.weight_decay,
            label_smoothing=config.label_smoothing,
            schedule="warmup_cosine" if config.warmup_epochs > 0 else "constant",
            warmup_steps=config.warmup_epochs * steps_per_epoch,
            epochs=config.epochs,
        )
    else:
        recipe = config.cct.training_recipe(
            steps_per_epoch, config.epochs, num_classes=num_classes
        )
        print(f"[INFO] Recipe {config.cct.name}: {config.cct.source}")
    return settings.capped(
        recipe.replace(
            max_steps_per_epoch=config.max_steps,
            time_budget=None if config.time_budget is None else config.time_budget * 60,
            max_grad_norm=config.max_grad_norm,
            amp=config.amp,
        )
    )


# --- Several processes (torchrun) ---------------------------------------------------------------


def _is_main(ctx: Distributed | None) -> bool:
    """Whether this process writes the run: the only one, or rank 0."""
    return ctx is None or ctx.is_main


def _where(ctx: Distributed | None) -> str:
    """Which process says a line: "[rank r of N] " under torchrun, else nothing."""
    return "" if ctx is None else f"[rank {ctx.rank} of {ctx.world_size}] "


def _on_main(ctx: Distributed | None, make: Callable[[], _T]) -> _T:
    """``make()`` on rank 0 alone; its result, or the UsageError it raised, on every rank."""
    if ctx is None:
        return make()
    value, refused = None, None
    if ctx.is_main:
        try:
            value = make()
        except UsageError as error:
            refused = error
    value, refused = distributed.broadcast((value, refused), ctx)
    if refused is not None:
        raise refused
    return value


@contextlib.contextmanager
def _main_first(ctx: Distributed | None) -> Iterator[None]:
    """Rank 0 runs the block before the other ranks do (it may download the data)."""
    if not _is_main(ctx):
        distributed.barrier()
    yield
    if ctx is not None and ctx.is_main:
        distributed.barrier()


@contextlib.contextmanager
def _silenced(quiet: bool, stderr: bool = True) -> Iterator[None]:
    """Within the block, nothing printed on stdout (nor on stderr) when ``quiet``: under
    torchrun, the ranks other than 0 leave the reporting to rank 0."""
    if not quiet:
        yield
        return
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
        with contextlib.redirect_stderr(null) if stderr else contextlib.nullcontext():
            yield


def _lost_contact(error: BaseException, ctx: Distributed | None) -> bool:
    """Whether ``error`` is a collective that failed because another rank died or hung
    (NCCL raises a DistError; gloo a RuntimeError from its transport)."""
    if ctx is None:
        return False
    return isinstance(error, dist.DistError) or (
        isinstance(error, RuntimeError) and "gloo" in str(error)
    )


def _share_work(config: RunConfig, ctx: Distributed) -> None:
    """Say once how the processes share the work and which learning rate they use."""
    if config.gpu_augment == "on":
        raise UsageError(
            "--gpu-augment on augments whole batches on one device and cannot be "
            "sharded between torchrun's processes: use --gpu-augment off"
        )
    n, batch = ctx.world_size, config.batch_size
    print(
        f"[INFO] Distributed: {n} processes ({ctx.backend} on {ctx.device.type}), "
        f"{batch} images each per step: a global batch of {n * batch}. The learning "
        f"rate {config.lr:g} is used as given, not scaled (the linear-scaling rule "
        f"would use {n} x {config.lr:g} = {n * config.lr:g} for this {n}x larger batch)."
    )


# --- The run -------------------------------------------------------------------------------------


def _log_to_mlflow(config: RunConfig, record: dict, results: dict) -> None:
    """Log the options as parameters and each epoch's results with ``step=epoch``."""
    from going_modular.training import tracking

    with tracking.start_run(
        "cli", f"{config.model} {record['run_id']}", config.params()
    ):
        tracking.log_results(results)
    print(f"[INFO] Logged to MLflow; browse with: {tracking.ui_command()}")


def _stopped_elsewhere(error: BaseException, ctx: Distributed) -> BaseException:
    """What a rank other than 0 raises when a stop or a failure ends its part: nothing to
    say for a stop or a divergence (rank 0 keeps the run and reports), one line naming the
    rank for its own failure."""
    if isinstance(error, KeyboardInterrupt):
        return TrainingInterrupted("", runs.exit_code(error))
    if isinstance(error, TrainingDiverged):  # every rank stopped at the same step
        return TrainingFailed("")
    if isinstance(error, FAILURES):
        return TrainingFailed(f"{_where(ctx)}{runs.describe_error(error)}")
    return error


def _stopped(
    current: runs.Run, error: BaseException, ctx: Distributed | None = None
) -> BaseException:
    """Keep what ``error`` left of the run (:meth:`~going_modular.training.runs.Run.keep_stopped`,
    on rank 0); return what to raise instead: one line for a stop or a known failure (a lost
    process among them), else ``error``."""
    if _lost_contact(error, ctx):
        first_line = str(error).strip().splitlines()[0].split(". ")[0][:160]
        error = ProcessGroupFailed(
            f"{_where(ctx)}Lost contact with another process: it ended, or did not "
            f"answer within --dist-timeout ({first_line}). torchrun's summary names "
            "the rank that failed first."
        )
    together = ctx is not None and isinstance(error, TrainingDiverged)  # same step
    if not _is_main(ctx):
        if together:
            distributed.barrier()  # exit after rank 0 has kept the run
        return _stopped_elsewhere(error, ctx)
    # under torchrun, another rank's exit brings a SIGTERM: it waits for the keeping
    with runs.signals_held() if ctx is not None else contextlib.nullcontext():
        record, kept = current.keep_stopped(error)
    if together:
        distributed.barrier()
    epochs = record["epochs_completed"]
    launcher = (
        "python" if ctx is None else f"torchrun --nproc_per_node={ctx.world_size}"
    )
    resume = f" Continue with: {launcher} -m going_modular.train --resume {current.dir}"
    interrupted = isinstance(error, KeyboardInterrupt)
    if not epochs or (not interrupted and isinstance(error, TrainingDiverged)):
        resume = ""  # nothing to continue, or the same options would diverge again
    if interrupted:
        where = (
            f"during epoch {epochs + 1}" if epochs else "before an epoch was complete"
        )
        return TrainingInterrupted(
            f"Interrupted {where}: {kept}.{resume}", runs.exit_code(error)
        )
    if isinstance(error, FAILURES):
        return TrainingFailed(f"{record['error']} {kept[0].upper()}{kept[1:]}.{resume}")
    return error


@contextlib.contextmanager
def _kept_if_stopped(
    current: runs.Run, ctx: Distributed | None = None
) -> Iterator[None]:
    """Within the block, a stop or a failure keeps what the run has done (:func:`_stopped`)."""
    try:
        yield
    except BaseException as error:
        stop = _stopped(current, error, ctx)
        if stop is error:
            raise
        raise stop from None


def _new_run(
    config: RunConfig, model: nn.Module, img_size: int, ctx: Distributed | None
) -> runs.Run:
    """A new run folder (rank 0 creates it and sends its path to the others), its record
    written (status running)."""
    run_dir = _on_main(ctx, lambda: runs.new_run_dir(config.output_dir))
    record = {
        "run_id": run_dir.name,
        "model": config.model,
        "data": str(config.data_dir) if config.data_dir else config.dataset,
        "options": config.options,
        "status": "running",
    }
    current = runs.Run(run_dir, record, model, img_size)
    if _is_main(ctx):
        current.write_results(record, {})
    print(f"[INFO] Writing the run in {run_dir}")
    return current


def _prepare(
    config: RunConfig,
    current: runs.Run,
    channels: int,
    device: torch.device,
    ctx: Distributed | None,
) -> tuple[DataLoader, DataLoader, Recipe]:
    """The data (each rank's shard of the training set under torchrun) and the recipe; the
    run's record takes the data's class names and sizes."""
    with _main_first(ctx):
        train_dl, test_dl, class_names = _loaders(
            config, current.img_size, channels, device, one_process=ctx is None
        )
    if ctx is not None:
        train_dl = distributed.shard(train_dl, ctx, shuffle=True, seed=config.seed)
    current.class_names = class_names
    sizes = {"train_images": len(train_dl.dataset), "test_images": len(test_dl.dataset)}
    current.record = current.record | {"class_names": class_names} | sizes
    print(
        f"[INFO] Data: {config.data_label}, {sizes['train_images']} train and "
        f"{sizes['test_images']} test images of {len(class_names)} classes, given to "
        f"{config.model} as {channels}x{current.img_size}x{current.img_size}."
    )
    steps_per_epoch = min(len(train_dl), config.max_steps or math.inf)
    return train_dl, test_dl, _recipe(config, steps_per_epoch, len(class_names))


def _check_world_size(resumed, world_size: int) -> None:
    """Refuse to resume under another number of processes than the checkpoint's: its
    data order, random states and schedule are those of that many."""
    saved = resumed.checkpoint.get("config", {}).get("world_size", 1)
    if saved != world_size:
        how = (
            "python -m going_modular.train"
            if saved == 1
            else f"torchrun --nproc_per_node={saved} -m going_modular.train (or "
            f"--nnodes x --nproc_per_node = {saved} processes)"
        )
        raise UsageError(
            f"--resume {resumed.run_dir}: that run was trained by {saved} process(es) "
            f"and this one has {world_size}. Resume it as it ran: {how} --resume "
            f"{resumed.run_dir}"
        )


def _check_resumable(
    config: RunConfig,
    current: runs.Run,
    train_dl: DataLoader,
    recipe: Recipe,
    world_size: int,
) -> None:
    """Refuse (UsageError, before anything is written) a checkpoint that another model,
    recipe, data or number of processes made: it is not this run's to continue."""
    _check_world_size(config.resumed, world_size)
    optimizer = recipe.build_optimizer(current.model)
    per_epoch = min(len(train_dl), recipe.max_steps_per_epoch or math.inf)
    scheduler = recipe.build_schedule(optimizer, recipe.epochs * per_epoch)
    ours = training_config(
        current.model, recipe, recipe.epochs, optimizer, scheduler, world_size
    )
    problems = config_mismatches(config.resumed.checkpoint.get("config", {}), ours)
    saved = config.resumed.record  # runs from before it recorded the data: not compared
    data = [k for k in ("class_names", "train_images", "test_images") if k in saved]
    problems += config_mismatches(saved, {k: current.record[k] for k in data})
    if problems:
        raise UsageError(
            f"--resume {current.dir}: its {CHECKPOINT_NAME} does not belong to this run "
            f"({'; '.join(problems)}). Nothing was changed: put the run's own "
            f"{CHECKPOINT_NAME} and data back, or start a new run"
        )


def _resumed_run(
    config: RunConfig,
    model: nn.Module,
    img_size: int,
    channels: int,
    device: torch.device,
    ctx: Distributed | None,
) -> tuple[runs.Run, DataLoader, DataLoader, Recipe]:
    """The run ``--resume`` continues, its data and recipe checked against its checkpoint
    before its record is written (status running)."""
    resumed = config.resumed
    current = runs.Run(resumed.run_dir, dict(resumed.record), model, img_size)
    train_dl, test_dl, recipe = _prepare(config, current, channels, device, ctx)
    world_size = 1 if ctx is None else ctx.world_size
    _check_resumable(config, current, train_dl, recipe, world_size)
    current.record = current.record | {"status": "running"}
    if _is_main(ctx):
        current.write_results(current.record, resumed.results)
    print(f"[INFO] Continuing the run in {current.dir}")
    return current, train_dl, test_dl, recipe


def _finish_after(epochs: int, stops: runs.StopSignals) -> Callable[[int, dict], bool]:
    """A callback of :func:`~going_modular.engine.fit`: after the last epoch, a signal
    waits for the save (:meth:`~going_modular.training.runs.StopSignals.finish`)."""

    def after_epoch(epoch: int, results: dict) -> bool:
        if epoch >= epochs:
            stops.finish()
        return False  # never stops training early

    return after_epoch


def _save(
    config: RunConfig,
    current: runs.Run,
    results: dict,
    stops: runs.StopSignals,
    ctx: Distributed | None,
) -> None:
    """Save the run complete (rank 0), then the optional steps; a signal meanwhile waits."""
    stops.finish()
    if not _is_main(ctx):
        return
    record = current.record | {
        "status": "complete",
        "epochs_completed": len(results["test_acc"]),
    }
    with _kept_if_stopped(current):
        current.save(record, results)
    runs.optional_step(  # complete: nothing left to resume
        "Removing checkpoint.pth",
        lambda: (current.dir / CHECKPOINT_NAME).unlink(missing_ok=True),
    )
    log = functools.partial(_log_to_mlflow, config) if config.mlflow else None
    current.finish(record, results, log)
    print(f"[INFO] Saved the run to {current.dir}")
    if stops.received is not None:
        name = signal.Signals(stops.received).name
        print(f"[INFO] {name} came after the last epoch: the run is complete.")


def run(
    config: RunConfig,
    stops: runs.StopSignals | None = None,
    ctx: Distributed | None = None,
) -> dict[str, list[float]]:
    """Train as ``config`` says into a new run folder (or continue ``config.resumed``) and
    write the model, results and curves there: model, lock, data, recipe, fit, save. With
    ``ctx`` (torchrun), this process is one rank of a distributed run (see the module).

    Raises UsageError before anything is written when the model or a resumed run's
    checkpoint does not fit, TrainingInterrupted after saving the completed epochs on
    Ctrl-C, SIGTERM or SIGHUP (``stops``: their handler, see
    :func:`~going_modular.training.runs.stop_signals`), and TrainingFailed after saving them
    when training fails (e.g. the loss diverges).
    """
    stops = stops or runs.StopSignals()
    utils.set_seeds(config.seed)
    model, img_size, channels = _fitting_model(config)
    device = utils.get_device() if ctx is None else ctx.device
    if ctx is not None:
        _share_work(config, ctx)
    with contextlib.ExitStack() as held:
        _on_main(ctx, lambda: held.enter_context(locked_output_dir(config.output_dir)))
        if config.resumed is None:
            current = _new_run(config, model, img_size, ctx)
            with _kept_if_stopped(current, ctx):
                train_dl, test_dl, recipe = _prepare(
                    config, current, channels, device, ctx
                )
        else:
            current, train_dl, test_dl, recipe = _resumed_run(
                config, model, img_size, channels, device, ctx
            )
        with _kept_if_stopped(current, ctx):
            results = engine.fit(
                _prepare_model(model, config.compile),
                train_dl,
                test_dl,
                recipe,
                device=device,
                checkpoint_dir=current.dir,
                callbacks=[_finish_after(recipe.epochs, stops)],
                distributed=ctx,
            )
        _save(config, current, results, stops, ctx)
        return results


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``python -m going_modular.train`` and the ``vit-train`` command.

    Exits with 2 on bad options, 1 when training fails (e.g. a NaN loss) and 128 + the
    signal's number when stopped (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP), each with a
    one-line message instead of a traceback. ``BOOK_OFFLINE=1`` keeps the data offline.
    Under torchrun, bad options are reported by rank 0 alone (every rank exits with 2).
    """
    settings.apply_to_library()
    speaks = os.environ.get("RANK", "0") == "0"  # torchrun's rank 0, or no torchrun
    parser = build_parser()
    with _silenced(not speaks):
        args = parser.parse_args(argv)
    try:
        ctx = distributed.from_environment(args.dist_timeout)
        with _silenced(not speaks, stderr=False), runs.stop_signals() as stops:
            run(configure(args), stops, ctx)
    except UsageError as error:
        with _silenced(not speaks):
            parser.error(str(error))
    except TrainingInterrupted as interrupted:
        if str(interrupted):
            print(interrupted, file=sys.stderr)
        raise SystemExit(interrupted.exit_code) from None
    except KeyboardInterrupt as interrupt:
        if speaks:
            print(
                "Interrupted before training started; nothing was trained.",
                file=sys.stderr,
            )
        raise SystemExit(runs.exit_code(interrupt)) from None
    except (
        TrainingFailed,
        DownloadError,
        FileNotFoundError,
        data_setup.ImageDecodeError,
    ) as error:
        if str(error):
            print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    finally:
        distributed.shutdown()


if __name__ == "__main__":
    main()
