"""The options of ``python -m going_modular.train`` and the checks that refuse bad ones.

:func:`build_parser` declares the options, each with a type that refuses a bad number
(``--lr nan``, ``--batch-size 0``) with argparse's usual message. The checks below refuse
what is valid alone but not together, a ``--data-dir`` that is not an image folder, an
unusable ``--output-dir`` and a ``--resume`` with nothing to continue, all with a
:class:`UsageError` raised before any data is prepared (the CLI exits with 2).
:func:`resolve_recipe` fills in the options a ``--recipe`` supplies.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from going_modular import data_setup, engine
from going_modular.models import list_models
from going_modular.training import cct_recipes, runs
from going_modular.training.checkpoint import CHECKPOINT_NAME

__all__ = [
    "DATASETS",
    "FASHION_INPUTS",
    "PLAIN_DEFAULTS",
    "RESUME_MAY_CHANGE",
    "UsageError",
    "build_parser",
    "check_options",
    "data_label",
    "gpu_augment_applies",
    "input_candidates",
    "locked_output_dir",
    "options_given",
    "resolve_recipe",
    "resume_from",
]

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


# --- Option types: each refuses a bad value with argparse's "argument --x: ..." ----------------


def _number(
    kind: type, holds: Callable[[float], bool], rule: str, name: str
) -> Callable[[str], float]:
    """An option type: the text as a ``kind`` (a float must be finite) for which ``holds``;
    else argparse's error "argument --x: ``rule``, got <value>" (or "invalid ``name``
    value" for text that is no number)."""

    def parse(text: str) -> float:
        value = kind(text)
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        if not holds(value):
            raise argparse.ArgumentTypeError(f"{rule}, got {value}")
        return value

    parse.__name__ = name
    return parse


_positive_int = _number(int, lambda v: v > 0, "must be a positive integer", "integer")
_count = _number(int, lambda v: v >= 0, "must be 0 or more", "integer")
_positive = _number(float, lambda v: v > 0, "must be positive", "number")
_non_negative = _number(float, lambda v: v >= 0, "must be 0 or more", "number")
_seed = _number(int, lambda v: 0 <= v < 2**32, "must be in [0, 2**32)", "integer")
_smoothing = _number(
    float,
    lambda v: 0 <= v < 1,
    "must be at least 0 and below 1 (0.1 is usual)",
    "number",
)


def build_parser() -> argparse.ArgumentParser:
    """The CLI's arguments."""
    parser = argparse.ArgumentParser(
        prog="python -m going_modular.train",
        description="Train one of the book's models on one of its datasets.",
    )
    add = parser.add_argument
    add(
        "--model",
        default="tinyvgg",
        choices=list_models(),
        metavar="NAME",
        help=f"model to build: {', '.join(list_models())}",
    )
    add(
        "--dataset",
        default=None,
        choices=sorted(DATASETS),
        help="food (pizza/steak/sushi 10%%, the default), food20 (20%%), cifar10, mnist or "
        "fashion_mnist (padded to 32x32 or made RGB only if the model needs it)",
    )
    add(
        "--data-dir",
        type=Path,
        default=None,
        metavar="PATH",
        help="train on your own images instead: PATH/train/<class>/*.jpg and "
        "PATH/test/<class>/*.jpg (resized to --img-size, default 224)",
    )
    add(
        "--recipe",
        default="none",
        choices=["none", *cct_recipes.RECIPES],
        help="none (plain training), cct (the authors' CIFAR config: RandAugment, MixUp/CutMix, "
        "random erasing, label smoothing, AdamW, warmup + cosine) or cct200 (the recipe of the "
        "reference's 200-epoch table: AutoAugment, label smoothing, AdamW, warmup + cosine)",
    )
    add(
        "--epochs", type=_positive_int, default=None, help="default: 5, or the recipe's"
    )
    add(
        "--batch-size",
        type=_positive_int,
        default=None,
        help="default: 32, or the recipe's",
    )
    add(
        "--lr",
        "--learning-rate",
        dest="lr",
        type=_positive,
        default=None,
        help="default: 1e-3, or the recipe's",
    )
    add(
        "--weight-decay",
        type=_non_negative,
        default=None,
        help="default: 0, or the recipe's",
    )
    add(
        "--warmup-epochs",
        type=_non_negative,
        default=None,
        help="linear warmup length; with it the LR then decays by a cosine (default: 0, or "
        "the recipe's, shortened in proportion when --epochs is below the recipe's)",
    )
    add(
        "--label-smoothing",
        type=_smoothing,
        default=None,
        help="in [0, 1); default: 0, or the recipe's",
    )
    add("--max-grad-norm", type=_positive, default=None)
    add(
        "--img-size",
        type=_positive_int,
        default=None,
        help="resize images to this size (default: the dataset's own)",
    )
    add(
        "--max-steps",
        type=_positive_int,
        default=None,
        help="cap on training batches per epoch, for quick runs",
    )
    add(
        "--amp",
        action="store_true",
        help="mixed precision (float16 on CUDA, bfloat16 on CPU)",
    )
    add(
        "--gpu-augment",
        choices=["auto", "on", "off"],
        default="auto",
        help="with --recipe on cifar10: augment batches on the training device "
        "(going_modular.gpu_augment) instead of each image in loader workers; auto: on "
        "with CUDA",
    )
    add(
        "--compile",
        action="store_true",
        help="torch.compile the model (minutes to start; for long GPU runs)",
    )
    add(
        "--time-budget",
        type=_positive,
        default=None,
        metavar="MINUTES",
        help="stop training once this many minutes are spent (the last epoch is still tested)",
    )
    add("--num-workers", type=_count, default=None)
    add("--seed", type=_seed, default=42)
    add(
        "--no-fallback",
        action="store_true",
        help="fail instead of using the offline stand-in when data can't be fetched",
    )
    add(
        "--output-dir",
        type=Path,
        default=Path("runs"),
        help="each run gets a new folder in it, <timestamp>-<id>/; OUTPUT_DIR/latest "
        "points to the newest (default: runs)",
    )
    add(
        "--resume",
        type=Path,
        default=None,
        metavar="RUN_DIR",
        help="continue an interrupted or failed run (e.g. runs/latest) from its last "
        "completed epoch, with its own options (only --time-budget and --num-workers may "
        "be given anew)",
    )
    add(
        "--mlflow",
        action="store_true",
        help="also log the options and per-epoch results to the MLflow store "
        "(runs/mlflow.db, or $BOOK_MLFLOW_URI), experiment 'cli'",
    )
    return parser


def resolve_recipe(args: argparse.Namespace) -> cct_recipes.CCTRecipe | None:
    """Fill the options left unset from the recipe (or the plain defaults); return the recipe
    with the explicitly given values applied, or None without a recipe."""
    recipe = cct_recipes.RECIPES.get(args.recipe)
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
    # --epochs is the run's length; the recipe's own epochs set its proportions
    explicit.pop("epochs", None)
    try:
        return recipe.replace(**explicit)
    except ValueError as error:
        flags = ", ".join(f"--{key.replace('_', '-')}" for key in explicit)
        raise UsageError(f"--recipe {args.recipe} with {flags}: {error}") from None


def gpu_augment_applies(args: argparse.Namespace, recipe) -> bool:
    """Whether ``--gpu-augment`` can apply: only a recipe on cifar10 has per-image
    augmentations to move; "on" without one is refused."""
    applies = recipe is not None and args.dataset == "cifar10"
    if args.gpu_augment == "on" and not applies:
        raise UsageError(
            "--gpu-augment on needs --recipe cct or cct200 with --dataset cifar10"
        )
    return applies


def check_options(args: argparse.Namespace, recipe) -> None:
    """Refuse options that are valid alone but not together (before any work starts);
    without ``--data-dir`` or ``--dataset``, the dataset is food."""
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
    gpu_augment_applies(args, recipe)
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


def data_label(args: argparse.Namespace) -> str:
    """The data in a sentence: the dataset's name, or "the images in PATH"."""
    return f"the images in {args.data_dir}" if args.data_dir else args.dataset


def input_candidates(args: argparse.Namespace) -> tuple[list[tuple[int, int]], int]:
    """The (image size, channels) pairs the data can be given in, best first, and the
    number of classes; read from the folder names alone for ``--data-dir``, whose layout
    and images are checked here."""
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


@contextlib.contextmanager
def locked_output_dir(out: Path) -> Iterator[None]:
    """Create ``out``, check that it is writable and hold its lock (see
    :class:`~going_modular.runs.OutputLock`) for the duration of the block."""
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


def options_given(args: argparse.Namespace) -> dict:
    """The options as given (before a recipe fills them in), JSON-ready, for ``--resume``."""
    return {
        key: os.path.abspath(value) if isinstance(value, Path) else value
        for key, value in vars(args).items()
        if key not in ("resume", "output_dir")
    }


def resume_from(args: argparse.Namespace) -> tuple[Path, dict, dict]:
    """For ``--resume``: the run folder, its record and its results so far; ``args`` takes
    the run's own options (and ``--time-budget``/``--num-workers`` if given anew)."""
    run_dir = runs.resolve_run(args.resume)
    try:
        saved = json.loads((run_dir / runs.RESULTS).read_text())
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
    if not (run_dir / CHECKPOINT_NAME).is_file():
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
