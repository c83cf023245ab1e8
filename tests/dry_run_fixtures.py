"""Small stand-ins for the online datasets and weights, in the libraries' own on-disk formats.

The dry run (tests/test_dry_run.py) executes every chapter in the gpu setting with the
network blocked; these fixtures replace what a Colab reader downloads:

* CIFAR-10: torchvision's ``cifar-10-batches-py`` folder (pickled batches and meta), random
  images. torchvision checks the real files' md5s, which a fixture cannot match, so the
  getter skips them when ``BOOK_FIXTURES=1`` (see ``datasets.FixtureCIFAR10``).
* MNIST: the four idx files in ``MNIST/raw``, random digits.
* pizza/steak/sushi: a zip with the course's ``train/`` and ``test/`` class folders of
  random JPEGs, served by a local ``http.server`` on 127.0.0.1 (``BOOK_MIRROR``).
* ImageNet ViT-B/16 weights: a state dict with torchvision's keys and shapes (random
  values, all views of one shared storage so the file stays ~10 MB) at the file name
  torchvision expects in ``TORCH_HOME/hub/checkpoints``. torch.hub checks a hash only when
  it downloads, never for a file already in its cache.

Everything is generated at test time; nothing here is committed as data.
"""

from __future__ import annotations

import functools
import http.server
import io
import os
import pickle
import struct
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from PIL import Image

__all__ = [
    "CIFAR10_CLASSES",
    "dry_run_environment",
    "make_cifar10",
    "make_food_zip",
    "make_mnist",
    "make_vit_b_16_weights",
    "serve",
    "write_network_guard",
]

CIFAR10_CLASSES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
FOOD_CLASSES = ("pizza", "steak", "sushi")

# A sitecustomize module: every Python process started with it on PYTHONPATH (the kernel,
# and the CLI subprocesses the chapters start) refuses connections beyond this machine.
NETWORK_GUARD = '''\
"""Dry run: block the network except 127.0.0.1 (written by tests/dry_run_fixtures.py)."""
import socket

_LOCAL = {"127.0.0.1", "::1", "localhost"}
_connect, _getaddrinfo = socket.socket.connect, socket.getaddrinfo


def _blocked(host):
    return OSError(101, f"Network is unreachable (dry run: {host} is blocked)")


def connect(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in _LOCAL:
        raise _blocked(address[0])
    return _connect(self, address)


def getaddrinfo(host, *args, **kwargs):
    if host not in _LOCAL and host is not None:
        raise socket.gaierror(socket.EAI_NONAME, f"dry run: {host} is blocked")
    return _getaddrinfo(host, *args, **kwargs)


socket.socket.connect, socket.getaddrinfo = connect, getaddrinfo
'''


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def make_cifar10(
    root: Path, train_per_class: int = 20, test_per_class: int = 10, seed: int = 0
) -> Path:
    """Write ``root/cifar-10-batches-py`` as torchvision reads it; returns that folder."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    rng = _rng(seed)

    def batch(per_class: int, label: str) -> dict:
        labels = np.repeat(np.arange(10), per_class)
        rng.shuffle(labels)
        data = rng.integers(0, 256, (len(labels), 3 * 32 * 32), dtype=np.uint8)
        names = [f"fixture_{label}_{i}.png" for i in range(len(labels))]
        return {
            "batch_label": label,
            "labels": labels.tolist(),
            "data": data,
            "filenames": names,
        }

    train = batch(train_per_class, "training")
    for k, rows in enumerate(np.array_split(np.arange(len(train["labels"])), 5), 1):
        part = {
            "batch_label": f"training batch {k} of 5",
            "labels": [train["labels"][i] for i in rows],
            "data": train["data"][rows],
            "filenames": [train["filenames"][i] for i in rows],
        }
        (folder / f"data_batch_{k}").write_bytes(pickle.dumps(part))
    (folder / "test_batch").write_bytes(pickle.dumps(batch(test_per_class, "test")))
    meta = {
        "label_names": list(CIFAR10_CLASSES),
        "num_cases_per_batch": 10_000,
        "num_vis": 3072,
    }
    (folder / "batches.meta").write_bytes(pickle.dumps(meta))
    return folder


def _idx(array: np.ndarray) -> bytes:
    """The idx format of MNIST's files: magic (0, 0, dtype 0x08, ndim), sizes, data."""
    header = struct.pack(">HBB", 0, 0x08, array.ndim)
    header += struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(np.uint8).tobytes()


def make_mnist(
    root: Path, n_train: int = 600, n_test: int = 100, seed: int = 0
) -> Path:
    """Write the four uncompressed idx files into ``root/MNIST/raw``; returns that folder."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rng = _rng(seed)
    for split, n in (("train", n_train), ("t10k", n_test)):
        images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        labels = np.arange(n) % 10
        (raw / f"{split}-images-idx3-ubyte").write_bytes(_idx(images))
        (raw / f"{split}-labels-idx1-ubyte").write_bytes(_idx(labels))
    return raw


def make_food_zip(
    path: Path, train_per_class: int = 2, test_per_class: int = 1, seed: int = 0
) -> Path:
    """A pizza/steak/sushi-shaped zip: ``train/<class>/*.jpg`` and ``test/<class>/*.jpg``."""
    rng = _rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        for split, n in (("train", train_per_class), ("test", test_per_class)):
            for name in FOOD_CLASSES:
                for i in range(n):
                    pixels = rng.integers(0, 256, (96, 128, 3), dtype=np.uint8)
                    buffer = io.BytesIO()
                    Image.fromarray(pixels).save(buffer, format="JPEG")
                    archive.writestr(
                        f"{split}/{name}/fixture_{i}.jpg", buffer.getvalue()
                    )
    return path


def make_vit_b_16_weights(torch_home: Path, seed: int = 0) -> Path:
    """ViT-B/16's ImageNet state dict, random values, where torch.hub's cache has it."""
    from torchvision.models import ViT_B_16_Weights, vit_b_16

    url = ViT_B_16_Weights.IMAGENET1K_V1.url
    target = torch_home / "hub" / "checkpoints" / url.rsplit("/", 1)[-1]
    target.parent.mkdir(parents=True, exist_ok=True)
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in vit_b_16(weights=None).state_dict().items()}
    generator = torch.Generator().manual_seed(seed)
    largest = max(shape.numel() for shape in shapes.values())
    shared = 0.02 * torch.randn(largest, generator=generator)
    state = {k: shared[: shape.numel()].view(shape) for k, shape in shapes.items()}
    torch.save(state, target)
    return target


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serve(directory: Path) -> Iterator[str]:
    """Serve ``directory`` over HTTP on 127.0.0.1 (a free port); yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def write_network_guard(folder: Path) -> Path:
    """Write the ``sitecustomize.py`` that blocks the network; put ``folder`` on PYTHONPATH."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(NETWORK_GUARD)
    return folder


@contextmanager
def dry_run_environment(root: Path) -> Iterator[dict[str, str]]:
    """Make every fixture under ``root``, serve the zips; yields the dry run's env vars."""
    data = root / "data"
    make_cifar10(data)
    make_mnist(data)
    make_vit_b_16_weights(root / "torch_home")
    make_food_zip(root / "mirror" / "pizza_steak_sushi.zip", 1, 1)
    make_food_zip(root / "mirror" / "pizza_steak_sushi_20_percent.zip", 4, 2, seed=1)
    guard = write_network_guard(root / "network_guard")
    python_path = os.pathsep.join(
        [str(guard), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    with serve(root / "mirror") as url:
        yield {
            "BOOK_DRY_RUN": "1",
            "BOOK_FIXTURES": "1",
            "BOOK_OFFLINE": "0",
            "BOOK_SETTING": "gpu",
            "BOOK_MIRROR": url,
            "BOOK_DATA_DIR": str(data),
            "BOOK_CHECKPOINT_DIR": str(root / "runs"),
            "TORCH_HOME": str(root / "torch_home"),
            "PYTHONPATH": python_path,
            "MPLBACKEND": "agg",
        }
