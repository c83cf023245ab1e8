"""The ``python -m vitbook.train`` command, run in-process through ``train.main``
(one subprocess checks that the command itself starts)."""

from __future__ import annotations

import errno
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomllib
import torch
from torchvision import transforms

from going_modular.models.registry import _REGISTRY
from vitbook import cli, train
from vitbook.data import datasets, standins
from vitbook.data.paths import data_dir, project_root
from vitbook.training import model_files, runs
from vitbook.training.checkpoint import save_checkpoint

TINY = ["--model", "tinyvgg", "--dataset", "mnist", "--batch-size", "32"]


def _run_dirs(out: Path) -> list[Path]:
    """The run folders in an --output-dir, oldest first."""
    return sorted(p for p in out.iterdir() if p.is_dir() and not p.is_symlink())


def _checkpoint(path: Path) -> dict:
    """What ``model_files.save_model`` wrote (weights, build_config, class_names, extra)."""
    return torch.load(path, weights_only=True)


def _own(data: Path, out: Path, *extra: str) -> list[str]:
    """Two epochs on :func:`tiny_image_folder` (conftest) into ``out``."""
    return [
        "--data-dir", str(data), "--img-size", "8", "--batch-size", "4",
        "--epochs", "2", "--output-dir", str(out), *extra,
    ]  # fmt: skip


@pytest.fixture
def no_plots(monkeypatch):
    """Skip drawing loss_curves.png where a test does not look at it (saves ~0.5 s)."""
    monkeypatch.setattr(runs.Run, "_plot", lambda self, results: None)


# --- The command and its options -----------------------------------------------------------------


# The book's switches set to values the book refuses: the command reads none of them.
BOOK_SWITCHES_NOT_UNDERSTOOD = {
    "BOOK_OFFLINE": "maybe",
    "BOOK_DRY_RUN": "maybe",
    "BOOK_FIXTURES": "maybe",
    "BOOK_SETTING": "bogus",
}


def test_the_command_starts_and_lists_its_options():
    """The one subprocess: ``python -m vitbook.train`` really runs (and so does the
    ``vit-train`` console script, which names the same function), whatever the book's
    ``BOOK_*`` variables say (issue 53: a traceback at import)."""
    done = subprocess.run(
        [sys.executable, "-m", "vitbook.train", "--help"],
        capture_output=True,
        text=True,
        env=os.environ | BOOK_SWITCHES_NOT_UNDERSTOOD,
    )
    assert (done.returncode, done.stderr) == (0, "")
    for option in (
        "--model",
        "--dataset",
        "--epochs",
        "--batch-size",
        "--lr",
        "--output-dir",
        "--offline",
        "--data-root PATH",
        "--dry-run",
    ):
        assert option in done.stdout
    pyproject = tomllib.loads((project_root() / "pyproject.toml").read_text())
    assert pyproject["project"]["scripts"]["vit-train"] == "vitbook.train:main"


def test_every_registered_model_is_a_choice():
    parser = cli.build_parser()
    assert "tinyvgg" in _REGISTRY and len(_REGISTRY) > 10
    for name in _REGISTRY:
        assert parser.parse_args(["--model", name]).model == name
    listed = re.sub(r"\s+", " ", parser.format_help())
    assert f"model to build: {', '.join(sorted(_REGISTRY))}" in listed


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
        cli.build_parser().parse_args(argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_recipe_fills_defaults_and_keeps_explicit_options():
    args = cli.build_parser().parse_args(
        ["--recipe", "cct", "--lr", "1e-3", "--epochs", "3"]
    )
    recipe = cli.resolve_recipe(args)
    assert (args.batch_size, args.weight_decay, args.label_smoothing) == (
        128,
        6e-2,
        0.1,
    )
    assert args.lr == recipe.lr == 1e-3 and args.epochs == 3 and recipe.epochs == 310
    plain = cli.build_parser().parse_args([])
    assert cli.resolve_recipe(plain) is None
    assert (plain.epochs, plain.batch_size, plain.lr, plain.weight_decay) == (
        5,
        32,
        1e-3,
        0.0,
    )


# --- Bad input: refused up front, before any data or folder is made ------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--lr", "nan"], "--learning-rate: must be a finite number, got nan"),
        (
            ["--lr", "inf"],
            "argument --lr/--learning-rate: must be a finite number, got inf",
        ),
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
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not out.exists() and not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--data-root", ""],
            "argument --data-root: needs a folder's path, got an empty",
        ),
        (
            ["--data-root", "{file}/sub"],
            "--data-root {file}/sub: {file} is a file, not a",
        ),
        (["--dry-run=yes"], "argument --dry-run: ignored explicit argument 'yes'"),
        (["--offline", "1"], "unrecognized arguments: 1"),
    ],
)
def test_bad_switches_are_one_line_usage_errors(argv, message, tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    argv, message = (
        [a.replace("{file}", str(notes)) for a in argv],
        message.replace("{file}", str(notes)),
    )
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as info:
        train.main([*TINY, "--output-dir", str(out), *argv])
    assert info.value.code == 2
    *usage, last = capsys.readouterr().err.splitlines()
    assert usage[0].startswith("usage: python -m vitbook.train")
    assert last.startswith("python -m vitbook.train: error: ") and message in last
    assert not any("error" in line for line in usage)
    assert not out.exists() and notes.read_text() == "mine"


def test_output_dir_that_is_a_file_is_refused_before_the_data(tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.write_text("my notes")
    with pytest.raises(SystemExit) as info:
        train.main(
            ["--model", "tinyvgg", "--dataset", "food", "--output-dir", str(taken)]
        )
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--output-dir" in err and "is an existing file, not a folder" in err
    assert not (tmp_path / "data").exists()  # the stand-in images were never made
    assert taken.read_text() == "my notes"


def test_model_that_does_not_fit_the_images_is_refused_before_the_data(
    tmp_path, capsys
):
    with pytest.raises(SystemExit) as info:
        train.main(
            ["--model", "vit_b_16", "--dataset", "food", "--img-size", "100"]
            + ["--output-dir", str(tmp_path / "run")]
        )
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--model vit_b_16 does not fit food (3 channel(s), 100x100 pixels)" in err
    assert "not divisible by patch size 16" in err
    assert "Pass an --img-size the model takes" in err
    assert not (tmp_path / "data").exists() and not (tmp_path / "run").exists()


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


def test_corrupt_image_in_data_dir_is_refused_before_the_run_starts(
    tiny_image_folder, tmp_path, capsys
):
    (tiny_image_folder / "train" / "a" / "broken.jpg").write_bytes(b"\xff\xd8 no jpeg")
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as info:
        train.main(_own(tiny_image_folder, out))
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Cannot decode images: 1 file(s)" in err and "broken.jpg" in err
    assert not out.exists()  # refused before any folder was made


def test_output_dir_among_the_images_is_refused(tiny_image_folder, capsys):
    inside = tiny_image_folder / "train" / "a" / "runs"
    with pytest.raises(SystemExit) as info:
        train.main(_own(tiny_image_folder, inside))
    assert info.value.code == 2
    assert "is inside" in capsys.readouterr().err
    assert not inside.exists()


# --- Training runs -------------------------------------------------------------------------------


def test_run_writes_checkpoint_results_and_curves(tmp_path, capsys):
    out = tmp_path / "run"
    train.main(
        [*TINY, "--epochs", "2", "--batch-size", "64", "--max-steps", "5"]
        + ["--warmup-epochs", "0.5", "--output-dir", str(out)]
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
    model = model_files.load_model(run / "model.pth").eval()
    assert _checkpoint(run / "model.pth")["extra"]["img_size"] == 28
    x = torch.rand(3, 1, 28, 28)
    again = model_files.load_model(run / "model.pth").eval()
    assert torch.equal(model(x), again(x))
    assert "[STAND-IN] MNIST" in capsys.readouterr().out


def _installed_fashion_mnist() -> Path | None:
    """The data folder in which the package finds Fashion-MNIST (``$BOOK_DATA_DIR`` or the
    project's data/, where ``make data`` puts it), or None; read at import, before each
    test points the library's data folder at a fresh one (conftest)."""
    root = data_dir()
    raw = root / "FashionMNIST" / "raw"
    return (
        root
        if all((raw / n).is_file() for n in datasets.FASHION_MNIST_SHA256)
        else None
    )


FASHION_MNIST_ROOT = _installed_fashion_mnist()


@pytest.mark.skipif(
    FASHION_MNIST_ROOT is None and not datasets.DEBIAN_FASHION_MNIST.is_dir(),
    reason="Fashion-MNIST is not installed (make data, or apt-get install "
    "dataset-fashion-mnist)",
)
def test_fashion_mnist_end_to_end_pads_for_a_patch_16_vit(tmp_path, capsys, no_plots):
    out = tmp_path / "run"
    # read in FASHION_MNIST_ROOT (nothing is written into it), else in Debian's folder
    root = (
        [] if FASHION_MNIST_ROOT is None else ["--data-root", str(FASHION_MNIST_ROOT)]
    )
    train.main(
        ["--dataset", "fashion_mnist", "--model", "vit_4_16", "--epochs", "1"]
        + ["--max-steps", "3", "--batch-size", "500", "--output-dir", str(out), *root]
    )
    printed = capsys.readouterr().out
    assert "so they are padded to 32x32" in printed
    assert "fashion_mnist, 60000 train and 10000 test images of 10 classes" in printed
    out = out / "latest"
    checkpoint = _checkpoint(out / "model.pth")
    assert checkpoint["build_config"]["kwargs"]["img_size"] == 32
    assert checkpoint["build_config"]["kwargs"]["in_channels"] == 1
    assert checkpoint["class_names"][0] == "T-shirt/top"
    test_images = datasets.get_fashion_mnist(
        False, transforms.ToTensor(), pad_to_32=True, root=FASHION_MNIST_ROOT
    )
    image, _ = test_images[0]
    assert model_files.load_model(out / "model.pth")(image[None]).shape == (1, 10)
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "complete" and 0 <= results["test_acc"][0] <= 1


def test_data_dir_trains_on_your_own_images_and_ignores_hidden_folders(
    texture_photos, tmp_path, capsys, no_plots
):
    own = tmp_path / "my_photos"
    for split, count in (("train", 4), ("test", 2)):
        for name in ("brick", "grass", "gravel"):
            (own / split / name).mkdir(parents=True)
            for image in sorted((texture_photos / split / name).glob("*.jpg"))[:count]:
                (own / split / name / image.name).write_bytes(image.read_bytes())
    (own / "train" / ".ipynb_checkpoints").mkdir()
    (own / "train" / ".ipynb_checkpoints" / "stray.jpg").write_bytes(image.read_bytes())
    out = tmp_path / "run"
    train.main(
        ["--data-dir", str(own), "--model", "tinyvgg", "--img-size", "32"]
        + ["--epochs", "1", "--batch-size", "4", "--output-dir", str(out)]
    )
    assert "12 train and 6 test images of 3 classes" in capsys.readouterr().out
    checkpoint = _checkpoint(out / "latest" / "model.pth")
    assert checkpoint["class_names"] == ["brick", "grass", "gravel"]
    assert checkpoint["extra"]["dataset"] == str(own)


class _SmallPhotoDigits(standins.PhotoDigits):
    """One copy of each digit: the same stand-in, built four times faster."""

    def __init__(self, train: bool = True, transform=None):
        super().__init__(train=train, transform=transform, copies=1)


def test_a_cct_trains_with_the_recipe_and_a_time_budget(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(standins, "PhotoDigits", _SmallPhotoDigits)
    out = tmp_path / "run"
    train.main(
        ["--model", "cct_2_3x2", "--dataset", "cifar10", "--recipe", "cct"]
        + ["--epochs", "3", "--max-steps", "2", "--batch-size", "16"]
        + ["--time-budget", "0.0001", "--output-dir", str(out)]
    )
    run = (out / "latest").resolve()  # each run in its own folder (issue 20)
    assert sorted(p.name for p in out.iterdir()) == [run.name, "latest"]
    assert {"loss_curves.png", "model.pth", "results.json"} <= {
        p.name for p in run.iterdir()
    }
    results = json.loads((run / "results.json").read_text())
    assert len(results["train_loss"]) == 1  # the budget stopped it during epoch 1
    assert math.isfinite(results["test_loss"][0])
    assert (
        results["status"] == "stopped" and "time budget" in results["stopped_because"]
    )
    assert (run / "checkpoint.pth").is_file()  # kept: the run can go on
    printed = capsys.readouterr().out
    assert "[STAND-IN] CIFAR-10" in printed and "[INFO] Recipe cct-cifar-300" in printed
    assert "--time-budget <more minutes" in printed

    train.main(["--resume", str(run), "--time-budget", "30"])  # a larger budget
    results = json.loads((run / "results.json").read_text())
    assert results["status"] == "complete" and len(results["train_loss"]) == 3
    assert "stopped_because" not in results  # said while it was stopped, not now
    assert not (run / "checkpoint.pth").exists()


def test_an_epoch_the_time_budget_cut_short_is_recorded_and_said(
    tiny_image_folder, tmp_path, monkeypatch, capsys
):
    build = cli.parts.build_model

    def slow_step(module, inputs):  # each training step takes 20 ms at least
        if module.training:
            time.sleep(0.02)

    def slow_model(*args, **kwargs):
        model = build(*args, **kwargs)
        model.register_forward_pre_hook(slow_step)
        return model

    monkeypatch.setattr(cli.parts, "build_model", slow_model)
    out = tmp_path / "runs"
    train.main(
        ["--data-dir", str(tiny_image_folder), "--img-size", "8", "--batch-size", "4"]
        + ["--epochs", "3", "--output-dir", str(out), "--time-budget", "0.0001"]
    )  # 2 steps per epoch: the budget (6 ms) ends epoch 1 after its first step
    run = (out / "latest").resolve()
    results = json.loads((run / "results.json").read_text())
    assert results["status"] == "stopped" and results["steps"] == [1]
    assert results["cut_short_epochs"] == [1] and results["steps_per_epoch"] == 2
    said = "[INFO] The time budget cut short epoch(s) 1 of this run (epoch 1: 1 of 2"
    assert said in capsys.readouterr().out

    train.main(["--resume", str(run), "--time-budget", "30"])
    results = json.loads((run / "results.json").read_text())
    assert results["status"] == "complete" and results["steps"] == [1, 2, 2]
    assert results["cut_short_epochs"] == [1]
    printed = capsys.readouterr().out
    assert printed.count(said) == 2  # when it goes on, and when it is complete
    assert printed.index(said) < printed.index("Epoch   2/3")


# --- Stops and failures: the finished epochs are kept, one line says what happened --------------


def test_diverging_run_fails_without_checkpoint_and_leaves_earlier_files_alone(
    tmp_path, capsys
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
    with pytest.raises(SystemExit) as info:
        train.main(
            [*TINY, "--lr", "1e30", "--max-steps", "5", "--output-dir", str(out)]
        )
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert "error: The training loss became" in err
    assert "epoch 1, step" in err and "learning rate too high" in err
    assert "No epoch was complete" in err and "--resume" not in err
    assert "Traceback" not in err
    assert all(path.read_text() == text for path, text in mine.items())
    (run,) = set(_run_dirs(out)) - {earlier}
    assert not (run / "model.pth").exists()
    results = json.loads((run / "results.json").read_text())  # strict JSON: no NaN
    assert results["status"] == "failed" and "loss became" in results["error"]
    assert not (out / "latest").exists()  # it points only to runs that saved a model


@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGINT, 130), (signal.SIGHUP, 129)]
)
def test_a_stop_signal_saves_the_last_completed_epoch(
    tiny_image_folder, tmp_path, signum, code, signal_at_training_step, capsys
):
    """Ctrl-C and SIGHUP during epoch 2 (SIGTERM: the next test) stop cleanly."""
    signal_at_training_step(signum, step=3)  # 2 steps per epoch: epoch 2's first
    out = tmp_path / "runs"
    with pytest.raises(SystemExit) as info:
        train.main(_own(tiny_image_folder, out, "--epochs", "1000"))
    assert info.value.code == code
    (run,) = _run_dirs(out)
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"Interrupted during epoch 2: saved epoch 1's checkpoint and the results so far "
        f"(marked interrupted) to {run}/. Continue with: python -m vitbook.train "
        f"--resume {run}"
    )
    results = json.loads((run / "results.json").read_text())
    assert results["status"] == "interrupted" and results["epochs_completed"] == 1
    assert len(results["train_loss"]) == len(results["test_acc"]) == 1
    checkpoint = _checkpoint(run / "model.pth")
    assert checkpoint["extra"]["status"] == "interrupted"
    assert checkpoint["extra"]["run_id"] == results["run_id"]
    assert runs.pair_matches(run) and (out / "latest").resolve() == run
    assert not (out / runs.LOCK).exists()
    model_files.load_model(run / "model.pth")


@pytest.mark.parametrize(
    "recipe",
    [
        [],
        ["--recipe", "cct"],
        ["--recipe", "cct200"],
        ["--amp"],
        ["--num-workers", "1"],
    ],
    ids=["default", "cct", "cct200", "amp", "workers"],
)
def test_cli_sigterm_then_resume_equals_an_uninterrupted_run(
    recipe, tiny_image_folder, tmp_path, capsys, signal_at_training_step, no_plots
):
    """Every recipe resumes exactly: MixUp/CutMix's step count and NumPy's random state
    (cct, cct200), the autocast path (amp) are in the checkpoint; with a loader worker, the
    worker's seed is drawn afresh each epoch from the saved generator."""
    options = ["--data-dir", str(tiny_image_folder), "--img-size", "8"]
    options += ["--batch-size", "4", "--epochs", "4", *recipe]
    out = tmp_path / "runs"
    # 2 steps per epoch: step 5 is epoch 3's first
    signal_at_training_step(signal.SIGTERM, step=5)
    with pytest.raises(SystemExit) as info:
        train.main([*options, "--output-dir", str(out)])
    assert info.value.code == 143
    stderr = capsys.readouterr().err
    run = (out / "latest").resolve()
    assert stderr.strip().splitlines()[-1] == (
        f"Interrupted during epoch 3: saved epoch 2's checkpoint and the results so far "
        f"(marked interrupted) to {run}/. Continue with: python -m vitbook.train "
        f"--resume {run}"
    )
    stopped = json.loads((run / "results.json").read_text())
    assert stopped["status"] == "interrupted" and len(stopped["train_loss"]) == 2

    with pytest.raises(SystemExit) as info:
        train.main(["--resume", str(out / "latest"), "--lr", "0.1"])
    assert info.value.code == 2
    assert "--lr cannot be given with it" in capsys.readouterr().err
    train.main(["--resume", str(out / "latest")])
    resumed = json.loads((run / "results.json").read_text())
    train.main([*options, "--output-dir", str(tmp_path / "again")])
    uninterrupted = json.loads(
        (tmp_path / "again" / "latest" / "results.json").read_text()
    )
    assert resumed["status"] == "complete" and resumed["run_id"] == run.name
    for key in ("train_loss", "train_acc", "test_loss", "test_acc"):
        assert resumed[key] == uninterrupted[key], key
    assert runs.pair_matches(run)
    with pytest.raises(SystemExit):
        train.main(["--resume", str(run)])
    assert "that run is complete (4 epochs)" in capsys.readouterr().err


def test_failing_optional_steps_are_warnings_not_a_failed_run(
    tiny_image_folder, tmp_path, monkeypatch, capsys
):
    def unwritable_store(*args):
        raise OSError("attempt to write a readonly database")

    def no_figure(*args, **kwargs):
        raise RuntimeError("no display")

    monkeypatch.setattr(train, "_log_to_mlflow", unwritable_store)
    monkeypatch.setattr(runs, "plot_loss_curves", no_figure)
    out = tmp_path / "runs"
    train.main(_own(tiny_image_folder, out, "--mlflow"))
    err = capsys.readouterr().err
    assert "[WARNING] Logging to MLflow failed (OSError: attempt to write" in err
    assert "[WARNING] Plotting loss_curves.png failed (RuntimeError: no display)" in err
    run = (out / "latest").resolve()
    results = json.loads((run / "results.json").read_text())
    assert results["status"] == "complete" and len(results["test_acc"]) == 2
    assert runs.pair_matches(run) and not (run / "loss_curves.png").exists()


def test_a_corrupt_image_in_a_later_epoch_keeps_the_finished_ones(
    tiny_image_folder, tmp_path, monkeypatch, capsys, no_plots
):
    out = tmp_path / "runs"
    victim = tiny_image_folder / "train" / "a" / "0.png"
    good = victim.read_bytes()

    def corrupt_after_epoch_1(checkpoint_dir, epoch, *args, **kwargs):
        save_checkpoint(checkpoint_dir, epoch, *args, **kwargs)
        if epoch == 1:
            victim.write_bytes(b"\xff\xd8 no jpeg")

    monkeypatch.setattr(
        "vitbook.training.checkpoint.save_checkpoint", corrupt_after_epoch_1
    )
    with pytest.raises(SystemExit) as info:
        train.main(_own(tiny_image_folder, out))
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
    assert _checkpoint(run / "model.pth")["extra"]["status"] == "failed"
    victim.write_bytes(good)  # the image fixed, the run continues where it stopped
    train.main(["--resume", str(run)])
    results = json.loads((run / "results.json").read_text())
    assert results["status"] == "complete" and len(results["train_loss"]) == 2
    assert "error" not in results and runs.pair_matches(run)


def test_a_full_disk_at_save_is_one_message_and_resume_finishes_the_save(
    tiny_image_folder, tmp_path, monkeypatch, capsys, no_plots
):
    real_save = torch.save

    def full_disk(obj, f, *args, **kwargs):
        if ".model.pth.partial-" in getattr(f, "name", ""):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full_disk)
    out = tmp_path / "runs"
    with pytest.raises(SystemExit) as info:
        train.main(_own(tiny_image_folder, out))
    assert info.value.code == 1
    (run,) = _run_dirs(out)
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: No space left on device while writing {run / 'model.pth'}: free some "
        f"space (or fix the folder). Epoch 2's training state is in "
        f"{run / 'checkpoint.pth'}, but saving model.pth failed too (No space left on "
        f"device). Continue with: python -m vitbook.train --resume {run}"
    )
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint.pth", "results.json"]
    assert json.loads((run / "results.json").read_text())["status"] == "failed"
    monkeypatch.setattr(torch, "save", real_save)
    train.main(["--resume", str(run)])
    assert "2 of 2 epochs done; nothing left to train" in capsys.readouterr().out
    assert json.loads((run / "results.json").read_text())["status"] == "complete"
    assert runs.pair_matches(run) and not (run / "checkpoint.pth").exists()


# --- Runs never overwrite runs; nothing finished is lost -----------------------------------------


def test_runs_never_overwrite_each_other_nor_touch_backups(
    tiny_image_folder, tmp_path, no_plots
):
    out = tmp_path / "runs"
    out.mkdir()
    backups = [out / ".model.pth-20240101", out / ".results.json-20240101"]
    for backup in backups:
        backup.write_text("my backup")
    train.main(_own(tiny_image_folder, out))
    (first,) = _run_dirs(out)
    before = {p.name: p.read_bytes() for p in first.iterdir()}
    train.main(_own(tiny_image_folder, out, "--seed", "7"))
    second = next(p for p in _run_dirs(out) if p != first)
    assert {p.name: p.read_bytes() for p in first.iterdir()} == before
    assert (out / "latest").resolve() == second
    assert runs.pair_matches(first) and runs.pair_matches(second)
    assert [b.read_text() for b in backups] == ["my backup"] * 2
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [b.name for b in backups] + [first.name, second.name, "latest"]
    )  # no previous/ folder, no lock left behind


def test_a_second_run_into_a_busy_output_dir_is_refused(
    tiny_image_folder, tmp_path, capsys, dead_pid, no_plots
):
    out = tmp_path / "runs"
    with runs.OutputLock(out):
        with pytest.raises(SystemExit) as info:
            train.main(_own(tiny_image_folder, out))
    assert info.value.code == 2
    assert f"is in use: process {os.getpid()} is training into it" in (
        capsys.readouterr().err
    )
    assert _run_dirs(out) == []
    (out / runs.LOCK).write_text(f"{dead_pid} 2024-01-01 00:00:00\n")
    train.main(_own(tiny_image_folder, out))  # a killed run's lock is taken over
    assert "which has ended" in capsys.readouterr().out
    assert len(_run_dirs(out)) == 1 and not (out / runs.LOCK).exists()
