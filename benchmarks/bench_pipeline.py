"""Can the input pipeline feed the model? Images/s of each, side by side, as ratios.

Sections (all by default, or pick with ``--sections``):

* ``pipeline``: for each recipe (none, cct, cct200) the images/s of the per-image CPU pipeline
  (decode as torchvision's CIFAR10 does, augment, collate into batches of 128) with 0, 1 and
  2 loader workers, against the images/s of a training step of CCT-2/3x2 and CCT-7/3x1;
  prints pipeline / model (below 1: the model waits for data).
* ``batched``: one core each, the per-image PIL pipeline against the batched path of
  :mod:`vitbook.data.gpu_augment` (uint8 tensors, augmented a chunk at a time) on the same
  images; prints batched / per-image.
* ``engine``: ``engine.train_step`` (the loop ``engine.fit`` runs each epoch) against a
  bare training loop on the same batches.
* ``options``: the training-step options of a GPU run, on this CPU: fused AdamW,
  channels_last weights, and ``torch.compile`` (with ``--compile``; it takes minutes).
* ``cuda``: the pipeline and models on a GPU, when there is one (skipped otherwise).

The images are real: Fashion-MNIST's, padded to 32x32 and repeated to RGB, so that they have
CIFAR-10's shape. Everything compared is timed in alternating order, repeat after repeat;
medians are reported.

    python benchmarks/bench_pipeline.py                    # everything, a few minutes
    python benchmarks/bench_pipeline.py --sections batched engine --repeats 5
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import time
from functools import partial
from statistics import median

import numpy as np
import torch
from PIL import Image
from timing import interleave
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms

from going_modular import engine
from going_modular.data import augment
from going_modular.models import build_model
from vitbook.data import gpu_augment
from vitbook.data.datasets import get_fashion_mnist
from vitbook.training import cct_recipes
from vitbook.training.timing import images_per_second

RECIPES = ("none", "cct", "cct200")
MODELS = ("cct_2_3x2", "cct_7_3x1")
SECTIONS = ("pipeline", "batched", "engine", "options", "cuda")


class ArrayImages(Dataset):
    """uint8 images (N, H, W, 3) decoded one at a time as torchvision's CIFAR10 does."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, transform):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int):
        return self.transform(Image.fromarray(self.images[i])), int(self.labels[i])


def cifar_shaped_images(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` Fashion-MNIST training images as (n, 32, 32, 3) uint8, and labels."""
    data = get_fashion_mnist(train=True)
    grey = np.pad(np.asarray(data.data[:n]), ((0, 0), (2, 2), (2, 2)))
    return np.repeat(grey[..., None], 3, axis=3), np.asarray(data.targets[:n])


def train_transform(recipe: str):
    """The per-image training transform of ``recipe`` (as ``vitbook.train`` uses)."""
    if recipe == "none":
        return transforms.Compose([transforms.Resize((32, 32)), transforms.ToTensor()])
    return cct_recipes.RECIPES[recipe].train_transform(32)


def batched_transform(recipe: str) -> gpu_augment.BatchAugment:
    """The batched twin of :func:`train_transform` (plain scaling to [0, 1] for none)."""
    if recipe == "none":
        return gpu_augment.BatchAugment([], (0.0,), (1.0,))
    mean, std = augment.CIFAR10_MEAN, augment.CIFAR10_STD
    return gpu_augment.recipe_augment(cct_recipes.RECIPES[recipe], mean, std)


def loader_rate(loader_iter, batches: int, queued: int = 0) -> float:
    """Images/s of the next ``batches`` batches of ``loader_iter``, after taking the
    ``queued`` batches that workers prepared in advance (they would count as free)."""
    for _ in itertools.islice(loader_iter, queued):
        pass
    start, seen = time.perf_counter(), 0
    for X, _ in itertools.islice(loader_iter, batches):
        seen += len(X)
    return seen / (time.perf_counter() - start)


def forever(loader):
    """Batches of ``loader`` without end (a new epoch whenever one runs out)."""
    while True:
        yield from loader


def model_rate_fn(name: str, batch: int, device: str, bf16: bool, steps: int):
    """A function returning the training step's images/s of model ``name``."""
    torch.manual_seed(0)
    model = build_model(name, num_classes=10, img_size=32).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    images = torch.randn(batch, 3, 32, 32, device=device)
    labels = torch.randint(0, 10, (batch,), device=device)
    images_per_second(model, images, labels, steps=1, warmup=0, amp=bf16, optimizer=opt)
    return partial(
        images_per_second,
        model,
        images,
        labels,
        steps=steps,
        warmup=0,
        amp=bf16,
        optimizer=opt,
    )


def section_pipeline(args, arrays, device: str = "cpu") -> None:
    images, labels = arrays
    print(
        f"\n== pipeline vs model ({device}): batch {args.batch_size}, "
        f"{torch.get_num_threads()} torch threads, {'bf16' if args.bf16 else 'fp32'} =="
    )
    runs, loaders = {}, []
    for recipe in RECIPES:
        dataset = ArrayImages(images, labels, train_transform(recipe))
        for workers in args.workers:
            loader = DataLoader(
                dataset,
                batch_size=args.batch_size,
                shuffle=True,
                num_workers=workers,
                persistent_workers=workers > 0,
                pin_memory=device == "cuda",
            )
            it = forever(loader)
            loader_rate(it, 2)  # start the workers, fill their queues
            queued = workers * loader.prefetch_factor if workers else 0
            runs[f"{recipe}/w{workers}"] = partial(
                loader_rate, it, args.batches, queued
            )
            loaders.append(loader)
    for name in args.models:
        runs[name] = model_rate_fn(
            name, args.batch_size, device, args.bf16, args.model_steps
        )
    rates = {k: median(v) for k, v in interleave(runs, args.repeats).items()}
    header = f"{'pipeline':<14}{'img/s':>9}" + "".join(
        f"{'/ ' + m:>16}" for m in args.models
    )
    print(header)
    print(
        f"{'model img/s':<14}{'':>9}"
        + "".join(f"{rates[m]:>16.1f}" for m in args.models)
    )
    for key in runs:
        if key in args.models:
            continue
        print(
            f"{key:<14}{rates[key]:>9.0f}"
            + "".join(f"{rates[key] / rates[m]:>16.2f}" for m in args.models)
        )


def section_batched(args, arrays) -> None:
    images, labels = arrays
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    print("\n== batched vs per-image augmentation, one core each ==")
    uint8 = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()
    targets = torch.from_numpy(labels)
    runs = {}
    for recipe in RECIPES:
        per_image = DataLoader(
            ArrayImages(images, labels, train_transform(recipe)),
            batch_size=args.batch_size,
            shuffle=True,
        )
        batched = gpu_augment.DeviceLoader(
            uint8, targets, args.batch_size, batched_transform(recipe)
        )
        # Time whole chunks only: the batched loader augments a chunk at its first batch,
        # so a window must start at a chunk and span whole chunks (and an epoch must hold
        # whole chunks) for every window to do the same work.
        chunk = batched.chunk // args.batch_size
        whole = len(uint8) // batched.chunk * batched.chunk
        batched.images, batched.labels = uint8[:whole], targets[:whole]
        for name, loader, n, warm in (
            ("per-image", per_image, args.batches, 1),
            ("batched", batched, chunk * -(-args.batches // chunk), chunk),
        ):
            it = forever(loader)
            loader_rate(it, warm)
            runs[f"{recipe}/{name}"] = partial(loader_rate, it, n)
    rates = {k: median(v) for k, v in interleave(runs, args.repeats).items()}
    for recipe in RECIPES:
        one, many = rates[f"{recipe}/per-image"], rates[f"{recipe}/batched"]
        print(
            f"{recipe:<7} per-image {one:8.0f} img/s | batched {many:8.0f} img/s | "
            f"ratio batched / per-image {many / one:6.1f}"
        )
    torch.set_num_threads(threads)


def bare_loop(model, optimizer, loss_fn, batches) -> float:
    """The reference: the fewest lines that train on ``batches``; returns images/s."""
    start, seen = time.perf_counter(), 0
    model.train()
    for X, y in batches:
        loss = loss_fn(model(X), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        seen += len(X)
    return seen / (time.perf_counter() - start)


def engine_loop(model, optimizer, loss_fn, batches) -> float:
    start = time.perf_counter()
    engine.train_step(model, batches, loss_fn, optimizer, "cpu")
    return sum(len(X) for X, _ in batches) / (time.perf_counter() - start)


def section_engine(args) -> None:
    print(
        "\n== engine.train_step vs a bare loop (same model, batches, optimizer), "
        f"batch {args.batch_size} =="
    )
    for name in args.models:
        torch.manual_seed(0)
        batches = [
            (
                torch.randn(args.batch_size, 3, 32, 32),
                torch.randint(0, 10, (args.batch_size,)),
            )
            for _ in range(args.model_steps)
        ]
        runs = {}
        for kind, fn in (("bare", bare_loop), ("engine", engine_loop)):
            model = build_model(name, num_classes=10, img_size=32)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
            fn(model, opt, nn.CrossEntropyLoss(), batches[:1])
            runs[kind] = partial(fn, model, opt, nn.CrossEntropyLoss(), batches)
        rates = {k: median(v) for k, v in interleave(runs, args.repeats).items()}
        print(
            f"{name}: bare {rates['bare']:.1f} img/s, engine {rates['engine']:.1f} "
            f"img/s, ratio engine / bare {rates['engine'] / rates['bare']:.3f}"
        )


def section_options(args) -> None:
    print(
        f"\n== training-step options on this CPU ({'bf16' if args.bf16 else 'fp32'}) =="
    )
    for name in args.models:
        images = torch.randn(args.batch_size, 3, 32, 32)
        labels = torch.randint(0, 10, (args.batch_size,))
        variants = {"baseline": {}, "fused AdamW": {"fused": True}}
        variants["channels_last"] = {"channels_last": True}
        if args.compile:
            variants["compile"] = {"compile": True}
        runs = {}
        for label, opt in variants.items():
            torch.manual_seed(0)
            model = build_model(name, num_classes=10, img_size=32).train()
            x = images
            if opt.get("channels_last"):
                model = model.to(memory_format=torch.channels_last)
                x = images.contiguous(memory_format=torch.channels_last)
            optimizer = torch.optim.AdamW(
                model.parameters(), lr=1e-4, fused=opt.get("fused", None)
            )
            if opt.get("compile"):
                model = torch.compile(model)
                start = time.perf_counter()
            step = partial(images_per_second, model, x, labels, warmup=0, amp=args.bf16)
            step(steps=2, optimizer=optimizer)
            if opt.get("compile"):
                print(f"  {name}: compiling took {time.perf_counter() - start:.0f} s")
            runs[label] = partial(step, steps=args.model_steps, optimizer=optimizer)
        rates = {k: median(v) for k, v in interleave(runs, args.repeats).items()}
        base = rates["baseline"]
        print(
            f"{name}: baseline {base:.1f} img/s | "
            + " | ".join(
                f"{k} {v:.1f} img/s, ratio {v / base:.3f}"
                for k, v in rates.items()
                if k != "baseline"
            )
        )


def section_cuda(args, arrays) -> None:
    if not torch.cuda.is_available():
        print("\n== cuda: skipped, no CUDA device on this machine ==")
        return
    section_pipeline(args, arrays, "cuda")
    images, labels = arrays
    uint8 = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()
    loaders = {
        recipe: gpu_augment.DeviceLoader(
            uint8,
            torch.from_numpy(labels),
            args.batch_size,
            batched_transform(recipe),
            device="cuda",
        )
        for recipe in RECIPES
    }

    def rate(loader) -> float:
        torch.cuda.synchronize()
        start, seen = time.perf_counter(), 0
        for X, _ in loader:
            seen += len(X)
        torch.cuda.synchronize()
        return seen / (time.perf_counter() - start)

    for loader in loaders.values():
        rate(loader)
    runs = {f"{r}/gpu-batched": partial(rate, loaders[r]) for r in RECIPES}
    rates = {k: median(v) for k, v in interleave(runs, args.repeats).items()}
    for key, value in rates.items():
        print(f"{key:<20} {value:10.0f} img/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=SECTIONS)
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads for the models"
    )
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--batches", type=int, default=8, help="batches per timed run")
    parser.add_argument(
        "--model-steps", type=int, default=2, help="training steps per timed run"
    )
    parser.add_argument("--repeats", type=int, default=3, help="alternating repeats")
    parser.add_argument("--images", type=int, default=4096, help="images in the data")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast for models")
    parser.add_argument(
        "--compile", action="store_true", help="also time torch.compile in options"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} logical CPUs, load average "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}; "
        f"cuda: {torch.cuda.get_device_name() if torch.cuda.is_available() else 'none'}"
    )
    arrays = cifar_shaped_images(args.images)
    print(f"Data: {len(arrays[0])} Fashion-MNIST training images as 32x32 RGB uint8.")
    if "pipeline" in args.sections:
        section_pipeline(args, arrays)
    if "batched" in args.sections:
        section_batched(args, arrays)
    if "engine" in args.sections:
        section_engine(args)
    if "options" in args.sections:
        section_options(args)
    if "cuda" in args.sections:
        section_cuda(args, arrays)


if __name__ == "__main__":
    main()
