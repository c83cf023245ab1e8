"""The ``python -m going_modular.train`` entry point, end to end."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys

import pytest
import torch
from PIL import Image
from torchvision import transforms

from going_modular import datasets, train, utils
from going_modular.models import list_models


def test_help_lists_the_options():
    out = subprocess.run(
        [sys.executable, "-m", "going_modular.train", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for option in (
        "--model",
        "--dataset",
        "--epochs",
        "--batch-size",
        "--lr",
        "--output-dir",
    ):
        assert option in out


def test_run_writes_checkpoint_results_and_curves(tmp_path, capsys):
    out = tmp_path / "run"
    train.main(
        [
            "--model",
            "tinyvgg",
            "--dataset",
            "mnist",
            "--epochs",
            "2",
            "--batch-size",
            "64",
            "--max-steps",
            "5",
            "--warmup-epochs",
            "0.5",
            "--output-dir",
            str(out),
        ]
    )
    assert sorted(p.name for p in out.iterdir()) == [
        "loss_curves.png",
        "model.pth",
        "results.json",
    ]
    results = json.loads((out / "results.json").read_text())
    assert len(results["train_loss"]) == 2
    assert (out / "loss_curves.png").read_bytes()[:4] == b"\x89PNG"
    model = utils.load_model(out / "model.pth").eval()
    assert utils.load_checkpoint(out / "model.pth")["extra"]["img_size"] == 28
    x = torch.rand(3, 1, 28, 28)
    again = utils.load_model(out / "model.pth").eval()
    assert torch.equal(model(x), again(x))
    assert "[STAND-IN] MNIST" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "resnet9000"], "invalid choice: 'resnet9000'"),
        (["--dataset", "imagenet"], "invalid choice: 'imagenet'"),
        (["--batch-size", "0"], "must be a positive integer, got 0"),
        (["--epochs", "-1"], "must be a positive integer, got -1"),
    ],
)
def test_bad_arguments_are_explained(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        train.build_parser().parse_args(argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_every_registered_model_is_a_choice():
    assert "tinyvgg" in list_models()
    assert train.build_parser().parse_args(["--model", list_models()[0]]).model


# --- Bad input and faults: each refused up front, or finished cleanly --------------------------


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "going_modular.train", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


TINY = ["--model", "tinyvgg", "--dataset", "mnist", "--batch-size", "32"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--lr", "nan"], "--learning-rate: must be a finite number, got nan"),
        (["--lr", "-1"], "--learning-rate: must be positive, got -1.0"),
        (["--weight-decay", "-1"], "--weight-decay: must be 0 or more, got -1.0"),
        (["--warmup-epochs", "-1"], "--warmup-epochs: must be 0 or more, got -1.0"),
        (["--num-workers", "-1"], "--num-workers: must be 0 or more, got -1"),
        (
            ["--label-smoothing", "2"],
            "--label-smoothing: must be at least 0 and below 1",
        ),
        (
            ["--label-smoothing", "1"],
            "--label-smoothing: must be at least 0 and below 1",
        ),
        (["--max-grad-norm", "inf"], "--max-grad-norm: must be a finite number"),
        (["--time-budget", "inf"], "--time-budget: must be a finite number"),
        (["--seed", "-1"], "--seed: must be in [0, 2**32), got -1"),
        (["--warmup-epochs", "3", "--epochs", "2"], "--warmup-epochs 3 is longer than"),
        (["--data-dir", "x"], "give either --dataset or --data-dir, not both"),
        (["--model", "vit_b_16"], "--model vit_b_16 does not fit mnist"),
    ],
)
def test_bad_numbers_and_combinations_are_refused_up_front(
    argv, message, tmp_path, capsys
):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as info:
        train.main([*TINY, "--output-dir", str(out), *argv])
    assert info.value.code == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_non_finite_learning_rate_exits_before_any_work(tmp_path):
    done = _cli(*TINY, "--lr", "inf", "--output-dir", str(tmp_path / "run"))
    assert done.returncode == 2
    assert (
        "argument --lr/--learning-rate: must be a finite number, got inf" in done.stderr
    )
    assert not (tmp_path / "run").exists()


def test_output_dir_that_is_a_file_is_refused_before_the_data(tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("my notes")
    done = _cli("--model", "tinyvgg", "--dataset", "food", "--output-dir", str(taken))
    assert done.returncode == 2
    assert (
        "--output-dir" in done.stderr
        and "is an existing file, not a folder" in done.stderr
    )
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "data").exists()  # the stand-in images were never made
    assert taken.read_text() == "my notes"


def test_model_that_does_not_fit_the_images_is_refused_before_the_data(tmp_path):
    done = _cli(
        "--model",
        "vit_b_16",
        "--dataset",
        "food",
        "--img-size",
        "100",
        "--output-dir",
        str(tmp_path / "run"),
    )
    assert done.returncode == 2
    assert (
        "--model vit_b_16 does not fit food (3 channel(s), 100x100 pixels)"
        in done.stderr
    )
    assert "not divisible by patch size 16" in done.stderr
    assert "Pass an --img-size the model takes" in done.stderr
    assert not (tmp_path / "data").exists() and not (tmp_path / "run").exists()


def test_diverging_run_fails_without_checkpoint_and_moves_the_earlier_run_aside(
    tmp_path,
):
    out = tmp_path / "run"
    out.mkdir()
    for name in ("model.pth", "results.json", "loss_curves.png"):
        (out / name).write_text("from an earlier run")
    done = _cli(*TINY, "--lr", "1e30", "--max-steps", "5", "--output-dir", str(out))
    assert done.returncode == 1
    assert "error: The training loss became" in done.stderr
    assert "epoch 1, step" in done.stderr and "learning rate too high" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (out / "model.pth").exists()
    results = json.loads((out / "results.json").read_text())  # strict JSON: no NaN
    assert results["status"] == "failed" and "loss became" in results["error"]
    assert sorted(p.name for p in (out / "previous").iterdir()) == [
        "loss_curves.png",
        "model.pth",
        "results.json",
    ]


def test_ctrl_c_saves_the_last_completed_epoch_and_exits_130(tmp_path):
    out = tmp_path / "run"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "going_modular.train",
            *TINY,
            "--epochs",
            "1000",
            "--max-steps",
            "2",
            "--output-dir",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for line in process.stdout:
            if "Epoch   1/1000" in line:
                break
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 130
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    match = re.fullmatch(
        r"Interrupted during epoch (\d+): saved epoch (\d+)'s checkpoint and the results "
        r"so far \(marked interrupted\) to (.+)/\.",
        last,
    )
    assert match and match[3] == str(out), stderr
    epochs = int(match[2])
    assert epochs >= 1 and int(match[1]) == epochs + 1
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "interrupted" and results["epochs_completed"] == epochs
    assert len(results["train_loss"]) == len(results["test_acc"]) == epochs
    checkpoint = utils.load_checkpoint(out / "model.pth")
    assert checkpoint["extra"]["status"] == "interrupted"
    assert checkpoint["extra"]["run_id"] == results["run_id"]
    utils.load_model(out / "model.pth")


@pytest.mark.skipif(
    not datasets.DEBIAN_FASHION_MNIST.is_dir(),
    reason="Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)",
)
def test_fashion_mnist_end_to_end_pads_for_a_patch_16_vit(tmp_path):
    out = tmp_path / "run"
    done = _cli(
        "--dataset",
        "fashion_mnist",
        "--model",
        "vit_tiny",
        "--epochs",
        "1",
        "--max-steps",
        "3",
        "--batch-size",
        "500",
        "--output-dir",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    assert "so they are padded to 32x32" in done.stdout
    assert (
        "fashion_mnist, 60000 train and 10000 test images of 10 classes" in done.stdout
    )
    checkpoint = utils.load_checkpoint(out / "model.pth")
    assert checkpoint["build_config"]["kwargs"]["img_size"] == 32
    assert checkpoint["build_config"]["kwargs"]["in_channels"] == 1
    assert checkpoint["class_names"][0] == "T-shirt/top"
    image, _ = datasets.get_fashion_mnist(False, transforms.ToTensor(), pad_to_32=True)[
        0
    ]
    assert utils.load_model(out / "model.pth")(image[None]).shape == (1, 10)
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "complete" and 0 <= results["test_acc"][0] <= 1


def test_data_dir_trains_on_your_own_images_and_ignores_hidden_folders(
    texture_photos, tmp_path
):
    own = tmp_path / "my_photos"
    for split, count in (("train", 4), ("test", 2)):
        for name in ("brick", "grass", "gravel"):
            (own / split / name).mkdir(parents=True)
            for image in sorted((texture_photos / split / name).glob("*.jpg"))[:count]:
                shutil.copy(image, own / split / name / image.name)
    (own / "train" / ".ipynb_checkpoints").mkdir()
    shutil.copy(image, own / "train" / ".ipynb_checkpoints" / "stray.jpg")
    out = tmp_path / "run"
    done = _cli(
        "--data-dir",
        str(own),
        "--model",
        "tinyvgg",
        "--img-size",
        "32",
        "--epochs",
        "1",
        "--batch-size",
        "4",
        "--output-dir",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    assert "12 train and 6 test images of 3 classes" in done.stdout
    checkpoint = utils.load_checkpoint(out / "model.pth")
    assert checkpoint["class_names"] == ["brick", "grass", "gravel"]
    assert checkpoint["extra"]["dataset"] == str(own)


def test_data_dir_problems_are_refused_up_front(tmp_path, capsys):
    (tmp_path / "mine" / "train" / "cat").mkdir(parents=True)
    (tmp_path / "mine" / "test" / "dog").mkdir(parents=True)
    for argv, message in (
        ([str(tmp_path / "nowhere")], "needs train/ and test/ folders"),
        ([str(tmp_path / "mine")], "train/ has classes ['cat'] but test/ has ['dog']"),
    ):
        with pytest.raises(SystemExit) as info:
            train.main(["--data-dir", *argv, "--output-dir", str(tmp_path / "run")])
        assert info.value.code == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_corrupt_image_in_data_dir_ends_with_one_line_and_a_failed_status(
    tmp_path, capsys
):
    for split in ("train", "test"):
        for name in ("a", "b"):
            (tmp_path / "own" / split / name).mkdir(parents=True)
            Image.new("RGB", (8, 8), "red").save(
                tmp_path / "own" / split / name / "x.png"
            )
    (tmp_path / "own" / "train" / "a" / "broken.jpg").write_bytes(b"\xff\xd8 no jpeg")
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as info:
        train.main(
            ["--data-dir", str(tmp_path / "own"), "--img-size", "8", "--epochs", "1"]
            + ["--output-dir", str(out)]
        )
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("error: Cannot decode image") and "broken.jpg" in err
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "failed" and "broken.jpg" in results["error"]
