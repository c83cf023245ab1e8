"""Seconds of training to a Fashion-MNIST test accuracy on a CPU: today's path against the fast one.

Issue 28's targets, on 2 idle cores: a plain ViT to 88% within 300 s of training and CCT to 90%
within 120 s, 3 seeds each, and CCT's time to 90% at least 2x shorter than on the path the
book used before (measured in the same run).

* **today's path** (chapter 10's five-minute run before this benchmark): CCT-2/3x2 on images
  padded to 32x32, float tensors through a ``DataLoader`` (one ``__getitem__`` per image),
  random flips as a batch transform, batches of 128, the 200-epoch CCT recipe's optimiser and
  schedule at lr 2e-3 compressed into the 5 epochs that chapter 10 planned for five minutes
  on the machine it was made on (fixed here, so that the old path is the same on every
  machine), bfloat16 autocast.
* **the fast path**: the images stay 28x28 uint8 in memory and are flipped and normalised a
  chunk at a time (``DeviceLoader``); the step's precision and attention kernel are the
  fastest of those in ``training.speed.CANDIDATES`` on this machine (``fastest_step``); a
  warmup-cosine schedule over a number of steps, fixed (CCT) or planned to end inside the
  budget (``steps_for_budget``, the ViT).

The clock counts training only: test passes (all 10,000 test images, in float32) pause it.
A run is tested ``--tests`` times, evenly over its schedule.

    python benchmarks/time_to_accuracy.py                          # everything, ~30 min
    python benchmarks/time_to_accuracy.py --runs cct --seeds 0     # one fast CCT run
"""

from __future__ import annotations

import argparse
import functools
import itertools
import platform
import statistics
import time

import torch
from torch import nn

from going_modular.data.augment import random_flip_batch
from going_modular.models import build_model
from going_modular.utils import set_seeds
from vitbook.data.datasets import (
    FASHION_MNIST_MEAN,
    FASHION_MNIST_STD,
    fashion_mnist_tensors,
    get_fashion_mnist,
)
from vitbook.data.gpu_augment import BatchAugment, DeviceLoader, to_uint8_images
from vitbook.data.gpu_augment.crops import random_hflip
from vitbook.training.cct_recipes import CCT_CIFAR_200
from vitbook.training.experiments import tensor_loaders
from vitbook.training.loop import evaluate, fit
from vitbook.training.recipe import Recipe
from vitbook.training.speed import (
    StepOptions,
    fastest_step,
    prefer_channels_last,
    steps_for_budget,
)

# The fast path's runs: model, its keywords, batch, learning rate, AdamW's betas, length
# (steps, or a budget in seconds to plan them for), target. CCT's beta2 = 0.95 (GPT-3's,
# Brown et al. 2020, appendix B) lets the second-moment estimate follow a short run's
# fast-changing gradients: +0.4 and +0.5 points at 3,300 steps of 64 over 0.999 (seeds 0
# and 1, benchmarks/README.md).
FAST = {
    "cct": dict(
        model="cct_2_3x2",
        kwargs=dict(attn_drop_rate=0.0, drop_path_rate=0.0),
        batch=64,
        lr=2e-3,
        betas=(0.9, 0.95),
        steps=3_400,  # 217,600 images, whatever the machine's speed
        target=0.90,
        flip=True,
    ),
    "vit": dict(  # chapter 6's ViT
        model="vit_4_16",
        kwargs=dict(
            patch_size=7,
            dim=64,
            depth=4,
            heads=4,
            mlp_ratio=2.0,
            drop_rate=0.0,
            pos_drop_rate=0.0,
        ),
        batch=128,
        lr=2e-3,
        betas=(0.9, 0.999),  # PyTorch's default
        budget=275,
        target=0.88,
        flip=True,
    ),
}
# CCT reaches 90% after 200,000-240,000 images on every machine so far, so its run is a
# fixed number of steps and its time to 90% is the machine's speed. The ViT's steps are
# planned for a budget below its 300 s, from the best of a few timed steps (the whole run,
# with loader, augmentation and schedule, is 1-10% slower).
TODAY_EPOCHS = (
    5  # chapter 10's five-minute run, as planned on the machine it was made on
)


def cpu_model() -> str:
    """The processor's model name (Linux), else what platform knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class Resuming:
    """``loader``'s batches, pass after pass, each iteration going on where the last one
    stopped. ``fit`` starts an epoch with a new iteration; epochs cut short to test in
    between (``max_steps_per_epoch``) then see the images in the order one long run would,
    each once per pass, instead of a fresh shuffle of the data after every test."""

    def __init__(self, loader):
        self.loader, self.batch_size = loader, loader.batch_size
        self._batches = itertools.chain.from_iterable(itertools.repeat(loader))

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        return self._batches


def timed_fit(model, train_loader, test_loader, recipe, tests, options) -> list[tuple]:
    """Train with ``recipe`` (``steps`` in total), testing ``tests`` times; return the curve
    [(training seconds, images seen, test accuracy)]."""
    recipe = recipe.replace(max_steps_per_epoch=-(-recipe.steps // tests))
    train_loader = Resuming(train_loader)
    curve = []

    def test(_, results: dict) -> bool:
        _, acc = evaluate(
            model, test_loader, nn.CrossEntropyLoss(), "cpu", progress=False
        )
        seen = sum(results["steps"]) * train_loader.batch_size
        curve.append((sum(results["train_seconds"]), seen, acc))
        print(f"    {curve[-1][0]:6.1f} s, {seen:>9,} images: {acc:.4f}", flush=True)
        return False

    with options.attention(model):
        fit(
            model,
            train_loader,
            None,
            recipe,
            device="cpu",
            callbacks=[test],
            progress=False,
        )
    return curve


def fast_run(name: str, seed: int, data: dict, tests: int, scale: float) -> list[tuple]:
    spec = FAST[name]
    set_seeds(seed)
    model = build_model(
        spec["model"], num_classes=10, img_size=28, in_channels=1, **spec["kwargs"]
    )
    prefer_channels_last(model)
    flips = [random_hflip] if spec["flip"] else []
    augment = BatchAugment(flips, (FASHION_MNIST_MEAN,), (FASHION_MNIST_STD,))
    train = DeviceLoader(*data["uint8_train"], spec["batch"], augment, drop_last=True)
    test = DeviceLoader(
        *data["uint8_test"],
        1000,
        BatchAugment([], (FASHION_MNIST_MEAN,), (FASHION_MNIST_STD,)),
        shuffle=False,
    )
    images, labels = next(iter(train))
    options, rates = fastest_step(model, images, labels)
    print(
        "  step options (img/s): "
        + ", ".join(f"{o}: {r:.0f}" for o, r in rates.items())
        + f" -> {options}",
        flush=True,
    )
    if "steps" in spec:
        steps, plan = max(1, round(scale * spec["steps"])), "fixed"
    else:
        steps = steps_for_budget(scale * spec["budget"], rates[options], spec["batch"])
        plan = f"planned for {scale * spec['budget']:.0f} s"
    recipe = Recipe(
        lr=spec["lr"],
        optimizer=functools.partial(torch.optim.AdamW, betas=spec["betas"]),
        weight_decay=0.05,
        schedule="warmup_cosine",
        warmup_steps=steps // 20,
        label_smoothing=0.1,
        amp=options.amp,
        steps=steps,
    )
    print(
        f"  {steps} steps of {spec['batch']} ({plan})",
        flush=True,
    )
    return timed_fit(model, train, test, recipe, tests, options)


def today_run(seed: int, data: dict, tests: int, scale: float) -> list[tuple]:
    set_seeds(seed)
    model = build_model("cct_2_3x2", num_classes=10, img_size=32, in_channels=1)
    prefer_channels_last(model)
    train, test = tensor_loaders(
        data["float_train"], data["float_test"], 128, seed=seed
    )
    epochs = max(1, round(scale * TODAY_EPOCHS))
    recipe = CCT_CIFAR_200.replace(lr=2e-3, policy=None, crop=None, hflip=False)
    recipe = recipe.training_recipe(len(train), epochs).replace(
        amp=True, batch_transform=random_flip_batch
    )
    steps = epochs * len(train)
    print(f"  {epochs} epochs ({steps} steps of 128)", flush=True)
    return timed_fit(
        model,
        train,
        test,
        recipe.replace(epochs=1, steps=steps),
        tests,
        StepOptions(amp=True),
    )


def first_time(curve: list[tuple], target: float) -> float | None:
    return next((s for s, _, acc in curve if acc >= target), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs",
        nargs="+",
        default=["cct", "vit", "today"],
        choices=["cct", "vit", "today"],
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--today-seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--tests", type=int, default=20, help="test passes per run")
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="budgets and step counts times this (a smoke test: 0.05)",
    )
    args = parser.parse_args()
    train, test = get_fashion_mnist(True), get_fashion_mnist(False)
    data = {
        "uint8_train": (to_uint8_images(train), train.targets.long()),
        "uint8_test": (to_uint8_images(test), test.targets.long()),
        "float_train": fashion_mnist_tensors(True, pad_to_32=True),
        "float_test": fashion_mnist_tensors(False, pad_to_32=True),
    }
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print(
        f"CPU: {cpu_model()}; {torch.get_num_threads()} threads; torch "
        f"{torch.__version__}; load average {load} at the start. Data: Fashion-MNIST, "
        f"{len(train):,} training and all {len(test):,} test images."
    )
    times: dict[str, list] = {}
    finals: dict[str, list] = {}
    start = time.perf_counter()
    for name in args.runs:
        seeds = args.today_seeds if name == "today" else args.seeds
        for seed in seeds:
            print(f"{name}, seed {seed}:", flush=True)
            if name == "today":
                curve = today_run(seed, data, args.tests, args.scale)
            else:
                curve = fast_run(name, seed, data, args.tests, args.scale)
            target = 0.88 if name == "vit" else 0.90
            times.setdefault(name, []).append(first_time(curve, target))
            finals.setdefault(name, []).append(curve[-1][2])
    print(f"\nCPU: {cpu_model()}; whole benchmark {time.perf_counter() - start:.0f} s")
    for name in times:
        target = 0.88 if name == "vit" else 0.90
        shown = ", ".join(
            "not reached" if t is None else f"{t:.0f} s" for t in times[name]
        )
        print(
            f"{name:>6}: to {target:.0%}: {shown}; final accuracy "
            + ", ".join(f"{a:.4f}" for a in finals[name])
        )
    if "today" in times and "cct" in times:
        if None in times["today"] + times["cct"]:
            print("CCT speed-up: not measurable (a run did not reach 90%)")
        else:
            ratio = statistics.mean(times["today"]) / statistics.mean(times["cct"])
            print(f"CCT's time to 90%: today's path / fast path = {ratio:.2f}x")


if __name__ == "__main__":
    main()
