"""Train a model on a folder of images, as the course's ``train.py`` does::

    python -m going_modular.train --train-dir data/pizza_steak_sushi/train \
        --test-dir data/pizza_steak_sushi/test --model tinyvgg --epochs 5

It builds the dataloaders (:mod:`going_modular.data_setup`), the model
(:mod:`going_modular.model_builder`), trains with :func:`going_modular.engine.train` and
saves the weights with :func:`going_modular.utils.save_model`. Before training it reads
every image once (naming one that cannot be read) and refuses to replace a model saved
earlier under the same name in ``--model-dir`` unless ``--overwrite`` is given. The
book's full command line, with its recipes, run folders, resuming and several processes,
is ``python -m vitbook.train``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader
from torchvision import transforms

from going_modular import data_setup, engine, model_builder, utils

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train-dir", required=True)
    parser.add_argument("--test-dir", required=True)
    parser.add_argument(
        "--model", default="tinyvgg", choices=model_builder.list_models()
    )
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--hidden-units", type=int, default=10, help="TinyVGG only")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--img-size", type=int, default=64)
    parser.add_argument("--model-dir", default="models")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a model already saved in --model-dir under the same name "
        "(without it, such a model is kept and nothing is trained)",
    )
    parser.add_argument("--seed", type=int, default=42)
    return parser


def _check_model_dir(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Path:
    """Create --model-dir before training, so the weights have somewhere to go, and
    refuse to replace a model saved there unless --overwrite is given."""
    model_dir = Path(args.model_dir)
    if model_dir.is_file():
        parser.error(f"--model-dir {model_dir} is a file: give a folder for the model")
    try:
        model_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        parser.error(f"--model-dir {model_dir}: {error.strerror or error}")
    saved = model_dir / f"{args.model}.pth"
    if saved.exists() and not args.overwrite:
        parser.error(
            f"{saved} already holds a trained model: give another --model-dir, or "
            "--overwrite to replace it"
        )
    return model_dir


def _check_images(*dataloaders: DataLoader) -> None:
    """Read every image once before training, so a file that cannot be read is named
    now, not in the middle of an epoch."""
    for dataloader in dataloaders:
        for path, _ in dataloader.dataset.samples:
            data_setup.load_image(path)


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    """Train and save a model as the options say; return the results per epoch."""
    parser = _parser()
    args = parser.parse_args(argv)
    for name in ("epochs", "batch_size", "hidden_units", "img_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if not args.learning_rate > 0:
        parser.error("--learning-rate must be positive")

    model_dir = _check_model_dir(parser, args)
    utils.set_seeds(args.seed)
    device = utils.get_device()
    transform = transforms.Compose(
        [transforms.Resize((args.img_size, args.img_size)), transforms.ToTensor()]
    )
    try:
        train_dataloader, test_dataloader, class_names = data_setup.create_dataloaders(
            args.train_dir, args.test_dir, transform, args.batch_size
        )
        _check_images(train_dataloader, test_dataloader)
    except (OSError, ValueError) as error:
        parser.error(str(error))
    options = {"num_classes": len(class_names), "img_size": args.img_size}
    if args.model == "tinyvgg":
        options["hidden_units"] = args.hidden_units
    model = model_builder.build_model(args.model, **options).to(device)
    try:
        results = engine.train(
            model=model,
            train_dataloader=train_dataloader,
            test_dataloader=test_dataloader,
            optimizer=torch.optim.Adam(model.parameters(), lr=args.learning_rate),
            loss_fn=torch.nn.CrossEntropyLoss(),
            epochs=args.epochs,
            device=device,
        )
    except OSError as error:  # an image that does not decode, mid-epoch
        sys.exit(f"error: training stopped, an image could not be read: {error}")
    utils.save_model(model, model_dir, f"{args.model}.pth")
    return results


if __name__ == "__main__":
    main()
