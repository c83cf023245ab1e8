"""Train a model from the command line: ``python -m going_modular.train --help``.

A run writes three files to ``--output-dir``: the checkpoint (``model.pth``), the per-epoch
results (``results.json``) and the loss and accuracy curves (``loss_curves.png``).

``--recipe cct`` (or ``cct200``) trains with a Compact Transformers recipe from
:mod:`going_modular.augment`: its augmentations (on cifar10), MixUp/CutMix (cct), label
smoothing, AdamW (cct exempts biases and norms from weight decay) and warmup + cosine. The recipe
supplies the defaults of ``--epochs``, ``--batch-size``, ``--lr``, ``--weight-decay``,
``--warmup-epochs`` and ``--label-smoothing``; options given explicitly override them.
``--time-budget MINUTES`` stops training when the time is spent (see ``engine.train``).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402
from torchvision import transforms  # noqa: E402

from . import augment, data_setup, datasets, engine, utils  # noqa: E402
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
    # name -> (default image size, channels)
    "food": (224, 3),
    "food20": (224, 3),
    "cifar10": (32, 3),
    "mnist": (28, 1),
}


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
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
        default="food",
        choices=sorted(DATASETS),
        help="food (pizza/steak/sushi 10%%), food20 (20%%), cifar10 or mnist",
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
        "--weight-decay", type=float, default=None, help="default: 0, or the recipe's"
    )
    parser.add_argument(
        "--warmup-epochs",
        type=float,
        default=None,
        help="linear warmup length; with it the LR then decays by a cosine (default: 0, or "
        "the recipe's, shortened in proportion when --epochs is below the recipe's)",
    )
    parser.add_argument(
        "--label-smoothing",
        type=float,
        default=None,
        help="default: 0, or the recipe's",
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
        "--time-budget",
        type=_positive_float,
        default=None,
        metavar="MINUTES",
        help="stop training once this many minutes are spent (the last epoch is still tested)",
    )
    parser.add_argument("--num-workers", type=int, default=None)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--no-fallback",
        action="store_true",
        help="fail instead of using the offline stand-in when data can't be fetched",
    )
    parser.add_argument("--output-dir", type=Path, default=Path("runs/latest"))
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
) -> tuple[DataLoader, DataLoader, list[str]]:
    """Dataloaders and class names for one of :data:`DATASETS`, resized to ``img_size``.

    ``train_transform``/``test_transform`` replace the default (resize + to tensor) per split.
    """
    transform = transforms.Compose(
        [transforms.Resize((img_size, img_size)), transforms.ToTensor()]
    )
    train_transform = train_transform or transform
    test_transform = test_transform or transform
    if dataset in ("food", "food20"):
        data = datasets.get_food_data(
            "10%" if dataset == "food" else "20%", fallback=fallback
        )
        return data_setup.create_dataloaders(
            data.train_dir,
            data.test_dir,
            train_transform,
            batch_size,
            num_workers,
            test_transform=test_transform,
        )
    getter = datasets.get_cifar10 if dataset == "cifar10" else datasets.get_mnist
    train_data = getter(train=True, transform=train_transform, fallback=fallback)
    test_data = getter(train=False, transform=test_transform, fallback=fallback)
    workers = data_setup.default_num_workers() if num_workers is None else num_workers
    return (
        DataLoader(
            train_data, batch_size=batch_size, shuffle=True, num_workers=workers
        ),
        DataLoader(
            test_data, batch_size=batch_size, shuffle=False, num_workers=workers
        ),
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
    return recipe.replace(**explicit)


def run(args: argparse.Namespace) -> dict[str, list[float]]:
    """Train as ``args`` say and write the checkpoint, results and curves."""
    recipe = _resolve_recipe(args)
    utils.set_seeds(args.seed)
    device = utils.get_device()
    default_size, channels = DATASETS[args.dataset]
    img_size = args.img_size or default_size
    split_transforms = {}
    if recipe is not None and args.dataset == "cifar10":
        split_transforms = {
            "train_transform": recipe.train_transform(img_size),
            "test_transform": recipe.test_transform(img_size),
        }
    train_dl, test_dl, class_names = make_dataloaders(
        args.dataset,
        img_size,
        args.batch_size,
        args.num_workers,
        not args.no_fallback,
        **split_transforms,
    )
    model = build_model(
        args.model,
        num_classes=len(class_names),
        img_size=img_size,
        in_channels=channels,
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
            param_groups_weight_decay(model, args.weight_decay), lr=args.lr
        )
        loss_fn = nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
        if args.warmup_epochs > 0:
            scheduler = warmup_cosine_schedule(
                optimizer,
                int(args.warmup_epochs * steps_per_epoch),
                args.epochs * steps_per_epoch,
            )
    results = engine.train(
        model,
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
    )
    out = args.output_dir
    utils.save_model(
        model,
        out,
        "model.pth",
        class_names=class_names,
        extra={"img_size": img_size, "dataset": args.dataset},
    )
    (out / "results.json").write_text(json.dumps(results, indent=2))
    plot_loss_curves(results, title=f"{args.model} on {args.dataset}").savefig(
        out / "loss_curves.png", dpi=100
    )
    print(f"[INFO] Wrote model.pth, results.json and loss_curves.png to {out}")
    return results


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``python -m going_modular.train`` and the ``vit-train`` command."""
    run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main()
