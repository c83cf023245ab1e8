"""The ``python -m going_modular.train`` entry point, end to end."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
import torch
from PIL import Image
from torchvision import transforms

from going_modular import datasets, engine, runs, train, utils
from going_modular.models import list_models


def _run_dirs(out: Path) -> list[Path]:
    """The run folders in an --output-dir, oldest first."""
    return sorted(p for p in out.iterdir() if p.is_dir() and not p.is_symlink())


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
    (run,) = _run_dirs(out)
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{8}", run.name)
    assert sorted(p.name for p in out.iterdir()) == [run.name, "latest"]
    assert (out / "latest").resolve() == run
    assert sorted(p.name for p in run.iterdir()) == [
        "loss_curves.png",
        "model.pth",
        "results.json",
    ]
    results = json.loads((run / "results.json").read_text())
    assert len(results["train_loss"]) == 2 and results["status"] == "complete"
    assert results["run_id"] == run.name and results["options"]["epochs"] == 2
    assert runs.pair_matches(run)
    assert (run / "loss_curves.png").read_bytes()[:4] == b"\x89PNG"
    model = utils.load_model(run / "model.pth").eval()
    assert utils.load_checkpoint(run / "model.pth")["extra"]["img_size"] == 28
    x = torch.rand(3, 1, 28, 28)
    again = utils.load_model(run / "model.pth").eval()
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
        (
            ["--weight-decay", "1e30"],
            "--weight-decay 1e+30 is too large for --lr 0.001",
        ),
        (
            ["--output-dir", "x" * 256],
            "--output-dir: the folder name xxxx",
        ),
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


def test_diverging_run_fails_without_checkpoint_and_leaves_earlier_files_alone(
    tmp_path,
):
    out = tmp_path / "run"
    earlier = out / "20240101-000000-0123abcd"
    earlier.mkdir(parents=True)
    mine = {
        earlier / "model.pth": "from an earlier run",
        earlier / "results.json": "from an earlier run",
        out / "model.pth": "an old layout's file",
        out / ".model.pth-20240101": "my backup",
        out / ".results.json-20240101": "my backup",
    }
    for path, text in mine.items():
        path.write_text(text)
    done = _cli(*TINY, "--lr", "1e30", "--max-steps", "5", "--output-dir", str(out))
    assert done.returncode == 1
    assert "error: The training loss became" in done.stderr
    assert "epoch 1, step" in done.stderr and "learning rate too high" in done.stderr
    assert "No epoch was complete" in done.stderr and "--resume" not in done.stderr
    assert "Traceback" not in done.stderr
    assert all(path.read_text() == text for path, text in mine.items())
    (run,) = set(_run_dirs(out)) - {earlier}
    assert not (run / "model.pth").exists()
    results = json.loads((run / "results.json").read_text())  # strict JSON: no NaN
    assert results["status"] == "failed" and "loss became" in results["error"]
    assert not (out / "latest").exists()  # it points only to runs that saved a model


@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGINT, 130), (signal.SIGHUP, 129)]
)
def test_a_stop_signal_saves_the_last_completed_epoch(tmp_path, signum, code):
    """Ctrl-C and SIGHUP (SIGTERM: tests/test_resume.py) stop a run cleanly."""
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
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == code
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    match = re.fullmatch(
        r"Interrupted during epoch (\d+): saved epoch (\d+)'s checkpoint and the results "
        r"so far \(marked interrupted\) to (.+)/\. Continue with: python -m "
        r"going_modular.train --resume (.+)",
        last,
    )
    (run,) = _run_dirs(out)
    assert match and match[3] == match[4] == str(run), stderr
    epochs = int(match[2])
    assert epochs >= 1 and int(match[1]) == epochs + 1
    results = json.loads((run / "results.json").read_text())
    assert results["status"] == "interrupted" and results["epochs_completed"] == epochs
    assert len(results["train_loss"]) == len(results["test_acc"]) == epochs
    checkpoint = utils.load_checkpoint(run / "model.pth")
    assert checkpoint["extra"]["status"] == "interrupted"
    assert checkpoint["extra"]["run_id"] == results["run_id"]
    assert runs.pair_matches(run) and (out / "latest").resolve() == run
    assert not (out / runs.LOCK).exists()
    utils.load_model(run / "model.pth")


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
    out = out / "latest"
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
    checkpoint = utils.load_checkpoint(out / "latest" / "model.pth")
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


def test_corrupt_image_in_data_dir_is_refused_before_the_run_starts(tmp_path, capsys):
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
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Cannot decode images: 1 file(s)" in err and "broken.jpg" in err
    assert not out.exists()  # refused before any folder was made


# --- Runs never overwrite runs; nothing finished is lost ----------------------------------------


def _tiny_images(root: Path) -> Path:
    """An ImageFolder of 2 classes, 4 training and 2 test images each, 8x8 pixels."""
    for split, count in (("train", 4), ("test", 2)):
        for i, name in enumerate(("a", "b")):
            (root / split / name).mkdir(parents=True)
            for k in range(count):
                Image.new("RGB", (8, 8), (200 * i, 40 * k, 90)).save(
                    root / split / name / f"{k}.png"
                )
    return root


def _own(data: Path, out: Path, *extra: str) -> list[str]:
    return [
        "--data-dir", str(data), "--img-size", "8", "--batch-size", "4",
        "--epochs", "2", "--output-dir", str(out), *extra,
    ]  # fmt: skip


def test_runs_never_overwrite_each_other_nor_touch_backups(tmp_path):
    data, out = _tiny_images(tmp_path / "own"), tmp_path / "runs"
    out.mkdir()
    backups = [out / ".model.pth-20240101", out / ".results.json-20240101"]
    for backup in backups:
        backup.write_text("my backup")
    train.main(_own(data, out))
    (first,) = _run_dirs(out)
    before = {p.name: p.read_bytes() for p in first.iterdir()}
    train.main(_own(data, out, "--seed", "7"))
    second = next(p for p in _run_dirs(out) if p != first)
    assert {p.name: p.read_bytes() for p in first.iterdir()} == before
    assert (out / "latest").resolve() == second
    assert runs.pair_matches(first) and runs.pair_matches(second)
    assert [b.read_text() for b in backups] == ["my backup"] * 2
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [b.name for b in backups] + [first.name, second.name, "latest"]
    )  # no previous/ folder, no lock left behind


def test_a_second_run_into_a_busy_output_dir_is_refused(tmp_path, capsys):
    data, out = _tiny_images(tmp_path / "own"), tmp_path / "runs"
    with runs.OutputLock(out):
        with pytest.raises(SystemExit) as info:
            train.main(_own(data, out))
    assert info.value.code == 2
    assert f"is in use: process {os.getpid()} is training into it" in (
        capsys.readouterr().err
    )
    assert _run_dirs(out) == []
    (out / runs.LOCK).write_text(f"{_dead_pid()} 2024-01-01 00:00:00\n")
    train.main(_own(data, out))  # a lock left by a killed run is taken over
    assert "which has ended" in capsys.readouterr().out
    assert len(_run_dirs(out)) == 1 and not (out / runs.LOCK).exists()


def _dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout)


def test_failing_optional_steps_are_warnings_not_a_failed_run(
    tmp_path, monkeypatch, capsys
):
    def unwritable_store(*args):
        raise OSError("attempt to write a readonly database")

    def no_figure(*args, **kwargs):
        raise RuntimeError("no display")

    monkeypatch.setattr(train, "_log_to_mlflow", unwritable_store)
    monkeypatch.setattr(train, "plot_loss_curves", no_figure)
    data, out = _tiny_images(tmp_path / "own"), tmp_path / "runs"
    train.main(_own(data, out, "--mlflow"))
    err = capsys.readouterr().err
    assert "[WARNING] Logging to MLflow failed (OSError: attempt to write" in err
    assert "[WARNING] Plotting loss_curves.png failed (RuntimeError: no display)" in err
    run = (out / "latest").resolve()
    results = json.loads((run / "results.json").read_text())
    assert results["status"] == "complete" and len(results["test_acc"]) == 2
    assert runs.pair_matches(run) and not (run / "loss_curves.png").exists()


def test_a_corrupt_image_in_a_later_epoch_keeps_the_finished_ones(
    tmp_path, monkeypatch, capsys
):
    data, out = _tiny_images(tmp_path / "own"), tmp_path / "runs"
    victim = data / "train" / "a" / "0.png"
    good = victim.read_bytes()
    save = engine._save_checkpoint

    def corrupt_after_epoch_1(checkpoint_dir, epoch, *args, **kwargs):
        save(checkpoint_dir, epoch, *args, **kwargs)
        if epoch == 1:
            victim.write_bytes(b"\xff\xd8 no jpeg")

    monkeypatch.setattr(engine, "_save_checkpoint", corrupt_after_epoch_1)
    with pytest.raises(SystemExit) as info:
        train.main(_own(data, out))
    assert info.value.code == 1
    err = capsys.readouterr().err
    (run,) = _run_dirs(out)
    assert err.startswith("error: Cannot decode image") and "0.png" in err
    assert "Saved epoch 1's checkpoint and the results so far (marked failed)" in err
    assert f"--resume {run}" in err
    results = json.loads((run / "results.json").read_text())
    assert results["status"] == "failed" and "0.png" in results["error"]
    assert results["epochs_completed"] == len(results["train_loss"]) == 1
    assert runs.pair_matches(run) and (out / "latest").resolve() == run
    assert utils.load_checkpoint(run / "model.pth")["extra"]["status"] == "failed"
    victim.write_bytes(good)  # the image fixed, the run continues where it stopped
    train.main(["--resume", str(run)])
    results = json.loads((run / "results.json").read_text())
    assert results["status"] == "complete" and len(results["train_loss"]) == 2
    assert "error" not in results and runs.pair_matches(run)


def test_a_full_disk_at_save_is_one_message_and_resume_finishes_the_save(
    tmp_path, monkeypatch, capsys
):
    real_save = torch.save

    def full_disk(obj, f, *args, **kwargs):
        if ".model.pth.partial-" in getattr(f, "name", ""):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full_disk)
    data, out = _tiny_images(tmp_path / "own"), tmp_path / "runs"
    with pytest.raises(SystemExit) as info:
        train.main(_own(data, out))
    assert info.value.code == 1
    (run,) = _run_dirs(out)
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: No space left on device while writing {run / 'model.pth'}: free some "
        f"space (or fix the folder). Epoch 2's training state is in "
        f"{run / 'checkpoint.pth'}, but saving model.pth failed too (No space left on "
        f"device). Continue with: python -m going_modular.train --resume {run}"
    )
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint.pth", "results.json"]
    assert json.loads((run / "results.json").read_text())["status"] == "failed"
    monkeypatch.setattr(torch, "save", real_save)
    train.main(["--resume", str(run)])
    assert "2 of 2 epochs done; nothing left to train" in capsys.readouterr().out
    assert json.loads((run / "results.json").read_text())["status"] == "complete"
    assert runs.pair_matches(run) and not (run / "checkpoint.pth").exists()


def test_output_dir_among_the_images_is_refused(tmp_path, capsys):
    data = _tiny_images(tmp_path / "own")
    with pytest.raises(SystemExit) as info:
        train.main(_own(data, data / "train" / "a" / "runs"))
    assert info.value.code == 2
    assert "is inside" in capsys.readouterr().err
    assert not (data / "train" / "a" / "runs").exists()


def test_figures_are_closed_after_saving(tmp_path):
    current = train._Run(tmp_path, {"model": "tinyvgg", "data": "mnist"}, None, 28)
    results = {key: [1.0, 0.5] for key in engine.RESULT_KEYS}
    with warnings.catch_warnings(), plt.rc_context({"figure.max_open_warning": 2}):
        warnings.simplefilter("error")  # "More than 2 figures have been opened"
        for _ in range(4):
            current._plot(results)
    assert plt.get_fignums() == []
    assert (tmp_path / "loss_curves.png").read_bytes()[:4] == b"\x89PNG"
