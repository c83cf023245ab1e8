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
before any data is prepared. Ctrl-C, SIGTERM (``kill``, ``timeout``, ``docker stop``, a
scheduler) and SIGHUP save the last completed epoch, mark the run ``interrupted`` and exit with
130, 143 or 129; ``--resume RUN_DIR`` continues it from there. A run that fails (a NaN or
exploding loss, a corrupt image, a full disk) also saves its completed epochs, is marked
``failed`` with the error, and exits with 1. A failing optional step (the figure, MLflow) is
only a warning.

``--dataset fashion_mnist`` trains on Fashion-MNIST (28x28 grey), padded to 32x32 or repeated
to RGB only when the model needs it; ``--data-dir PATH`` trains on your own images (an
ImageFolder with ``train/`` and ``test/`` class folders).

``--recipe cct`` (or ``cct200``) trains with a Compact Transformers recipe from
:mod:`going_modular.augment`: its augmentations (on cifar10), MixUp/CutMix (cct), label
smoothing, AdamW (cct exempts biases and norms from weight decay) and warmup + cosine. The recipe
supplies the defaults of ``--epochs``, ``--batch-size``, ``--lr``, ``--weight-decay``,
``--warmup-epochs`` and ``--label-smoothing``; options given explicitly override them.
``--time-budget MINUTES`` stops training when the time is spent (see ``engine.train``).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402
from torchvision import transforms  # noqa: E402

from . import augment, data_setup, datasets, engine, gpu_augment, runs, utils  # noqa: E402
from .download import DownloadError  # noqa: E402
from .models import build_model, list_models  # noqa: E402
from .optim import param_groups_weight_decay, warmup_cosine_schedule  # noqa: E402
from .plots import plot_loss_curves  # noqa: E402

# Defaults of the options a recipe may supply (used without a recipe).
PLAIN_DEFAULTS = {
    "epochs": 5,
    "batch_size": 32,
    "lr": 1e-3,
    "weight_decay": 0.0,
    "warmup_epochs": 0.0,
    "label_smoothing": 0.0,
}

DATASETS = {
    # name -> (default image size, channels, classes)
    "food": (224, 3, 3),
    "food20": (224, 3, 3),
    "cifar10": (32, 3, 10),
    "mnist": (28, 1, 10),
    "fashion_mnist": (28, 1, 10),
}
# Fashion-MNIST sizes and channels tried in turn until the model takes one: native 28x28 grey,
# padded to 32x32 (e.g. patch size 16 or 32-pixel models), resized to 224, then the same in RGB.
FASHION_INPUTS = [(size, c) for c in (1, 3) for size in (28, 32, 224)]
# Options a resumed run may set anew; every other option is the run's own.
RESUME_MAY_CHANGE = ("time_budget", "num_workers")


class UsageError(ValueError):
    """Arguments that cannot work together; raised before any data is prepared."""


class TrainingInterrupted(KeyboardInterrupt):
    """A stop (Ctrl-C, SIGTERM, SIGHUP) during a run, after its completed epochs were saved;
    ``exit_code`` is 128 + the signal's number."""

    def __init__(self, message: str, exit_code: int = 130):
        super().__init__(message)
        self.exit_code = exit_code


class TrainingFailed(RuntimeError):
    """An error stopped a run after its completed epochs were saved and it was marked
    ``failed``; the message says what happened and what was kept."""


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = _finite(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _non_negative_float(text: str) -> float:
    value = _finite(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _seed(text: str) -> int:
    value = int(text)
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"must be in [0, 2**32), got {value}")
    return value


def _label_smoothing(text: str) -> float:
    value = _finite(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(
            f"must be at least 0 and below 1 (0.1 is usual), got {value}"
        )
    return value


def build_parser() -> argparse.ArgumentParser:
    """The CLI's arguments."""
    parser = argparse.ArgumentParser(
        prog="python -m going_modular.train",
        description="Train one of the book's models on one of its datasets.",
    )
    parser.add_argument(
        "--model",
        default="tinyvgg",
        choices=list_models(),
        metavar="NAME",
        help=f"model to build: {', '.join(list_models())}",
    )
    parser.add_argument(
        "--dataset",
        default=None,
        choices=sorted(DATASETS),
        help="food (pizza/steak/sushi 10%%, the default), food20 (20%%), cifar10, mnist or "
        "fashion_mnist (padded to 32x32 or made RGB only if the model needs it)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        metavar="PATH",
        help="train on your own images instead: PATH/train/<class>/*.jpg and "
        "PATH/test/<class>/*.jpg (resized to --img-size, default 224)",
    )
    parser.add_argument(
        "--recipe",
        default="none",
        choices=["none", *augment.RECIPES],
        help="none (plain training), cct (the authors' CIFAR config: RandAugment, MixUp/CutMix, "
        "random erasing, label smoothing, AdamW, warmup + cosine) or cct200 (the recipe of the "
        "reference's 200-epoch table: AutoAugment, label smoothing, AdamW, warmup + cosine)",
    )
    parser.add_argument(
        "--epochs", type=_positive_int, default=None, help="default: 5, or the recipe's"
    )
    parser.add_argument(
        "--batch-size",
        type=_positive_int,
        default=None,
        help="default: 32, or the recipe's",
    )
    parser.add_argument(
        "--lr",
        "--learning-rate",
        dest="lr",
        type=_positive_float,
        default=None,
        help="default: 1e-3, or the recipe's",
    )
    parser.add_argument(
        "--weight-decay",
        type=_non_negative_float,
        default=None,
        help="default: 0, or the recipe's",
    )
    parser.add_argument(
        "--warmup-epochs",
        type=_non_negative_float,
        default=None,
        help="linear warmup length; with it the LR then decays by a cosine (default: 0, or "
        "the recipe's, shortened in proportion when --epochs is below the recipe's)",
    )
    parser.add_argument(
        "--label-smoothing",
        type=_label_smoothing,
        default=None,
        help="in [0, 1); default: 0, or the recipe's",
    )
    parser.add_argument("--max-grad-norm", type=_positive_float, default=None)
    parser.add_argument(
        "--img-size",
        type=_positive_int,
        default=None,
        help="resize images to this size (default: the dataset's own)",
    )
    parser.add_argument(
        "--max-steps",
        type=_positive_int,
        default=None,
        help="cap on training batches per epoch, for quick runs",
    )
    parser.add_argument(
        "--amp",
        action="store_true",
        help="mixed precision (float16 on CUDA, bfloat16 on CPU)",
    )
    parser.add_argument(
        "--gpu-augment",
        choices=["auto", "on", "off"],
        default="auto",
        help="with --recipe on cifar10: augment batches on the training device "
        "(going_modular.gpu_augment) instead of each image in loader workers; auto: on "
        "with CUDA",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the model (minutes to start; for long GPU runs)",
    )
    parser.add_argument(
        "--time-budget",
        type=_positive_float,
        default=None,
        metavar="MINUTES",
        help="stop training once this many minutes are spent (the last epoch is still tested)",
    )
    parser.add_argument("--num-workers", type=_non_negative_int, default=None)
    parser.add_argument("--seed", type=_seed, default=42)
    parser.add_argument(
        "--no-fallback",
        action="store_true",
        help="fail instead of using the offline stand-in when data can't be fetched",
    )
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=Path("runs"),
        help="each run gets a new folder in it, <timestamp>-<id>/; OUTPUT_DIR/latest "
        "points to the newest (default: runs)",
    )
    parser.add_argument(
        "--resume",
        type=Path,
        default=None,
        metavar="RUN_DIR",
        help="continue an interrupted or failed run (e.g. runs/latest) from its last "
        "completed epoch, with its own options (only --time-budget and --num-workers may "
        "be given anew)",
    )
    parser.add_argument(
        "--mlflow",
        action="store_true",
        help="also log the options and per-epoch results to the MLflow store "
        "(runs/mlflow.db, or $BOOK_MLFLOW_URI), experiment 'cli'",
    )
    return parser


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
    """Dataloaders and class names for one of :data:`DATASETS`, resized to ``img_size``.

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
        checked = (
            data_dir is not None
        )  # the CLI checked --data-dir before the run began
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
    return (
        DataLoader(train_data, shuffle=True, **_loader_options(batch_size, workers)),
        DataLoader(test_data, shuffle=False, **_loader_options(batch_size, workers)),
        list(train_data.classes),
    )


def _resolve_recipe(args: argparse.Namespace) -> augment.CCTRecipe | None:
    """Fill the options left unset from the recipe (or the plain defaults); return the recipe
    with the explicitly given values applied, or None without a recipe."""
    recipe = augment.RECIPES.get(args.recipe)
    explicit = {
        key: getattr(args, key)
        for key in PLAIN_DEFAULTS
        if getattr(args, key) is not None
    }
    for key, plain in PLAIN_DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, getattr(recipe, key) if recipe else plain)
    if recipe is None:
        return None
    explicit.pop(
        "epochs", None
    )  # the run's length; the recipe's own epochs set its proportions
    try:
        return recipe.replace(**explicit)
    except ValueError as error:
        flags = ", ".join(f"--{key.replace('_', '-')}" for key in explicit)
        raise UsageError(f"--recipe {args.recipe} with {flags}: {error}") from None


def _loader_options(batch_size: int, workers: int) -> dict:
    """DataLoader options for feeding a GPU: pinned memory (copied with non_blocking) when
    there is one, and workers kept alive between epochs."""
    return {
        "batch_size": batch_size,
        "num_workers": workers,
        "pin_memory": torch.cuda.is_available(),
        "persistent_workers": workers > 0,
    }


def _check_gpu_augment(args: argparse.Namespace, recipe) -> bool:
    """Whether ``--gpu-augment`` can apply: only a recipe on cifar10 has per-image
    augmentations to move; "on" without one is refused."""
    applies = recipe is not None and args.dataset == "cifar10"
    if getattr(args, "gpu_augment", "auto") == "on" and not applies:
        raise UsageError(
            "--gpu-augment on needs --recipe cct or cct200 with --dataset cifar10"
        )
    return applies


def _use_device_augment(args: argparse.Namespace, recipe, device: torch.device) -> bool:
    """``--gpu-augment``: "on", "off", or "auto" (on with CUDA)."""
    choice = getattr(args, "gpu_augment", "auto")
    on = choice == "on" or (choice == "auto" and device.type == "cuda")
    return _check_gpu_augment(args, recipe) and on


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


def _prepare_model(model: nn.Module, args: argparse.Namespace) -> nn.Module:
    """The model ``engine.train`` runs: channels-last weights when that is faster
    (:func:`~going_modular.utils.prefer_channels_last`) and, with ``--compile``, compiled
    (opt-in: on this book's CPU it was 0.87x as fast; the checkpoint keeps the uncompiled
    module, which shares its weights)."""
    utils.prefer_channels_last(model)
    if not getattr(args, "compile", False):
        return model
    print("[INFO] torch.compile: the first steps compile the model and are slow.")
    return torch.compile(model)


def _check_combination(args: argparse.Namespace, recipe) -> None:
    """Refuse options that are valid alone but not together (before any work starts)."""
    if args.data_dir is not None and args.dataset is not None:
        raise UsageError("give either --dataset or --data-dir, not both")
    if args.data_dir is None and args.dataset is None:
        args.dataset = "food"
    if recipe is None and args.warmup_epochs > args.epochs:
        raise UsageError(
            f"--warmup-epochs {args.warmup_epochs:g} is longer than --epochs "
            f"{args.epochs}: shorten the warmup or train longer"
        )
    if args.weight_decay * args.lr >= 1:
        raise UsageError(
            f"--weight-decay {args.weight_decay:g} is too large for --lr {args.lr:g}: "
            "AdamW multiplies the weights by 1 - lr x weight decay at each step, so their "
            "product must be below 1 (a weight decay of 0.05 is usual)"
        )
    _check_gpu_augment(args, recipe)
    _check_output_dir(args)


def _check_output_dir(args: argparse.Namespace) -> None:
    """Refuse an output folder that is a file, too long a path, or inside the images."""
    out = args.output_dir
    try:
        runs.check_path_length(out)
    except ValueError as error:
        raise UsageError(f"--output-dir: {error}") from None
    if out.exists() and not out.is_dir():
        raise UsageError(
            f"--output-dir {out} is an existing file, not a folder: choose another path"
        )
    for split in ("train", "test") if args.data_dir is not None else ():
        images = (args.data_dir / split).resolve()
        if images == out.resolve() or images in out.resolve().parents:
            raise UsageError(
                f"--output-dir {out} is inside {args.data_dir / split}: its files would "
                f"be read as {split} images (or as a class). Choose a folder outside "
                f"{args.data_dir}'s train/ and test/"
            )


def _data_label(args: argparse.Namespace) -> str:
    return f"the images in {args.data_dir}" if args.data_dir else args.dataset


def _input_candidates(args: argparse.Namespace) -> tuple[list[tuple[int, int]], int]:
    """The (image size, channels) pairs the data can be given in, best first, and the
    number of classes; read from the folder names alone for ``--data-dir``."""
    if args.data_dir is not None:
        try:
            classes = data_setup.check_image_folder(args.data_dir / "train")
            test_classes = data_setup.check_image_folder(args.data_dir / "test")
        except (FileNotFoundError, ValueError) as error:
            raise UsageError(
                f"--data-dir {args.data_dir} needs train/ and test/ folders with one "
                f"subfolder of images per class: {error}"
            ) from None
        if classes != test_classes:
            raise UsageError(
                f"--data-dir {args.data_dir}: train/ has classes {classes} but test/ has "
                f"{test_classes}; both need the same class folders"
            )
        try:  # loops, one class, empty classes, unreadable images: before any work
            data_setup.image_splits(args.data_dir / "train", args.data_dir / "test")
        except (FileNotFoundError, ValueError) as error:
            raise UsageError(f"--data-dir {args.data_dir}: {error}") from None
        return [(args.img_size or 224, 3)], len(classes)
    size, channels, num_classes = DATASETS[args.dataset]
    if args.dataset != "fashion_mnist":
        return [(args.img_size or size, channels)], num_classes
    if args.img_size:
        return [(args.img_size, c) for c in (1, 3)], num_classes
    return FASHION_INPUTS, num_classes


def _fitting_model(args: argparse.Namespace) -> tuple[nn.Module, int, int]:
    """Build ``args.model`` for the first input shape it takes and check it with one
    forward pass of zeros; return ``(model, img_size, channels)`` or raise UsageError."""
    candidates, num_classes = _input_candidates(args)
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
                f"[INFO] {args.model} does not take {_data_label(args)}'s {size}x{size} "
                f"images as they are ({first_error}), so they are {' and '.join(changes)}."
            )
        return model, img_size, channels
    size, channels = candidates[0]
    raise UsageError(
        f"--model {args.model} does not fit {_data_label(args)} "
        f"({channels} channel(s), {size}x{size} pixels): {first_error} "
        "Pass an --img-size the model takes, or choose another --model."
    )


@contextlib.contextmanager
def _locked_output_dir(out: Path) -> Iterator[None]:
    """Create ``out``, check that it is writable and hold its lock (see
    :class:`~going_modular.runs.OutputLock`) for the duration of the run."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as error:
        raise UsageError(
            f"--output-dir {out} cannot be used: {error.strerror or error}. Choose a "
            "folder you can write to"
        ) from None
    lock = runs.OutputLock(out)
    try:
        lock.acquire()
    except runs.RunLockedError as error:
        raise UsageError(f"--output-dir {error}") from None
    try:
        yield
    finally:
        lock.release()


def _options(args: argparse.Namespace) -> dict:
    """The options as given (before a recipe fills them in), JSON-ready, for ``--resume``."""
    options = {}
    for key, value in vars(args).items():
        if key in ("resume", "output_dir"):
            continue
        options[key] = os.path.abspath(value) if isinstance(value, Path) else value
    return options


def _resume_from(args: argparse.Namespace) -> tuple[Path, dict, dict]:
    """For ``--resume``: the run folder, its record and its results so far; ``args`` takes
    the run's own options (and ``--time-budget``/``--num-workers`` if given anew)."""
    run_dir = runs.resolve_run(args.resume)
    try:
        saved = json.loads((run_dir / "results.json").read_text())
        options = dict(saved["options"])
    except (OSError, ValueError, KeyError, TypeError):
        raise UsageError(
            f"--resume {args.resume}: there is no results.json with a run's options "
            "there. Pass a run folder this command wrote, e.g. runs/latest"
        ) from None
    if saved.get("status") == "complete":
        raise UsageError(
            f"--resume {args.resume}: that run is complete "
            f"({saved.get('epochs_completed')} epochs), so there is nothing to continue. "
            "Start a new run to train for longer"
        )
    if not (run_dir / engine.CHECKPOINT_NAME).is_file():
        raise UsageError(
            f"--resume {args.resume}: that run stopped before its first epoch was "
            "complete, so there is nothing to continue from. Start it again without "
            "--resume"
        )
    defaults = vars(build_parser().parse_args([]))
    changed = [
        "--" + key.replace("_", "-")
        for key, value in vars(args).items()
        if key not in ("resume", *RESUME_MAY_CHANGE) and value != defaults[key]
    ]
    if changed:
        raise UsageError(
            f"--resume continues a run with its own options, so {', '.join(changed)} "
            "cannot be given with it (only --time-budget and --num-workers can)"
        )
    for key, value in options.items():
        if key in RESUME_MAY_CHANGE and getattr(args, key) is not None:
            continue
        setattr(args, key, Path(value) if key == "data_dir" and value else value)
    args.output_dir = run_dir.parent
    record = {k: v for k, v in saved.items() if k not in (*engine.RESULT_KEYS, "error")}
    results = {k: saved[k] for k in engine.RESULT_KEYS if k in saved}
    return run_dir, record, results


class _Run:
    """One run's folder and what saving it needs."""

    def __init__(self, run_dir: Path, record: dict, model: nn.Module, img_size: int):
        self.dir, self.record, self.model = run_dir, record, model
        self.class_names: list[str] | None = None  # known once the data is prepared
        self.extra = {"img_size": img_size, "dataset": record["data"]}
        self.title = f"{record['model']} on {record['data']}"

    def write_results(self, record: dict, results: dict) -> None:
        runs.write_json(self.dir / runs.RESULTS, record | results)

    def save(self, record: dict, results: dict) -> None:
        """Save ``model.pth`` and ``results.json`` as a pair (:func:`runs.save_pair`)."""
        runs.save_pair(
            self.dir,
            lambda folder: utils.save_model(
                self.model,
                folder,
                runs.MODEL,
                class_names=self.class_names,
                extra=self.extra | record,
            ),
            record,
            results,
        )

    def finish(self, record: dict, results: dict, mlflow_args=None) -> None:
        """The optional steps after a save: the curves, MLflow, the ``latest`` pointer.
        Each failure is a warning and changes nothing in the saved run."""
        if results.get("train_loss"):
            _optional("Plotting loss_curves.png", lambda: self._plot(results))
        if mlflow_args is not None:
            _optional(
                "Logging to MLflow",
                lambda: _log_to_mlflow(mlflow_args, record, results),
            )
        _optional("Updating the 'latest' pointer", lambda: runs.update_latest(self.dir))

    def _plot(self, results: dict) -> None:
        figure = plot_loss_curves(results, title=self.title)
        try:
            figure.savefig(self.dir / "loss_curves.png", dpi=100)
        finally:
            plt.close(figure)


def _optional(what: str, step) -> None:
    try:
        step()
    except Exception as error:  # noqa: BLE001  (whatever failed, the run is saved)
        print(
            f"[WARNING] {what} failed ({type(error).__name__}: {error}); the run itself "
            "is saved and its status is unchanged.",
            file=sys.stderr,
        )


def _log_to_mlflow(args: argparse.Namespace, record: dict, results: dict) -> None:
    """Log the options as parameters and each epoch's results with ``step=epoch``."""
    from . import tracking

    params = {k: v for k, v in vars(args).items() if v is not None}
    with tracking.start_run("cli", f"{args.model} {record['run_id']}", params):
        tracking.log_results(results)
    print(f"[INFO] Logged to MLflow; browse with: {tracking.ui_command()}")


def run(args: argparse.Namespace) -> dict[str, list[float]]:
    """Train as ``args`` say into a new run folder (or continue ``args.resume``) and write
    the model, results and curves there.

    Raises UsageError before any data is prepared when the options cannot work,
    TrainingInterrupted after saving the completed epochs on Ctrl-C, SIGTERM or SIGHUP, and
    TrainingFailed after saving them when training fails (e.g. the loss diverges).
    """
    resume_dir, record, results = None, {}, {}
    if args.resume is not None:
        resume_dir, record, results = _resume_from(args)
    options = _options(args)
    recipe = _resolve_recipe(args)
    _check_combination(args, recipe)
    utils.set_seeds(args.seed)
    model, img_size, channels = _fitting_model(args)
    with _locked_output_dir(args.output_dir):
        run_dir = resume_dir or runs.new_run_dir(args.output_dir)
        record = record or {
            "run_id": run_dir.name,
            "model": args.model,
            "data": str(args.data_dir) if args.data_dir else args.dataset,
            "options": options,
        }
        record = record | {"status": "running"}
        current = _Run(run_dir, record, model, img_size)
        current.write_results(record, results)
        print(
            f"[INFO] {'Continuing' if resume_dir else 'Writing'} the run in {run_dir}"
        )
        return _train_and_save(args, recipe, model, img_size, channels, current)


def _train_and_save(
    args: argparse.Namespace,
    recipe: augment.CCTRecipe | None,
    model: nn.Module,
    img_size: int,
    channels: int,
    current: _Run,
) -> dict[str, list[float]]:
    try:
        results = _train(args, recipe, model, img_size, channels, current)
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
    _optional(  # complete: nothing left to resume
        "Removing checkpoint.pth",
        lambda: (current.dir / engine.CHECKPOINT_NAME).unlink(missing_ok=True),
    )
    current.finish(record, results, args if getattr(args, "mlflow", False) else None)
    print(f"[INFO] Saved the run to {current.dir}")
    return results


def _train(
    args: argparse.Namespace,
    recipe: augment.CCTRecipe | None,
    model: nn.Module,
    img_size: int,
    channels: int,
    current: _Run,
) -> dict[str, list[float]]:
    """Prepare the data and the optimiser, then train (checkpointing each epoch)."""
    device = utils.get_device()
    split_transforms = {}
    if recipe is not None and args.dataset == "cifar10":
        split_transforms = {
            "train_transform": recipe.train_transform(img_size),
            "test_transform": recipe.test_transform(img_size),
        }
    if _use_device_augment(args, recipe, device):
        train_dl, test_dl, class_names = _device_loaders(args, recipe, img_size, device)
    else:
        train_dl, test_dl, class_names = make_dataloaders(
            args.dataset,
            img_size,
            args.batch_size,
            args.num_workers,
            not args.no_fallback,
            channels=channels,
            data_dir=args.data_dir,
            **split_transforms,
        )
    current.class_names = class_names
    print(
        f"[INFO] Data: {_data_label(args)}, {len(train_dl.dataset)} train and "
        f"{len(test_dl.dataset)} test images of {len(class_names)} classes, given to "
        f"{args.model} as {channels}x{img_size}x{img_size}."
    )
    steps_per_epoch = min(len(train_dl), args.max_steps or math.inf)
    scheduler, batch_transform = None, None
    if recipe is not None:
        parts = recipe.build(
            model, steps_per_epoch, args.epochs, num_classes=len(class_names)
        )
        optimizer, scheduler, loss_fn = parts.optimizer, parts.scheduler, parts.loss_fn
        batch_transform = parts.batch_transform
        print(f"[INFO] Recipe {recipe.name}: {recipe.source}")
    else:
        optimizer = torch.optim.AdamW(
            param_groups_weight_decay(model, args.weight_decay),
            lr=args.lr,
            fused=True if device.type == "cuda" else None,  # one kernel per step on GPU
        )
        loss_fn = nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
        if args.warmup_epochs > 0:
            scheduler = warmup_cosine_schedule(
                optimizer,
                args.warmup_epochs * steps_per_epoch,
                args.epochs * steps_per_epoch,
            )
    return engine.train(
        _prepare_model(model, args),
        train_dl,
        test_dl,
        optimizer,
        loss_fn,
        args.epochs,
        device,
        scheduler=scheduler,
        max_grad_norm=args.max_grad_norm,
        amp=args.amp,
        batch_transform=batch_transform,
        max_steps_per_epoch=args.max_steps,
        test_loss_fn=nn.CrossEntropyLoss(),
        time_budget=None if args.time_budget is None else args.time_budget * 60,
        checkpoint_dir=current.dir,
    )


def _describe(error: BaseException) -> str:
    """One line for the error that stopped a run (a full disk said plainly)."""
    if isinstance(error, OSError) and error.strerror:
        where = f" while writing {error.filename}" if error.filename else ""
        return f"{error.strerror}{where}: free some space (or fix the folder)."
    return str(error)


def _stopped(current: _Run, error: BaseException) -> BaseException:
    """Save the epochs completed before ``error`` stopped the run (from the engine's
    checkpoint) and mark the run interrupted or failed; return what to raise instead."""
    interrupted = isinstance(error, KeyboardInterrupt)
    try:
        checkpoint = engine.read_checkpoint(current.dir)
    except ValueError:
        checkpoint = None
    epochs = checkpoint["epoch"] if checkpoint is not None else 0
    record = current.record | {
        "status": "interrupted" if interrupted else "failed",
        "epochs_completed": epochs,
    }
    if not interrupted:
        record["error"] = _describe(error)
    run_dir, problem, saved = current.dir, None, False
    results = checkpoint["results"] if checkpoint is not None else {}
    with runs.signals_held():
        try:
            if epochs and current.class_names is not None:
                current.model.load_state_dict(checkpoint["model"])
                current.save(record, results)
                saved = True
                current.finish(record, results)
            else:
                current.write_results(record, results)
        except OSError as save_error:
            problem = save_error.strerror or str(save_error)
            with contextlib.suppress(OSError):  # at least the status, if it fits
                current.write_results(record, results)
    status = record["status"]
    if not epochs:
        kept = (
            f"no epoch was complete; {run_dir / 'results.json'} marks the run {status}"
            if problem is None
            else f"no epoch was complete, and marking the run {status} failed ({problem})"
        )
    elif saved:
        kept = (
            f"saved epoch {epochs}'s checkpoint and the results so far (marked {status}) "
            f"to {run_dir}/"
        )
    elif problem is None:  # a resumed run that stopped before training again
        kept = f"its {epochs} earlier epoch(s) in {run_dir}/ are kept (marked {status})"
    else:
        kept = (
            f"epoch {epochs}'s training state is in {run_dir / engine.CHECKPOINT_NAME}, "
            f"but saving model.pth failed too ({problem})"
        )
    resume = f" Continue with: python -m going_modular.train --resume {run_dir}"
    if not epochs or (not interrupted and isinstance(error, engine.TrainingDiverged)):
        resume = ""  # nothing to continue, or the same options would diverge again
    if interrupted:
        where = (
            f"during epoch {epochs + 1}" if epochs else "before an epoch was complete"
        )
        return TrainingInterrupted(
            f"Interrupted {where}: {kept}.{resume}", runs.exit_code(error)
        )
    known = (
        engine.TrainingDiverged,
        engine.CheckpointMismatchError,
        data_setup.ImageDecodeError,
        DownloadError,
        OSError,
    )
    if isinstance(error, known):
        return TrainingFailed(f"{record['error']} {kept[0].upper()}{kept[1:]}.{resume}")
    return error  # a bug: its traceback is worth more than a line


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
