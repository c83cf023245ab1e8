"""Seconds of training to reach 85% and 90% Fashion-MNIST test accuracy, fp32 against bf16.

The CCT paper's speed anchor is 80% CIFAR-10 in under 30 minutes on a 12-core desktop CPU
(Hassani et al. 2021). This benchmark asks the same question of this machine, on the book's
offline data: Fashion-MNIST padded to 32x32, one grey channel, held in memory as tensors.

For each model (CCT-2/3x2, ViT-Lite-2/4, TinyVGG) and each precision (float32, bfloat16
autocast) it trains one seed with one recipe (AdamW, lr 2e-3, weight decay 0.05 on matrices,
label smoothing 0.1, linear warmup over 5% of the steps then cosine to zero over ``--epochs``
epochs, batches of 128, random horizontal flips; channels-last weights where that is faster,
see ``going_modular.utils.prefer_channels_last``) and tests on the 10,000 test images every
``--evals-per-epoch`` of an epoch. The clock counts training only (the test passes are paused
out, and always run in float32, so both precisions are judged alike). A run stops once it
reaches 90%, or at the end of its schedule.

    python benchmarks/time_to_accuracy.py                 # all models, fp32 and bf16 (~15 min)
    python benchmarks/time_to_accuracy.py --models cct_2_3x2 --precisions bf16
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from going_modular.data.augment import random_flip_batch
from going_modular.data.datasets import fashion_mnist_tensors
from going_modular.engine import evaluate, fit
from going_modular.models import build_model
from going_modular.training.experiments import tensor_loaders
from going_modular.training.recipe import Recipe
from going_modular.utils import prefer_channels_last, set_seeds

MODELS = {"cct_2_3x2": {}, "vit_lite_2_4": {}, "tinyvgg": {"hidden_units": 32}}
THRESHOLDS = (0.85, 0.90)


def time_to_accuracy(
    name: str,
    amp: bool,
    data: tuple,
    *,
    epochs: int,
    evals_per_epoch: int,
    seed: int = 0,
    batch_size: int = 128,
    lr: float = 2e-3,
) -> dict:
    """Train ``name`` and return its test-accuracy curve against training seconds."""
    (x, y), test = data
    set_seeds(seed)
    model = build_model(
        name, num_classes=10, img_size=32, in_channels=1, **MODELS[name]
    )
    prefer_channels_last(model)
    train_loader, test_loader = tensor_loaders((x, y), test, batch_size, seed=seed)
    total = epochs * len(train_loader)
    recipe = Recipe(
        lr=lr,
        weight_decay=0.05,
        schedule="warmup_cosine",
        warmup_steps=total // 20,
        label_smoothing=0.1,
        batch_transform=random_flip_batch,
        amp=amp,
        steps=total,  # in "epochs" of a fraction of an epoch, each tested
        max_steps_per_epoch=-(-len(train_loader) // evals_per_epoch),
    )
    curve = []

    def test_in_float32(_, results: dict) -> bool:
        """Test after each part (in float32, so both precisions are judged alike); stop
        at the highest threshold."""
        _, acc = evaluate(
            model, test_loader, nn.CrossEntropyLoss(), "cpu", progress=False
        )
        seconds, steps = sum(results["train_seconds"]), sum(results["steps"])
        curve.append((seconds, steps / len(train_loader), acc))
        print(
            f"  {name:>12} {'bf16' if amp else 'fp32'}: epoch {curve[-1][1]:.2f}, "
            f"{seconds:6.1f} s, test accuracy {acc:.4f}",
            flush=True,
        )
        return acc >= max(THRESHOLDS)

    results = fit(
        model,
        train_loader,
        None,
        recipe,
        device="cpu",
        callbacks=[test_in_float32],
        progress=False,
    )
    images = sum(results["steps"]) * batch_size
    return {"curve": curve, "images_per_s": images / sum(results["train_seconds"])}


def first_time(curve: list[tuple[float, float, float]], threshold: float) -> str:
    """Seconds (and epochs) at the first test at or above ``threshold``, or 'not reached'."""
    for seconds, epoch, acc in curve:
        if acc >= threshold:
            return f"{seconds:6.0f} s ({epoch:.2f} ep)"
    return f"not reached (best {max(a for *_, a in curve):.1%})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument(
        "--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"]
    )
    parser.add_argument("--epochs", type=int, default=4, help="schedule length")
    parser.add_argument("--evals-per-epoch", type=int, default=4)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    data = (
        fashion_mnist_tensors(True, pad_to_32=True),
        fashion_mnist_tensors(False, pad_to_32=True),
    )
    print(
        f"Fashion-MNIST 32x32 grey, {len(data[0][1]):,} train / {len(data[1][1]):,} test "
        f"images; {torch.get_num_threads()} threads; {args.epochs}-epoch schedules"
    )
    rows = []
    for name in args.models:
        for precision in args.precisions:
            run = time_to_accuracy(
                name,
                precision == "bf16",
                data,
                epochs=args.epochs,
                evals_per_epoch=args.evals_per_epoch,
            )
            rows.append((name, precision, run))
    print(f"\n{'model':>12} {'prec':>5} {'img/s':>6} {'to 85%':>22} {'to 90%':>22}")
    for name, precision, run in rows:
        print(
            f"{name:>12} {precision:>5} {run['images_per_s']:6.0f} "
            + " ".join(f"{first_time(run['curve'], t):>22}" for t in THRESHOLDS)
        )
    for name in args.models:
        speeds = {p: r["images_per_s"] for n, p, r in rows if n == name}
        if len(speeds) == 2:
            print(f"{name}: bf16 trains {speeds['bf16'] / speeds['fp32']:.2f}x as fast")


if __name__ == "__main__":
    main()
