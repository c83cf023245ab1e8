"""What ``python -m vitbook.train`` says when it refuses or warns: one plain line each,
without a traceback, a source line or the whole usage text."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from vitbook import train
from vitbook.data import image_folders

ROOT = Path(__file__).resolve().parents[1]
PROG = "python -m vitbook.train"
# Imported first (a sitecustomize on PYTHONPATH): Ctrl-C as the CLI imports torch.
CTRL_C_AT_TORCH = """\
import os, signal, sys


class CtrlCAtTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None


sys.meta_path.insert(0, CtrlCAtTorch())
"""


def _own(data: Path, out: Path, *extra: str) -> list[str]:
    """One epoch on :func:`tiny_image_folder` (conftest) into ``out``."""
    return [
        "--data-dir", str(data), "--img-size", "8", "--batch-size", "4",
        "--epochs", "1", "--output-dir", str(out), *extra,
    ]  # fmt: skip


def _refused(argv: list[str], capsys) -> tuple[int, list[str]]:
    """The exit code and the lines on stderr of a refused command."""
    with pytest.raises(SystemExit) as info:
        train.main(argv)
    return info.value.code, capsys.readouterr().err.splitlines()


def test_a_refusal_prints_one_usage_line_not_the_whole_usage(tmp_path, capsys):
    code, lines = _refused(["--lr", "-1", "--output-dir", str(tmp_path)], capsys)
    assert code == 2
    assert lines == [
        f"usage: {PROG} [-h] [options]  ({PROG} --help lists them)",
        f"{PROG}: error: argument --lr/--learning-rate: must be positive, got -1.0",
    ]


def test_a_data_dir_without_train_and_test_says_what_it_needs(tmp_path, capsys):
    mine = tmp_path / "mine"
    (mine / "cat").mkdir(parents=True)  # class folders, but no train/ nor test/
    code, lines = _refused(["--data-dir", str(mine)], capsys)
    assert code == 2
    assert lines[-1] == (
        f"{PROG}: error: --data-dir {mine} needs train/ and test/ folders with one "
        "subfolder of images per class (train/<class>/, test/<class>/), but it has "
        "no train/ nor test/"
    )


def test_a_broken_link_is_one_plain_warning(tiny_image_folder, tmp_path, capsys):
    dead = tiny_image_folder / "train" / "a" / "dead.jpg"
    dead.symlink_to(tmp_path / "gone.jpg")
    train.main(_own(tiny_image_folder, tmp_path / "run"))
    err = capsys.readouterr().err
    warning = (
        "[WARNING] Skipped 1 entries named like images that are not regular files "
        f"(a FIFO, socket, device or broken link):\n  {dead}\n"
    )
    assert err.count(warning) == 1, err  # said once, though the folder is read twice
    assert "make_dataset" not in err and ".py:" not in err


def test_the_largest_image_is_named_before_training(
    tiny_image_folder, tmp_path, monkeypatch, capsys
):
    big = tiny_image_folder / "train" / "b" / "big.png"
    Image.new("RGB", (30, 20)).save(big)
    monkeypatch.setattr(image_folders, "LARGE_IMAGE_PIXELS", 8 * 8)
    train.main(_own(tiny_image_folder, tmp_path / "run"))
    out, err = capsys.readouterr()
    (said,) = [line for line in err.splitlines() if line.startswith("[WARNING]")]
    assert said.startswith("[WARNING] 1 image(s) have more than ")
    assert f"the largest {big} (30x20" in said
    assert "decodes each image at full size" in said and "Resize them" in said
    assert "Epoch   1/1" in out  # trained all the same


def test_rank_and_world_size_without_torchrun_say_to_use_torchrun(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    argv = ["--model", "tinyvgg", "--dataset", "mnist", "--output-dir", str(tmp_path)]
    code, lines = _refused(argv, capsys)
    assert code == 2
    assert lines[-1] == (
        f"{PROG}: error: RANK and WORLD_SIZE are set but MASTER_ADDR and MASTER_PORT "
        "are not: start the command with torchrun (torchrun --nproc_per_node=N ...), "
        "or set MASTER_ADDR and MASTER_PORT"
    )
    assert not (tmp_path / "data").exists()


def test_processes_that_never_join_are_one_line_after_the_timeout(
    tmp_path, monkeypatch, capsys
):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for name, value in (("RANK", "0"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "0")):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    argv = ["--model", "tinyvgg", "--dataset", "mnist", "--dist-timeout", "2"]
    code, lines = _refused([*argv, "--output-dir", str(tmp_path)], capsys)
    assert code == 1
    assert lines == [
        "error: the other 1 process(es) never joined rank 0 within 2 s "
        "(WORLD_SIZE=2): start all 2 of them (torchrun starts --nproc_per_node on "
        "each node); --dist-timeout sets the wait"
    ]


def test_ctrl_c_while_the_command_starts_is_one_line(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(CTRL_C_AT_TORCH)
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    env.pop("RANK", None)
    done = subprocess.run(
        [sys.executable, "-m", "vitbook.train", "--output-dir", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        # a test run started in the background inherits an ignored SIGINT, and Python
        # then leaves it ignored: give the command a terminal's default
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert done.returncode == 128 + signal.SIGINT
    assert done.stderr == "Interrupted before training started; nothing was trained.\n"
    assert not (tmp_path / "run").exists()
