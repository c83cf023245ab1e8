"""Small stand-ins for the online datasets and weights, in the libraries' own on-disk formats.

The dry run (tests/test_dry_run.py) executes every chapter in the gpu setting with the
network blocked except 127.0.0.1, where a local ``http.server`` (``BOOK_MIRROR``) serves
what a Colab reader downloads, fetched by the same code and cells:

* CIFAR-10: torchvision's ``cifar-10-python.tar.gz`` (pickled batches and meta), fetched by
  torchvision's own download code from the mirror; the real files' md5s cannot match, so the
  getter skips them when ``BOOK_FIXTURES=1`` (see ``datasets.FixtureCIFAR10``).
* MNIST: the four ``*-ubyte.gz`` idx files, likewise.
* pizza/steak/sushi: the course's zips of ``train/`` and ``test/`` class folders of JPEGs.
* ImageNet ViT-B/16 weights: a state dict with torchvision's keys and shapes (random
  values, all views of one shared storage so the file stays ~10 MB) at the file name
  torchvision expects in ``TORCH_HOME/hub/checkpoints``. torch.hub checks a hash only when
  it downloads, never for a file already in its cache.

The images are class-coded (each class its own colour or pattern, plus noise), so anything
that trains on them can be checked to learn. Everything is generated at test time; nothing
here is committed as data.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import io
import os
import pickle
import struct
import tarfile
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
    "chapter_data_dir",
    "class_coded_images",
    "make_cifar10",
    "make_cifar10_tarball",
    "make_food_zip",
    "make_mnist",
    "make_mnist_gz",
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
# and the CLI subprocesses the chapters start) refuses connections beyond this machine, and
# torchvision's CIFAR-10 and MNIST download from the test mirror, checked against the
# fixtures' md5s (filled in by write_network_guard), through torchvision's own code.
NETWORK_GUARD = '''\
"""Dry run: block the network except 127.0.0.1; torchvision's CIFAR-10 and MNIST from the
test mirror (written by tests/dry_run_fixtures.py)."""
import importlib.abc
import socket
import sys

_LOCAL = {"127.0.0.1", "::1", "localhost"}
_connect, _getaddrinfo = socket.socket.connect, socket.getaddrinfo
MIRROR, MD5 = "", {}  # filled in by write_network_guard


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


def _point_at_mirror(module):
    if module.__name__ == "torchvision.datasets.cifar":
        cifar = module.CIFAR10
        cifar.url = f"{MIRROR}/{cifar.filename}"
        cifar.tgz_md5 = MD5[cifar.filename]
        cifar.train_list = [[name, MD5[name]] for name, _ in cifar.train_list]
        cifar.test_list = [[name, MD5[name]] for name, _ in cifar.test_list]
        cifar.meta = {**cifar.meta, "md5": MD5[cifar.meta["filename"]]}
    else:
        mnist = module.MNIST
        mnist.mirrors = [f"{MIRROR}/"]
        mnist.resources = [(name, MD5[name]) for name, _ in mnist.resources]


class _AfterImport(importlib.abc.MetaPathFinder):
    """Patch the two modules right after they are first imported."""

    names = {"torchvision.datasets.cifar", "torchvision.datasets.mnist"}

    def find_spec(self, name, path, target=None):
        if name not in self.names:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                execute = spec.loader.exec_module

                def exec_module(module, execute=execute):
                    execute(module)
                    _point_at_mirror(module)

                spec.loader.exec_module = exec_module
                return spec
        return None


if MIRROR:
    sys.meta_path.insert(0, _AfterImport())
'''


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def class_coded_images(
    labels: np.ndarray, shape: tuple[int, ...], rng: np.random.Generator
) -> np.ndarray:
    """uint8 images of ``shape`` (H, W) or (H, W, C), one per label: class k is bright in
    its own band of rows (and, in colour, its own mix of channels), plus noise, so a linear
    model on the pixels separates the classes."""
    classes = int(labels.max()) + 1
    images = rng.normal(60.0, 25.0, (len(labels), *shape))
    bands = np.array_split(np.arange(shape[0]), classes)
    tint = 0.5 + 0.5 * rng.random((classes, *shape[2:]))
    for i, label in enumerate(labels):
        images[i, bands[label]] += 150.0 * tint[label]
    return images.clip(0, 255).astype(np.uint8)


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
        images = class_coded_images(labels, (32, 32, 3), rng)  # HWC -> CHW rows
        data = images.transpose(0, 3, 1, 2).reshape(len(labels), 3 * 32 * 32)
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


def make_cifar10_tarball(mirror: Path, **sizes: int) -> Path:
    """``mirror/cifar-10-python.tar.gz`` as CIFAR-10's site serves it (see make_cifar10)."""
    mirror.mkdir(parents=True, exist_ok=True)
    folder = make_cifar10(mirror / "cifar-build", **sizes)
    target = mirror / "cifar-10-python.tar.gz"
    with tarfile.open(target, "w:gz") as archive:
        archive.add(folder, arcname=folder.name)
    return target


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
        labels = np.arange(n) % 10
        images = class_coded_images(labels, (28, 28), rng)
        (raw / f"{split}-images-idx3-ubyte").write_bytes(_idx(images))
        (raw / f"{split}-labels-idx1-ubyte").write_bytes(_idx(labels))
    return raw


def make_mnist_gz(mirror: Path, **sizes: int) -> list[Path]:
    """MNIST's four ``*-ubyte.gz`` files in ``mirror``, as its mirrors serve them."""
    raw = make_mnist(mirror / "mnist-build", **sizes)
    gzipped = []
    for path in sorted(raw.iterdir()):
        target = mirror / f"{path.name}.gz"
        target.write_bytes(gzip.compress(path.read_bytes()))
        gzipped.append(target)
    return gzipped


def make_food_zip(
    path: Path, train_per_class: int = 2, test_per_class: int = 1, seed: int = 0
) -> Path:
    """A pizza/steak/sushi-shaped zip: ``train/<class>/*.jpg`` and ``test/<class>/*.jpg``."""
    rng = _rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        for split, n in (("train", train_per_class), ("test", test_per_class)):
            labels = np.repeat(np.arange(len(FOOD_CLASSES)), n)
            photos = class_coded_images(labels, (96, 128, 3), rng)
            for k, (label, pixels) in enumerate(zip(labels, photos)):
                buffer = io.BytesIO()
                Image.fromarray(pixels).save(buffer, format="JPEG")
                name = f"{split}/{FOOD_CLASSES[label]}/fixture_{k % n}.jpg"
                archive.writestr(name, buffer.getvalue())
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


def write_network_guard(
    folder: Path, mirror: str = "", md5: dict[str, str] | None = None
) -> Path:
    """Write the ``sitecustomize.py`` that blocks the network and, given a ``mirror`` URL
    and the md5s of its files, points torchvision's CIFAR-10 and MNIST downloads there;
    put ``folder`` on PYTHONPATH."""
    folder.mkdir(parents=True, exist_ok=True)
    filled = f"MIRROR, MD5 = {mirror!r}, {md5 or {}!r}"
    code = NETWORK_GUARD.replace('MIRROR, MD5 = "", {}', filled, 1)
    (folder / "sitecustomize.py").write_text(code)
    return folder


def mirror_md5s(mirror: Path) -> dict[str, str]:
    """The md5 of every file torchvision checks: the served archives and CIFAR-10's
    extracted batches (``make_cifar10_tarball`` leaves them in ``cifar-build``)."""
    files = [p for p in mirror.iterdir() if p.is_file()]
    files += list((mirror / "cifar-build" / "cifar-10-batches-py").iterdir())
    return {p.name: hashlib.md5(p.read_bytes()).hexdigest() for p in files}


@contextmanager
def dry_run_environment(root: Path) -> Iterator[dict[str, str]]:
    """Make every fixture under ``root`` and serve the downloads; yields the dry run's
    environment variables. ``BOOK_DATA_DIR`` holds only Fashion-MNIST (the offline data):
    the rest is downloaded from the mirror (give each chapter its own data folder, with
    :func:`chapter_data_dir`, so that two chapters never download into one folder)."""
    from vitbook.data.datasets import prepare_fashion_mnist

    data, mirror = root / "data", root / "mirror"
    checkout_data = Path(__file__).resolve().parents[1] / "data"
    prepare_fashion_mnist(checkout_data)  # `make data` has done it: a quick check
    data.mkdir(parents=True)
    (data / "FashionMNIST").symlink_to(checkout_data / "FashionMNIST", True)
    make_cifar10_tarball(mirror)
    make_mnist_gz(mirror)
    make_vit_b_16_weights(root / "torch_home")
    make_food_zip(mirror / "pizza_steak_sushi.zip", 1, 1)
    make_food_zip(mirror / "pizza_steak_sushi_20_percent.zip", 4, 2, seed=1)
    with serve(mirror) as url:
        guard = write_network_guard(root / "network_guard", url, mirror_md5s(mirror))
        python_path = os.pathsep.join(
            [str(guard), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
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


def chapter_data_dir(shared: Path, folder: Path) -> Path:
    """A fresh data folder for one chapter: Fashion-MNIST linked from ``shared``, nothing
    else, so the chapter downloads the rest from the mirror itself."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "FashionMNIST").symlink_to(shared / "FashionMNIST", True)
    return folder
