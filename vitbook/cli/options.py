"""The options of ``python -m vitbook.train``, parsed and checked once into a
:class:`~vitbook.cli.config.RunConfig`.

:func:`build_parser` declares the options, each with a type that refuses a bad number
(``--lr nan``, ``--lr -1e-3``, ``--batch-size 0``) with argparse's usual message.
:func:`configure` turns the parsed options into the run's one frozen ``RunConfig``: a
``--recipe`` fills in the options left unset, a ``--resume`` restores the run's own options
and reads its checkpoint (:mod:`~vitbook.cli.resume`), and the checks refuse what is
valid alone but not together, a ``--data-dir`` that is not an image folder, an unusable
``--output-dir`` (:mod:`~vitbook.cli.output_dir`) and a ``--resume`` with nothing to
continue, all with a :class:`~vitbook.cli.errors.UsageError` raised before any data is
prepared or any file written (the CLI exits with 2). This is the one module that sees the
parsed options (the argparse namespace): everything below receives the config.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from going_modular.models import list_models
from vitbook.cli import resume
from vitbook.cli.config import (
    DRY_RUN_STEPS,
    RunConfig,
    flag,
    flags,
    gpu_augment_applies,
)
from vitbook.cli.errors import UsageError
from vitbook.cli.output_dir import check_output_dir
from vitbook.data import image_folders
from vitbook.training import cct_recipes, runs

__all__ = [
    "DATASETS",
    "FASHION_INPUTS",
    "PLAIN_DEFAULTS",
    "RESUME_MAY_CHANGE",
    "build_parser",
    "check_options",
    "configure",
    "input_candidates",
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
RESUME_MAY_CHANGE = (
    "time_budget",
    "num_workers",
    "dist_timeout",
    "offline",
    "data_root",
)


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
    parse.numeric = True  # a negative value after the option is its value (see _Parser)
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


def _folder(text: str) -> Path:
    """An option type: a folder's path, never empty ("" would mean the current folder
    without saying so)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "needs a folder's path, got an empty one (give . for the current folder)"
        )
    return Path(text)


class _Parser(argparse.ArgumentParser):
    """argparse, except that a negative number after a numeric option is that option's
    value: ``--lr -1e-3`` is refused for its sign, not read as an unknown option."""

    def __init__(self, **kwargs):
        self.numeric: set[str] = set()  # before argparse adds --help
        super().__init__(**kwargs)

    def add_argument(self, *names, **kwargs) -> argparse.Action:
        action = super().add_argument(*names, **kwargs)
        if getattr(action.type, "numeric", False):
            self.numeric.update(action.option_strings)
        return action

    def parse_known_args(self, args: Sequence[str] | None = None, namespace=None):
        joined: list[str] = []
        for token in sys.argv[1:] if args is None else args:
            if joined and joined[-1] in self.numeric and _is_negative_number(token):
                # "--lr=-1e-3": the form in which argparse takes a negative value
                joined[-1] = f"{joined[-1]}={token}"
            else:
                joined.append(token)
        return super().parse_known_args(joined, namespace)

    def error(self, message: str) -> NoReturn:
        """Exit with 2 after one usage line (with where the options are listed) and the
        error, instead of argparse's whole usage (20 lines) before it."""
        self.exit(
            2,
            f"usage: {self.prog} [-h] [options]  ({self.prog} --help lists them)\n"
            f"{self.prog}: error: {message}\n",
        )


def _is_negative_number(text: str) -> bool:
    """Whether ``text`` is a number with a minus sign (``-1e-3``, ``-inf``, ``-nan``)."""
    try:
        float(text)
    except ValueError:
        return False
    return text.startswith("-")


def _add_model_and_data(add: Callable[..., argparse.Action]) -> None:
    """The model, the data and the recipe."""
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


def _add_training(add: Callable[..., argparse.Action]) -> None:
    """The training's numbers (a recipe supplies their defaults)."""
    add(
        "--epochs", type=_positive_int, default=None, help="default: 5, or the recipe's"
    )
    add(
        "--batch-size",
        type=_positive_int,
        default=None,
        help="images per step and per process (under torchrun the global batch is "
        "this times the number of processes); default: 32, or the recipe's",
    )
    add(
        "--lr",
        "--learning-rate",
        dest="lr",
        type=_positive,
        default=None,
        help="default: 1e-3, or the recipe's; used as given under torchrun too (not "
        "scaled with the number of processes)",
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


def _add_run(add: Callable[..., argparse.Action]) -> None:
    """How the run goes: its precision, devices, budget and seed."""
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
        "--dry-run",
        action="store_true",
        help=f"check the run's code paths: every epoch capped at {DRY_RUN_STEPS} "
        f"training and {DRY_RUN_STEPS} test batches (as the book's dry run)",
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
        "(vitbook.data.gpu_augment) instead of each image in loader workers; auto: on "
        "with CUDA",
    )
    add(
        "--compile",
        action="store_true",
        help="torch.compile the model (minutes to start; for long GPU runs)",
    )


def _add_limits_and_data(add: Callable[..., argparse.Action]) -> None:
    """How long the run may take, its seed, and where its data come from."""
    add(
        "--time-budget",
        type=_positive,
        default=None,
        metavar="MINUTES",
        help="stop training once this many minutes are spent (the last epoch is still tested)",
    )
    add(
        "--num-workers",
        type=_count,
        default=None,
        help="processes loading the images (default: the cores with a GPU, none on a "
        "CPU)",
    )
    add("--seed", type=_seed, default=42)
    add(
        "--no-fallback",
        action="store_true",
        help="fail instead of using the offline stand-in when data can't be fetched",
    )
    add(
        "--offline",
        action="store_true",
        help="never touch the network: datasets come from local files (or, unless "
        "--no-fallback, their stand-ins)",
    )
    add(
        "--data-root",
        type=_folder,
        default=None,
        metavar="PATH",
        help="where datasets are downloaded to and looked for (made if missing; "
        "default: the checkout's data/, else ./data)",
    )


def _add_output(add: Callable[..., argparse.Action]) -> None:
    """Where the run goes, whether it resumes one, and where it is logged."""
    add(
        "--output-dir",
        type=_folder,
        default=Path("runs"),
        help="each run gets a new folder in it, <timestamp>-<id>/; OUTPUT_DIR/latest "
        "points to the newest (default: runs)",
    )
    add(
        "--resume",
        type=Path,
        default=None,
        metavar="RUN_DIR",
        help="continue an interrupted, failed or stopped run (e.g. runs/latest) from its last "
        f"completed epoch, with its own options (only {flags(RESUME_MAY_CHANGE)} may "
        "be given anew); under torchrun, with as many processes",
    )
    add(
        "--dist-timeout",
        type=_positive,
        default=300.0,
        metavar="SECONDS",
        help="under torchrun: how long a process waits for the others at a step before "
        "the run fails (a process that died or hangs); default: 300",
    )
    add(
        "--mlflow",
        action="store_true",
        help="also log the options and per-epoch results to the MLflow store "
        "(runs/mlflow.db), experiment 'cli'",
    )


def build_parser() -> argparse.ArgumentParser:
    """The CLI's arguments."""
    parser = _Parser(
        prog="python -m vitbook.train",
        description="Train one of the book's models on one of its datasets.",
        epilog="On several processes (GPUs, or CPU processes): launch the same command "
        "with torchrun, e.g. torchrun --nproc_per_node=2 -m vitbook.train ... Each "
        "process trains on its shard of every global batch (--batch-size images each) "
        "with NCCL on CUDA, gloo on a CPU; rank 0 writes the run, and processes given "
        "different options are refused. The learning rate is "
        "not scaled: to keep lr per image constant, multiply --lr by the number of "
        "processes yourself (the linear-scaling rule), or keep the global batch by "
        "dividing --batch-size.",
    )
    for add_options in (
        _add_model_and_data,
        _add_training,
        _add_run,
        _add_limits_and_data,
        _add_output,
    ):
        add_options(parser.add_argument)
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
        flags = ", ".join(flag(key) for key in explicit)
        raise UsageError(f"--recipe {args.recipe} with {flags}: {error}") from None


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
    gpu_augment_applies(args.dataset, args.gpu_augment, recipe)
    check_output_dir(args.output_dir, args.data_dir)
    if args.data_root is not None:
        _check_data_root(args.data_root)


def _check_data_root(root: Path) -> None:
    """Refuse a ``--data-root`` that is, or lies inside, a file (a missing folder is
    made when a dataset lands there)."""
    existing = next(
        p for p in (root.absolute(), *root.absolute().parents) if p.exists()
    )
    if not existing.is_dir():
        raise UsageError(
            f"--data-root {root}: {existing} is a file, not a folder; give the folder "
            "where datasets are kept (it is made if missing)"
        )


def _image_folder_classes(data_dir: Path) -> list[str]:
    """The class names of ``data_dir``'s train/ and test/ folders, whose layout and images
    are checked here."""
    missing = [
        f"{split}/" for split in ("train", "test") if not (data_dir / split).is_dir()
    ]
    if missing:
        raise UsageError(
            f"--data-dir {data_dir} needs train/ and test/ folders with one subfolder of "
            "images per class (train/<class>/, test/<class>/), but it "
            + (
                "does not exist"
                if not data_dir.exists()
                else f"has no {' nor '.join(missing)}"
            )
        )
    try:
        classes = image_folders.check_image_folder(data_dir / "train")
        test_classes = image_folders.check_image_folder(data_dir / "test")
    except (FileNotFoundError, ValueError) as error:
        raise UsageError(
            f"--data-dir {data_dir} needs train/ and test/ folders with one "
            f"subfolder of images per class: {error}"
        ) from None
    if classes != test_classes:
        raise UsageError(
            f"--data-dir {data_dir}: train/ has classes {classes} but test/ has "
            f"{test_classes}; both need the same class folders"
        )
    try:  # loops, one class, empty classes, unreadable images: before any work
        image_folders.image_splits(data_dir / "train", data_dir / "test")
    except (FileNotFoundError, ValueError) as error:
        raise UsageError(f"--data-dir {data_dir}: {error}") from None
    return classes


def input_candidates(args: argparse.Namespace) -> tuple[list[tuple[int, int]], int]:
    """The (image size, channels) pairs the data can be given in, best first, and the
    number of classes; read from the folder names alone for ``--data-dir``."""
    if args.data_dir is not None:
        classes = _image_folder_classes(args.data_dir)
        return [(args.img_size or 224, 3)], len(classes)
    size, channels, num_classes = DATASETS[args.dataset]
    if args.dataset != "fashion_mnist":
        return [(args.img_size or size, channels)], num_classes
    if args.img_size:
        return [(args.img_size, c) for c in (1, 3)], num_classes
    return FASHION_INPUTS, num_classes


def options_given(args: argparse.Namespace) -> dict:
    """The options as given (before a recipe fills them in), JSON-ready, for ``--resume``."""
    return {
        key: os.path.abspath(value) if isinstance(value, Path) else value
        for key, value in vars(args).items()
        if key not in ("resume", "output_dir")
    }


def _saved_value(
    actions: dict[str, argparse.Action], key: str, value: object, run_dir: Path
) -> object:
    """One option of a run's results.json, checked as the command line checks it."""
    action = actions.get(key)
    problem = None
    if action is None:
        problem = "this version has no such option"
    elif value is not None and action.nargs == 0:
        problem = None if isinstance(value, bool) else "it must be true or false"
    elif value is not None:
        try:
            value = action.type(str(value)) if action.type else value
        except (argparse.ArgumentTypeError, TypeError, ValueError) as error:
            problem = str(error) or "not a value this option takes"
        if problem is None and action.choices and value not in action.choices:
            problem = f"choose from {', '.join(map(str, action.choices))}"
    if problem:
        raise UsageError(
            f"--resume {run_dir}: its {runs.RESULTS} holds the option {key}={value!r}, "
            f"which cannot be right ({problem}): the file was edited or damaged. Put its "
            "own options back, or start a new run"
        )
    return value


def resume_from(args: argparse.Namespace) -> resume.Resumed:
    """For ``--resume``: the run, its results so far and its readable checkpoint; ``args``
    takes the run's own options (and ``--time-budget``/``--num-workers`` if given anew)."""
    run_dir, saved = resume.saved_run(args.resume)
    defaults = vars(build_parser().parse_args([]))
    changed = [
        flag(key)
        for key, value in vars(args).items()
        if key not in ("resume", *RESUME_MAY_CHANGE) and value != defaults[key]
    ]
    if changed:
        raise UsageError(
            f"--resume continues a run with its own options, so {', '.join(changed)} "
            f"cannot be given with it (only {flags(RESUME_MAY_CHANGE)} can)"
        )
    actions = {action.dest: action for action in build_parser()._actions}
    options = {
        key: _saved_value(actions, key, value, run_dir)
        for key, value in saved["options"].items()
    }
    checkpoint = resume.readable_checkpoint(args.resume, run_dir)
    for key, value in options.items():
        if key in RESUME_MAY_CHANGE and getattr(args, key) is not None:
            continue
        setattr(args, key, value)
    args.output_dir = run_dir.parent
    return resume.Resumed.of(run_dir, saved, checkpoint)


def configure(args: argparse.Namespace) -> RunConfig:
    """The run's :class:`RunConfig` from the parsed options, or :class:`UsageError` (with
    ``--resume``: the run's own options, its checkpoint read and checked)."""
    args = argparse.Namespace(
        **vars(args)
    )  # filled in here; the caller's stays as parsed
    resumed = resume_from(args) if args.resume is not None else None
    options = options_given(args)
    cct = resolve_recipe(args)
    check_options(args, cct)
    if resumed is not None:
        resume.check_length(resumed, args.epochs)
    inputs, num_classes = input_candidates(args)
    return RunConfig(
        **vars(args),
        cct=cct,
        options=options,
        inputs=tuple(inputs),
        num_classes=num_classes,
        resumed=resumed,
    )
