"""The CLI under torchrun: 2 gloo processes on the CPU train as 1 process with the global
batch, write one run (rank 0), resume under as many processes only, refuse to start when
given different options, and end cleanly when a rank dies.

Each run launches ``python -m torch.distributed.run`` as a subprocess on photo crops
(scikit-image's sample photos: 2 classes, 32 training and 13 test images) with TinyVGG,
which has no dropout nor BatchNorm: so 2 processes of 4 images per step take exactly the
steps of 1 process of 8. Both go through ``DistributedSampler`` (1 process under torchrun
too), whose order depends on the seed and the epoch, not on the number of processes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vitbook import train
from vitbook.data.files import sha256_of
from vitbook.training import runs
from vitbook.training.checkpoint import CHECKPOINT_NAME, read_checkpoint

ROOT = Path(__file__).resolve().parents[1]
N_TEST = 13  # odd: 7 test images on rank 0, 6 on rank 1
EPOCHS = 3
# A wrapper run by torchrun instead of `-m vitbook.train`: it writes its pid (for
# the test that kills a rank) and sleeps PACE_S per training image, so that an epoch
# lasts long enough to be interrupted (sleeping changes no number).
PACED = """\
import os, sys, time
from pathlib import Path
from vitbook import train
from vitbook.data import image_folders

Path(os.environ["PID_DIR"], "rank" + os.environ["RANK"]).write_text(str(os.getpid()))
image_splits = image_folders.image_splits


def paced(train_dir, test_dir, transform=None, *rest, **options):
    def slow(image):
        time.sleep(float(os.environ["PACE_S"]))
        return transform(image)

    return image_splits(train_dir, test_dir, slow, *rest, **options)


image_folders.image_splits = paced
train.main(sys.argv[1:])
"""

# A wrapper run by torchrun instead of `-m vitbook.train`: rank 1 reads the image folders
# DELAY_S seconds late, as a node with a slower disk would.
RANK1_SLOW = """\
import os, sys, time
from vitbook import train
from vitbook.data import image_folders

image_splits = image_folders.image_splits


def late(*args, **options):
    if os.environ["RANK"] == "1":
        time.sleep(float(os.environ["DELAY_S"]))
    return image_splits(*args, **options)


image_folders.image_splits = late
train.main()  # as the program: it ends after this
"""

# A wrapper run by torchrun instead of `-m vitbook.train`: rank 1 alone adds the options
# of RANK1_OPTIONS to the command, as a node that typed its own command differently.
RANK1_DIFFERS = """\
import os, shlex, sys
from vitbook import train

extra = shlex.split(os.environ["RANK1_OPTIONS"]) if os.environ["RANK"] == "1" else []
train.main([*sys.argv[1:], *extra])
"""


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    """An ImageFolder of 32x32 crops of two photos (a cat, a cup of coffee)."""
    from PIL import Image
    from skimage import data

    root = tmp_path_factory.mktemp("photos")
    for name, photo in (("cat", data.chelsea()), ("coffee", data.coffee())):
        for split, first, count in (("train", 0, 16), ("test", 16, 7)):
            if name == "coffee" and split == "test":
                count -= 1  # 7 + 6 = N_TEST
            (root / split / name).mkdir(parents=True)
            for k in range(first, first + count):
                y, x = 24 * (k // 8), 36 * (k % 8)
                crop = photo[y : y + 32, x : x + 32]  # (32, 32, 3) uint8
                Image.fromarray(crop).save(root / split / name / f"{k}.png")
    return root


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra: str) -> dict[str, str]:
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    return env | {"OMP_NUM_THREADS": "1", **extra}


def _launch(
    nproc: int,
    args: list[str],
    *,
    script: Path | None = None,
    launcher: tuple[str, ...] = (),
    log: Path | None = None,
    **env: str,
) -> subprocess.Popen:
    """``torchrun --nproc_per_node=nproc`` (and ``launcher``'s options) of the CLI (or of
    ``script``), its output piped (or written to ``log``)."""
    target = [str(script)] if script else ["-m", "vitbook.train"]
    command = [
        sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
        "--master_addr=127.0.0.1", f"--master_port={_free_port()}", *launcher,
        *target, *args,
    ]  # fmt: skip
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env=_env(**env),
        stdout=subprocess.PIPE if log is None else log.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
    )


def _finish(process: subprocess.Popen, timeout: float = 120) -> tuple[int, str]:
    out, _ = process.communicate(timeout=timeout)
    return process.returncode, out or ""


def _options(photos: Path, out: Path, batch: int, *extra: str) -> list[str]:
    return [
        "--data-dir", str(photos), "--model", "tinyvgg", "--img-size", "32",
        "--batch-size", str(batch), "--epochs", str(EPOCHS), "--num-workers", "0",
        "--output-dir", str(out), "--offline", *extra,
    ]  # fmt: skip


def _run_dirs(out: Path) -> list[Path]:
    return [p for p in out.iterdir() if p.is_dir() and not p.is_symlink()]


def _results(run_dir: Path) -> dict:
    return json.loads((run_dir / runs.RESULTS).read_text())


def _when_saved(run_dir_parent: Path, process: subprocess.Popen) -> Path:
    """The run folder, once its first epoch's checkpoint is written."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        for run_dir in _run_dirs(run_dir_parent) if run_dir_parent.exists() else []:
            if (run_dir / CHECKPOINT_NAME).exists():
                return run_dir
        time.sleep(0.02)
    raise AssertionError(f"no checkpoint was written: {_finish(process)[1]}")


@pytest.fixture(scope="module")
def one_and_two(photos, tmp_path_factory) -> dict:
    """The same training as 1 process of 8 images per step and 2 processes of 4."""
    outs = {n: tmp_path_factory.mktemp(f"out{n}") for n in (1, 2)}
    launched = {n: _launch(n, _options(photos, outs[n], 8 // n)) for n in (1, 2)}
    done = {}
    for n, process in launched.items():
        code, text = _finish(process)
        assert code == 0, text
        done[n] = {"out": outs[n], "text": text}
    return done


def test_two_processes_train_as_one_with_the_global_batch(one_and_two):
    one, two = (_results(_run_dirs(one_and_two[n]["out"])[0]) for n in (1, 2))
    for key in ("train_loss", "test_loss"):
        assert len(two[key]) == EPOCHS
        # Averaging 2 gradients of 4 images rounds differently from 1 gradient of 8,
        # and Adam's updates carry the rounding on: the first epoch agrees to 1e-5, the
        # last to about 1e-4 (AMD EPYC) or better (Intel Xeon).
        assert two[key][0] == pytest.approx(one[key][0], abs=1e-5, rel=0)
        assert two[key] == pytest.approx(one[key], abs=5e-4, rel=0)
    assert two["test_acc"] == one["test_acc"]
    assert two["train_acc"] == one["train_acc"]
    # every test image counted once: 13 images, so the accuracy is a multiple of 1/13
    assert two["test_images"] == N_TEST
    assert all(abs(a * N_TEST - round(a * N_TEST)) < 1e-9 for a in two["test_acc"])


def test_rank_0_alone_writes_the_run_and_reports(one_and_two):
    out, text = one_and_two[2]["out"], one_and_two[2]["text"]
    (run_dir,) = _run_dirs(out)
    written = sorted(
        str(Path(folder, name).relative_to(out))
        for folder, _, names in os.walk(out)
        for name in names
    )
    assert written == [
        f"{run_dir.name}/{name}"
        for name in ("loss_curves.png", "model.pth", "results.json")
    ]
    assert runs.pair_matches(run_dir)
    assert _results(run_dir)["status"] == "complete"
    assert text.count("[INFO] Distributed: 2 processes (gloo on cpu)") == 1
    assert "a global batch of 8" in text and "used as given, not scaled" in text
    assert text.count("[INFO] Saved the run to") == 1
    assert text.count(f"Epoch   {EPOCHS}/{EPOCHS}") == 1


def test_bad_options_are_reported_once(photos, tmp_path):
    code, text = _finish(_launch(2, _options(photos, tmp_path, 4, "--lr", "-1")))
    assert code != 0
    assert text.count("argument --lr/--learning-rate: must be positive") == 1


def test_processes_given_different_options_refuse_to_start(photos, tmp_path):
    """Rank 1 differs in --seed (overlapping shards) and --lr (one rank explodes): one
    launch, both reported, once, before anything is written."""
    script = tmp_path / "rank1_differs.py"
    script.write_text(RANK1_DIFFERS)
    out = tmp_path / "out"
    launched = _launch(
        2, _options(photos, out, 4), script=script, RANK1_OPTIONS="--seed 7 --lr 0.5"
    )
    code, text = _finish(launched)
    assert code != 0
    said = (
        "error: the 2 processes were started with different options: "
        "--lr 0.001 on rank 0 but 0.5 on rank 1; --seed 42 on rank 0 but 7 on rank 1. "
    )
    assert text.count(said) == 1, text
    assert text.count("error:") == 1 and "[rank" not in text, text
    ours = text.split(" failed (exitcode: ")[0]  # before torchrun's own report
    assert "Traceback" not in ours, text
    assert not (out.exists() and _run_dirs(out))


def test_an_interrupted_run_resumes_under_as_many_processes(
    photos, one_and_two, tmp_path
):
    script = tmp_path / "paced.py"
    script.write_text(PACED)
    out = tmp_path / "out"
    pace = {"PACE_S": "0.04", "PID_DIR": str(tmp_path)}
    process = _launch(2, _options(photos, out, 4), script=script, **pace)
    run_dir = _when_saved(out, process)
    process.send_signal(signal.SIGTERM)  # to the launcher, which forwards it to both
    _, text = _finish(process)
    stopped = _results(run_dir)
    assert stopped["status"] == "interrupted", text
    assert 1 <= stopped["epochs_completed"] < EPOCHS

    refused = subprocess.run(
        [sys.executable, "-m", "vitbook.train", "--resume", str(run_dir)],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "trained by 2 process(es) and this one has 1" in refused.stderr
    assert "torchrun --nproc_per_node=2" in refused.stderr

    code, text = _finish(_launch(2, ["--resume", str(run_dir)]))
    assert code == 0, text
    resumed = _results(run_dir)
    uninterrupted = _results(_run_dirs(one_and_two[2]["out"])[0])
    assert resumed["status"] == "complete"
    for key in ("train_loss", "test_loss", "train_acc", "test_acc"):
        assert resumed[key] == uninterrupted[key]


def test_a_refused_resume_ends_every_rank_with_2_and_the_message_last(
    photos, tmp_path, signal_at_training_step
):
    """Resuming a 1-process run under 2: rank 0 exited with 2 while rank 1 still
    prepared its data (later than rank 0 here), so torchrun killed rank 1 (SIGTERM)
    and reported that too."""
    signal_at_training_step(signal.SIGTERM, step=6)  # 4 steps per epoch: in epoch 2
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as info:
        train.main(_options(photos, out, 8))
    assert info.value.code == 143
    (run_dir,) = _run_dirs(out)
    script = tmp_path / "rank1_slow.py"
    script.write_text(RANK1_SLOW)
    launched = _launch(2, ["--resume", str(run_dir)], script=script, DELAY_S="1")
    code, text = _finish(launched)
    assert code != 0
    said = "that run was trained by 1 process(es) and this one has 2"
    assert text.count(said) == 1, text
    ours = [line for line in text.splitlines() if not re.match(r"[EW]\d{4} ", line)]
    ours = ours[: ours.index("Traceback (most recent call last):")]
    assert said in ours[-1], text  # the last line our processes print
    assert text.count("exitcode  : 2 ") == 2 and "(SIGTERM)" not in text, text


def test_a_diverging_loss_stops_every_rank_and_is_reported_once(photos, tmp_path):
    code, text = _finish(_launch(2, _options(photos, tmp_path, 4, "--lr", "1e9")))
    assert code == 1
    assert text.count("error: The training loss became nan") == 1, text
    (run_dir,) = _run_dirs(tmp_path)
    assert _results(run_dir)["status"] == "failed"


# What rank 0 says when rank 1 dies, by the run's status: stopped by torchrun's agent,
# which sees the dead worker and sends SIGTERM to the others (every 0.1 s here), or by
# the process group, whose next collective fails. By default either may come first; when
# the agent looks late (as one on another machine may), the process group does.
INTERRUPTED = {"interrupted": "Interrupted during epoch 2: saved epoch 1's checkpoint"}
LOST = {"failed": "[rank 0 of 2] Lost contact with another process"}
STOPPED_BY = {
    "agent": (("--monitor-interval=0.1",), INTERRUPTED | LOST),
    "group": (("--monitor-interval=600",), LOST),
}


def _said(log: Path, messages: dict[str, str]) -> bool:
    return any(message in log.read_text() for message in messages.values())


@pytest.mark.parametrize("stopper", sorted(STOPPED_BY))
def test_a_killed_rank_ends_the_run_within_the_timeout(photos, tmp_path, stopper):
    launcher, messages = STOPPED_BY[stopper]
    script, log = tmp_path / "paced.py", tmp_path / "log.txt"
    script.write_text(PACED)
    out, timeout = tmp_path / "out", 20
    pace = {"PACE_S": "0.04", "PID_DIR": str(tmp_path)}
    options = _options(photos, out, 4, "--dist-timeout", str(timeout))
    process = _launch(2, options, script=script, launcher=launcher, log=log, **pace)
    run_dir = _when_saved(out, process)
    os.kill(int((tmp_path / "rank1").read_text()), signal.SIGKILL)
    killed = time.monotonic()
    while not _said(log, messages):  # rank 0 has kept the run and said so
        assert time.monotonic() - killed < timeout, log.read_text()
        time.sleep(0.05)
    if stopper == "group":
        process.send_signal(signal.SIGTERM)  # rather than wait for the agent to look
    code, _ = _finish(process)
    assert code != 0
    record, text = _results(run_dir), log.read_text()
    assert messages[record["status"]] in text
    if stopper == "agent":
        assert "rank      : 1" in text and "SIGKILL" in text  # torchrun's summary
    checkpoint = read_checkpoint(run_dir)  # its checksum verified
    assert checkpoint["epoch"] == record["epochs_completed"] >= 1
    assert sha256_of(run_dir / runs.MODEL) == record["model_sha256"]
