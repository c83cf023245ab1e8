"""Shared fixtures: every test runs offline, with its own data folder."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def offline_and_isolated(monkeypatch, tmp_path):
    """The library offline and without test fixtures (its own switches, and BOOK_OFFLINE=1
    for the book and any subprocess) and a fresh data folder (the library's, and
    BOOK_DATA_DIR), unless a test changes them; the switches are restored afterwards."""
    from vitbook.data import network, paths

    was = network.is_offline(), network.uses_fixtures()
    places = paths.set_data_dir(tmp_path / "data"), paths.mirror()
    debian = paths.debian_fashion_mnist()
    network.set_offline(True)
    network.set_fixtures(False)
    monkeypatch.setenv("BOOK_OFFLINE", "1")
    monkeypatch.setenv("BOOK_DATA_DIR", str(tmp_path / "data"))
    torch.manual_seed(0)
    yield
    network.set_offline(was[0])
    network.set_fixtures(was[1])
    paths.set_data_dir(places[0])
    paths.set_mirror(places[1])
    paths.set_debian_fashion_mnist(debian)


@pytest.fixture
def online():
    """The library may use the network in this test (loopback servers only in tests)."""
    from vitbook.data import network

    network.set_offline(False)
    yield
    network.set_offline(True)


@pytest.fixture(scope="session")
def dead_pid() -> int:
    """The process id of a process that has ended (for temporaries left by a killed run)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout)


@pytest.fixture(scope="session")
def docstring_corpus():
    """The 4-class docstring stand-in for AG News, built once per session."""
    from vitbook.data.standins import make_docstring_corpus

    return make_docstring_corpus()


@pytest.fixture(scope="session")
def photo():
    """A real 32x32 RGB photograph (scikit-image's astronaut), as a PIL image."""
    from PIL import Image
    from skimage import data

    return Image.fromarray(data.astronaut()).resize((32, 32), Image.BILINEAR)


@pytest.fixture(scope="session")
def texture_photos(tmp_path_factory):
    """The 3-class texture stand-in, made once per session."""
    from vitbook.data.standins import make_texture_photos

    return make_texture_photos(tmp_path_factory.mktemp("shared") / "texture_photos")


@pytest.fixture
def tiny_image_folder(tmp_path):
    """An ImageFolder ``tmp_path/own`` of 2 classes (a, b) of random 8x8 PNGs, 4 training
    and 2 test images each: the smallest ``--data-dir`` the CLI trains on."""
    from PIL import Image

    root = tmp_path / "own"
    generator = torch.Generator().manual_seed(0)
    for split, count in (("train", 4), ("test", 2)):
        for name in ("a", "b"):
            (root / split / name).mkdir(parents=True)
            for k in range(count):
                pixels = torch.randint(0, 256, (8, 8, 3), generator=generator)
                Image.fromarray(pixels.to(torch.uint8).numpy()).save(
                    root / split / name / f"{k}.png"
                )
    return root


@pytest.fixture
def signal_at_training_step(monkeypatch):
    """``signal_at_training_step(signum, step)``: the CLI's model (``cli.parts.build_model``)
    sends ``signum`` to this process at its ``step``-th training forward pass, as a user's
    Ctrl-C or a scheduler's SIGTERM would, at most once. Ctrl-C raises KeyboardInterrupt
    meanwhile, and every stop signal is delivered, even where the tests were started with
    SIGINT ignored (a shell's background job) or SIGHUP ignored (``nohup``)."""
    import os
    import signal

    from vitbook.cli import parts
    from vitbook.training.runs import STOP_SIGNALS

    def arm(signum: int, step: int) -> None:
        build, calls = parts.build_model, []

        def count(module, inputs):
            if module.training:
                calls.append(1)
                if len(calls) == step:
                    os.kill(os.getpid(), signum)

        def build_model(*args, **kwargs):
            model = build(*args, **kwargs)
            model.register_forward_pre_hook(count)
            return model

        monkeypatch.setattr(parts, "build_model", build_model)

    handlers = {signal.SIGINT: signal.default_int_handler}
    handlers.update(dict.fromkeys(STOP_SIGNALS, signal.SIG_DFL))
    previous = {signum: signal.signal(signum, h) for signum, h in handlers.items()}
    yield arm
    for signum, handler in previous.items():
        signal.signal(signum, handler)
