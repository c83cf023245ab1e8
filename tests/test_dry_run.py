"""The dry run: every chapter in the gpu setting on the CPU, loops capped, network blocked.

The online datasets and weights come from the fixtures of ``dry_run_fixtures.py``; every
getter announces them (``[FIXTURE]``), and the executed notebooks are never written back.
One test class per chapter, so ``pytest -n 2 --dist loadscope`` spreads them over workers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import numpy as np
import pytest
from dry_run_fixtures import (
    chapter_data_dir,
    class_coded_images,
    dry_run_environment,
    make_cifar10,
    make_food_zip,
    serve,
)
from nbclient import NotebookClient
from torchvision.datasets import CIFAR10

from vitbook.book import settings
from vitbook.data import datasets, network, paths

BOOK = Path(__file__).resolve().parents[1] / "book"
CHAPTERS = sorted(BOOK.glob("[0-9][0-9]_*.ipynb"))
CELL_TIMEOUT = 600


@pytest.fixture(scope="session")
def dry_run_env(tmp_path_factory):
    """The dry run's environment variables, fixtures made and served for the session."""
    with dry_run_environment(tmp_path_factory.mktemp("dry_run")) as env:
        yield env


def _outputs_text(nb) -> str:
    return "\n".join(
        output.get("text", "")
        for cell in nb.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
    )


def _execute_chapter(path: Path, env: dict[str, str], workdir: Path, monkeypatch):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    shared = Path(env["BOOK_DATA_DIR"])
    monkeypatch.setenv(
        "BOOK_DATA_DIR", str(chapter_data_dir(shared, workdir / "chapter_data"))
    )
    monkeypatch.delenv("CI", raising=False)  # a reader's Colab, not CI
    before = path.read_bytes()
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": str(workdir)}},
    )
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    print(f"{path.name}: dry run in {seconds:.0f} s")
    assert path.read_bytes() == before, "the dry run must never store its outputs"
    # the setup cell says what it installed; the next output is the setting's
    shown = [
        _outputs_text(nbformat.from_dict({"cells": [c]}))
        for c in nb.cells
        if c.cell_type == "code" and c.get("outputs")
    ]
    first_text = next(text for text in shown if "Setting:" in text)
    assert "Setting: GPU" in first_text and "FIXTURES" in first_text
    assert "Plan in the gpu setting" in first_text
    return _outputs_text(nb)


def _chapter_test(path: Path):
    def test_completes(self, dry_run_env, tmp_path, monkeypatch):
        _execute_chapter(path, dry_run_env, tmp_path, monkeypatch)

    return test_completes


# One class per chapter: loadscope sends each class to one worker, chapters in parallel.
for _path in CHAPTERS:
    _name = f"TestDryRun{_path.stem.split('_')[0]}"
    globals()[_name] = type(_name, (), {"test_completes": _chapter_test(_path)})


def test_every_chapter_has_a_dry_run():
    assert len(CHAPTERS) >= 14
    assert all(f"TestDryRun{p.stem.split('_')[0]}" in globals() for p in CHAPTERS)


# --- the fixtures and the getters that read them -----------------------------------------


def test_cifar10_and_mnist_download_from_the_mirror_through_torchvision(
    dry_run_env, tmp_path
):
    """The getters' online path, in a process started as the chapters' are: torchvision's
    own download code fetches the fixtures from 127.0.0.1 into an empty folder and checks
    them against their md5s; the real sites are out of reach."""
    code = (
        "import sys\n"
        "from vitbook.data import datasets, network, paths\n"
        "network.set_offline(False); network.set_fixtures(True)\n"
        "paths.set_mirror(sys.argv[1])\n"
        "cifar = datasets.get_cifar10(train=False, root=sys.argv[2], fallback=False)\n"
        "mnist = datasets.get_mnist(train=True, root=sys.argv[2], fallback=False)\n"
        "print(len(cifar), len(mnist), cifar.classes[0], mnist[0][0].size)\n"
    )
    env = {**os.environ, "PYTHONPATH": dry_run_env["PYTHONPATH"]}
    url = dry_run_env["BOOK_MIRROR"]
    run = subprocess.run(
        [sys.executable, "-c", code, url, str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("[FIXTURE]") == 2 and f"from {url}" in run.stdout
    assert run.stdout.strip().endswith("100 600 airplane (28, 28)")
    assert (tmp_path / "cifar-10-python.tar.gz").is_file()
    assert (tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte").is_file()


def test_torchvision_checks_the_fixtures_md5s_outside_the_dry_run(tmp_path):
    make_cifar10(tmp_path, train_per_class=3, test_per_class=2)
    with pytest.raises(RuntimeError, match="corrupted"):  # the real files' md5s
        CIFAR10(str(tmp_path), train=True)


@pytest.mark.parametrize("shape", [(32, 32, 3), (28, 28), (96, 128, 3)])
def test_fixture_images_are_learnable(shape):
    """Class-coded: logistic regression on the raw pixels separates held-out images, so a
    path that trains on fixtures can be checked to learn (and a wrong label order caught)."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    labels = np.arange(200) % 10
    images = class_coded_images(labels, shape, rng).reshape(200, -1) / 255.0
    model = LogisticRegression(max_iter=500).fit(images[:100], labels[:100])
    assert model.score(images[100:], labels[100:]) >= 0.95
    shuffled = LogisticRegression(max_iter=500).fit(
        images[:100], rng.permutation(labels[:100])
    )
    assert (
        shuffled.score(images[100:], labels[100:]) < 0.5
    )  # permuted labels: near chance


def test_food_zip_is_downloaded_from_the_mirror(tmp_path, monkeypatch, capsys):
    make_food_zip(tmp_path / "mirror" / "pizza_steak_sushi.zip", 2, 1)
    network.set_offline(False)  # the autouse fixture restores both switches
    network.set_fixtures(True)
    with serve(tmp_path / "mirror") as url:
        paths.set_mirror(url + "/")  # the autouse fixture restores it
        food = datasets.get_food_data(fallback=False, root=tmp_path / "data")
    assert not food.stand_in
    assert sorted(p.name for p in food.train_dir.iterdir()) == [
        "pizza",
        "steak",
        "sushi",
    ]
    assert len(list(food.test_dir.glob("*/*.jpg"))) == 3
    assert f"[FIXTURE] pizza/steak/sushi 10%: random photos from {url}/" in (
        capsys.readouterr().out
    )


def test_vit_weights_fixture_loads_where_torchvision_looks(dry_run_env, monkeypatch):
    from vitbook.models.pretrained import create_vit_feature_extractor

    network.set_offline(dry_run_env["BOOK_OFFLINE"] == "1")
    network.set_fixtures(dry_run_env["BOOK_FIXTURES"] == "1")
    monkeypatch.setenv("TORCH_HOME", dry_run_env["TORCH_HOME"])
    model, _, pretrained = create_vit_feature_extractor(3, "DEFAULT", fallback=False)
    assert pretrained and model.heads.out_features == 3
    assert not model.conv_proj.weight.requires_grad


def test_network_is_blocked_but_127_0_0_1_is_served(dry_run_env, tmp_path):
    code = (
        "import urllib.request, sys\n"
        "try:\n"
        "    urllib.request.urlopen('https://example.com', timeout=5)\n"
        "    sys.exit('reached the network')\n"
        "except OSError as e:\n"
        "    print('blocked:', e)\n"
        "print(urllib.request.urlopen(sys.argv[1] + '/pizza_steak_sushi.zip').status)\n"
    )
    env = {**os.environ, "PYTHONPATH": dry_run_env["PYTHONPATH"]}
    run = subprocess.run(
        [sys.executable, "-c", code, dry_run_env["BOOK_MIRROR"]],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert "blocked:" in run.stdout and run.stdout.strip().endswith("200")


def test_dry_run_switches(dry_run_env, monkeypatch):
    for name in ("BOOK_DRY_RUN", "BOOK_SETTING"):
        monkeypatch.setenv(name, dry_run_env[name])
    assert settings.setting() == "gpu" and settings.dry_run_steps() is not None
