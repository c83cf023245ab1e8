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
before any data is prepared (:mod:`going_modular.cli`). Ctrl-C, SIGTERM (``kill``,
``timeout``, ``docker stop``, a scheduler) and SIGHUP save the last completed epoch, mark the
run ``interrupted`` and exit with 130, 143 or 129; ``--resume RUN_DIR`` continues it from
there. A run that fails (a NaN or exploding loss, a corrupt image, a full disk) also saves its
completed epochs, is marked ``failed`` with the error, and exits with 1. A failing optional
step (the figure, MLflow) is only a warning. The run's files: :class:`going_modular.runs.Run`.

``--dataset fashion_mnist`` trains on Fashion-MNIST (28x28 grey), padded to 32x32 or repeated
to RGB only when the model needs it; ``--data-dir PATH`` trains on your own images (an
ImageFolder with ``train/`` and ``test/`` class folders).

``--recipe cct`` (or ``cct200``) trains with a Compact Transformers recipe from
:mod:`going_modular.augment`: its augmentations (on cifar10), MixUp/CutMix (cct), label
smoothing, AdamW (cct exempts biases and norms from weight decay) and warmup + cosine. The recipe
supplies the defaults of ``--epochs``, ``--batch-size``, ``--lr``, ``--weight-decay``,
``--warmup-epochs`` and ``--label-smoothing``; options given explicitly override them.
``--time-budget MINUTES`` stops training when the time is spent (see ``engine.fit``).
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402
from torchvision import transforms  # noqa: E402

from going_modular import data_setup, engine, utils
from going_modular.cli import (  # noqa: E402
    UsageError,
    build_parser,
    check_options,
    data_label,
    gpu_augment_applies,
    input_candidates,
    locked_output_dir,
    options_given,
    resolve_recipe,
    resume_from,
)
from going_modular.data import augment, datasets, gpu_augment
from going_modular.data.download import DownloadError  # noqa: E402
from going_modular.models import build_model  # noqa: E402
from going_modular.training import cct_recipes, runs
from going_modular.training.checkpoint import CHECKPOINT_NAME, CheckpointMismatchError  # noqa: E402
from going_modular.training.divergence import TrainingDiverged  # noqa: E402
from going_modular.training.recipe import Recipe  # noqa: E402

__all__ = [
    "FAILURES",
    "TrainingFailed",
    "TrainingInterrupted",
    "main",
    "make_dataloaders",
    "run",
]

# Errors that end a run with one line (the run marked failed and the CLI exiting with 1); any
# other error is a bug, whose traceback is worth more than a line.
FAILURES = (
    TrainingDiverged,
    CheckpointMismatchError,
    data_setup.ImageDecodeError,
    DownloadError,
    OSError,
)


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


def make_dataloaders(
    dataset: str,
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
    """Dataloaders and class names for one of :data:`~going_modular.cli.DATASETS`, resized
    to ``img_size``.

    ``train_transform``/``test_transform`` replace the default (resize + to tensor) per split.
    Fashion-MNIST is padded (not resized) to a 32 ``img_size`` and repeated to RGB when
    ``channels`` is 3. With ``data_dir`` the images come from ``data_dir/train`` and
    ``data_dir/test`` (ImageFolder layout) instead of ``dataset``.
    """
    transform = transforms.Compose(
        [transforms.Resize((img_size, img_size)), transforms.ToTensor()]
    )
    train_transform = train_transform or transform
    test_transform = test_transform or transform
    if data_dir is not None or dataset in ("food", "food20"):
        checked = data_dir is not None  # the CLI checked --data-dir before the run
        if data_dir is None:
            subset = "10%" if dataset == "food" else "20%"
            data_dir = datasets.get_food_data(subset, fallback=fallback).root
        return data_setup.create_dataloaders(
            data_dir / "train",
            data_dir / "test",
            train_transform,
            batch_size,
            num_workers,
            test_transform=test_transform,
            check_images=not checked,
        )
    getter = datasets.get_cifar10 if dataset == "cifar10" else datasets.get_mnist
    if dataset == "fashion_mnist":
        getter = functools.partial(
            datasets.get_fashion_mnist, pad_to_32=img_size == 32, rgb=channels == 3
        )
    train_data = getter(train=True, transform=train_transform, fallback=fallback)
    test_data = getter(train=False, transform=test_transform, fallback=fallback)
    workers = data_setup.default_num_workers() if num_workers is None else num_workers
    train_dl, test_dl = data_setup.train_test_loaders(
        train_data, test_data, batch_size, num_workers=workers
    )
    return train_dl, test_dl, list(train_data.classes)


def _device_loaders(args, recipe, img_size: int, device: torch.device):
    """cifar10 as uint8 tensors on ``device``, the recipe's augmentation batched there."""
    fallback = not args.no_fallback
    train_data = datasets.get_cifar10(train=True, fallback=fallback)
    test_data = datasets.get_cifar10(train=False, fallback=fallback)
    train_dl, test_dl = gpu_augment.recipe_loaders(
        train_data,
        test_data,
        recipe,
        img_size,
        args.batch_size,
        device,
        augment.CIFAR10_MEAN,
        augment.CIFAR10_STD,
    )
    print(f"[INFO] Augmenting batches on {device} (--gpu-augment).")
    return train_dl, test_dl, list(train_data.classes)


def _loaders(args, recipe, img_size: int, channels: int, device: torch.device):
    """The training and test loaders and the class names the options ask for."""
    on = args.gpu_augment == "on" or (
        args.gpu_augment == "auto" and device.type == "cuda"
    )
    if on and gpu_augment_applies(args, recipe):
        return _device_loaders(args, recipe, img_size, device)
    split_transforms = {}
    if recipe is not None and args.dataset == "cifar10":
        split_transforms = {
            "train_transform": recipe.train_transform(img_size),
            "test_transform": recipe.test_transform(img_size),
        }
    return make_dataloaders(
        args.dataset,
        img_size,
        args.batch_size,
        args.num_workers,
        not args.no_fallback,
        channels=channels,
        data_dir=args.data_dir,
        **split_transforms,
    )


# --- The model -----------------------------------------------------------------------------------


def _fitting_model(args: argparse.Namespace) -> tuple[nn.Module, int, int]:
    """Build ``args.model`` for the first input shape it takes and check it with one
    forward pass of zeros; return ``(model, img_size, channels)`` or raise UsageError."""
    candidates, num_classes = input_candidates(args)
    first_error = None
    for img_size, channels in candidates:
        try:
            model = build_model(
                args.model,
                num_classes=num_classes,
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
        if (img_size, channels) != candidates[0]:
            size, grey = candidates[0]
            changes = [] if channels == grey else ["grey repeated to RGB"]
            if img_size != size:
                how = "padded" if (size, img_size) == (28, 32) else "resized"
                changes.insert(0, f"{how} to {img_size}x{img_size}")
            print(
                f"[INFO] {args.model} does not take {data_label(args)}'s {size}x{size} "
                f"images as they are ({first_error}), so they are {' and '.join(changes)}."
            )
        return model, img_size, channels
    size, channels = candidates[0]
    raise UsageError(
        f"--model {args.model} does not fit {data_label(args)} "
        f"({channels} channel(s), {size}x{size} pixels): {first_error} "
        "Pass an --img-size the model takes, or choose another --model."
    )


def _prepare_model(model: nn.Module, args: argparse.Namespace) -> nn.Module:
    """The model the engine runs: channels-last weights when that is faster
    (:func:`~going_modular.utils.prefer_channels_last`) and, with ``--compile``, compiled
    (opt-in: on this book's CPU it was 0.87x as fast; the checkpoint keeps the uncompiled
    module, which shares its weights)."""
    utils.prefer_channels_last(model)
    if not args.compile:
        return model
    print("[INFO] torch.compile: the first steps compile the model and are slow.")
    return torch.compile(model)


# --- The run -------------------------------------------------------------------------------------


def _recipe(
    args: argparse.Namespace,
    cct: cct_recipes.CCTRecipe | None,
    steps_per_epoch: int,
    num_classes: int,
) -> Recipe:
    """The engine's recipe for this run: AdamW with the options' learning rate, weight decay
    (biases and norms exempt), label smoothing and warmup + cosine, or the CCT recipe's
    (:meth:`~going_modular.cct_recipes.CCTRecipe.training_recipe`); with the options' length,
    time budget, gradient clipping and mixed precision."""
    if cct is None:
        recipe = Recipe(
            lr=args.lr,
            weight_decay=args.weight_decay,
            label_smoothing=args.label_smoothing,
            schedule="warmup_cosine" if args.warmup_epochs > 0 else "constant",
            warmup_steps=args.warmup_epochs * steps_per_epoch,
            epochs=args.epochs,
        )
    else:
        recipe = cct.training_recipe(
            steps_per_epoch, args.epochs, num_classes=num_classes
        )
        print(f"[INFO] Recipe {cct.name}: {cct.source}")
    return recipe.replace(
        max_steps_per_epoch=args.max_steps,
        time_budget=None if args.time_budget is None else args.time_budget * 60,
        max_grad_norm=args.max_grad_norm,
        amp=args.amp,
    )


def _train(
    args: argparse.Namespace,
    cct: cct_recipes.CCTRecipe | None,
    channels: int,
    current: runs.Run,
) -> dict[str, list[float]]:
    """Prepare the data and the recipe, then train ``current.model`` (checkpointing each
    epoch into the run's folder)."""
    model, img_size, device = current.model, current.img_size, utils.get_device()
    train_dl, test_dl, class_names = _loaders(args, cct, img_size, channels, device)
    current.class_names = class_names
    print(
        f"[INFO] Data: {data_label(args)}, {len(train_dl.dataset)} train and "
        f"{len(test_dl.dataset)} test images of {len(class_names)} classes, given to "
        f"{args.model} as {channels}x{img_size}x{img_size}."
    )
    steps_per_epoch = min(len(train_dl), args.max_steps or math.inf)
    recipe = _recipe(args, cct, steps_per_epoch, len(class_names))
    return engine.fit(
        _prepare_model(model, args),
        train_dl,
        test_dl,
        recipe,
        device=device,
        checkpoint_dir=current.dir,
    )


def _log_to_mlflow(args: argparse.Namespace, record: dict, results: dict) -> None:
    """Log the options as parameters and each epoch's results with ``step=epoch``."""
    from going_modular.training import tracking

    params = {k: v for k, v in vars(args).items() if v is not None}
    with tracking.start_run("cli", f"{args.model} {record['run_id']}", params):
        tracking.log_results(results)
    print(f"[INFO] Logged to MLflow; browse with: {tracking.ui_command()}")


def _stopped(current: runs.Run, error: BaseException) -> BaseException:
    """Keep what ``error`` left of the run (:meth:`~going_modular.runs.Run.keep_stopped`);
    return what to raise instead: one line for a stop or a known failure, else ``error``."""
    record, kept = current.keep_stopped(error)
    epochs = record["epochs_completed"]
    resume = f" Continue with: python -m going_modular.train --resume {current.dir}"
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


def _train_and_save(
    args: argparse.Namespace,
    cct: cct_recipes.CCTRecipe | None,
    channels: int,
    current: runs.Run,
) -> dict[str, list[float]]:
    """Train, then save the run complete; or keep what a stop or a failure left."""
    try:
        results = _train(args, cct, channels, current)
        record = current.record | {
            "status": "complete",
            "epochs_completed": len(results["test_acc"]),
        }
        current.save(record, results)
    except BaseException as error:
        stop = _stopped(current, error)
        if stop is error:
            raise
        raise stop from None
    runs.optional_step(  # complete: nothing left to resume
        "Removing checkpoint.pth",
        lambda: (current.dir / CHECKPOINT_NAME).unlink(missing_ok=True),
    )
    log = functools.partial(_log_to_mlflow, args) if args.mlflow else None
    current.finish(record, results, log)
    print(f"[INFO] Saved the run to {current.dir}")
    return results


def run(args: argparse.Namespace) -> dict[str, list[float]]:
    """Train as ``args`` say into a new run folder (or continue ``args.resume``) and write
    the model, results and curves there.

    Raises UsageError before any data is prepared when the options cannot work,
    TrainingInterrupted after saving the completed epochs on Ctrl-C, SIGTERM or SIGHUP, and
    TrainingFailed after saving them when training fails (e.g. the loss diverges).
    """
    resume_dir, record, results = None, {}, {}
    if args.resume is not None:
        resume_dir, record, results = resume_from(args)
    options = options_given(args)
    cct = resolve_recipe(args)
    check_options(args, cct)
    utils.set_seeds(args.seed)
    model, img_size, channels = _fitting_model(args)
    with locked_output_dir(args.output_dir):
        run_dir = resume_dir or runs.new_run_dir(args.output_dir)
        record = record or {
            "run_id": run_dir.name,
            "model": args.model,
            "data": str(args.data_dir) if args.data_dir else args.dataset,
            "options": options,
        }
        record = record | {"status": "running"}
        current = runs.Run(run_dir, record, model, img_size)
        current.write_results(record, results)
        print(
            f"[INFO] {'Continuing' if resume_dir else 'Writing'} the run in {run_dir}"
        )
        return _train_and_save(args, cct, channels, current)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``python -m going_modular.train`` and the ``vit-train`` command.

    Exits with 2 on bad options, 1 when training fails (e.g. a NaN loss) and 128 + the
    signal's number when stopped (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP), each with a
    one-line message instead of a traceback.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with runs.stop_signals():
            run(args)
    except UsageError as error:
        parser.error(str(error))
    except TrainingInterrupted as interrupted:
        print(interrupted, file=sys.stderr)
        raise SystemExit(interrupted.exit_code) from None
    except KeyboardInterrupt as interrupt:
        print(
            "Interrupted before training started; nothing was trained.", file=sys.stderr
        )
        raise SystemExit(runs.exit_code(interrupt)) from None
    except (
        TrainingFailed,
        DownloadError,
        FileNotFoundError,
        data_setup.ImageDecodeError,
    ) as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
