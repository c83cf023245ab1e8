"""Where Fashion-MNIST comes from on a fresh machine (vitbook.data.datasets): in order,
the data folder, Debian's installed package, Debian's package downloaded without root, and
torchvision's download, each verified by SHA-256; with none, one line saying what to run.

The sources are small fake files whose hashes replace the official ones; the Debian
folder is pointed at a missing one; apt-get, dpkg-deb and torchvision's download are
stand-ins, except in the one test that runs the real `apt-get download`."""

import gzip
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from vitbook.data import (
    datasets,
    network,
    paths,
    standins,
)
from vitbook.data.download import DownloadError

NAMES = tuple(datasets.FASHION_MNIST_SHA256)


def _contents(name: str) -> bytes:
    # Real IDX headers (so torchvision reads them): 3 images of 28x28, or 3 labels.
    if "images" in name:
        header = bytes([0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 28, 0, 0, 0, 28])
        return header + bytes(i % 251 for i in range(3 * 28 * 28))
    return bytes([0, 0, 8, 1, 0, 0, 0, 3]) + bytes([7, 2, 9])


def write_files(folder: Path) -> Path:
    """The four (fake) files, gzipped as published, in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in NAMES:
        (folder / f"{name}.gz").write_bytes(gzip.compress(_contents(name)))
    return folder


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A machine with no Fashion-MNIST anywhere, online, and recording fetchers."""
    hashes = {n: hashlib.sha256(_contents(n)).hexdigest() for n in NAMES}
    monkeypatch.setattr(datasets, "FASHION_MNIST_SHA256", hashes)
    paths.set_data_dir(tmp_path / "data")  # the autouse fixture restores both
    paths.set_debian_fashion_mnist(tmp_path / "no-debian-package")
    network.set_offline(False)  # the autouse fixture restores it
    monkeypatch.delenv("CI", raising=False)
    calls = []

    def fetcher(name, works):
        def fetch(root, raw):
            calls.append(name)
            if not works[name]:
                return None
            return (
                datasets._install_fashion_mnist_files(
                    raw, [write_files(tmp_path / name)]
                )
                and name
            )

        return fetch

    works = {"apt": False, "torchvision": False}
    monkeypatch.setattr(datasets, "_fetch_debian_package", fetcher("apt", works))
    monkeypatch.setattr(
        datasets, "_fetch_with_torchvision", fetcher("torchvision", works)
    )
    return tmp_path, calls, works


def test_book_data_dir_comes_first(fresh):
    tmp_path, calls, works = fresh
    write_files(tmp_path / "data" / "fashion-mnist")
    write_files(tmp_path / "no-debian-package")
    works["apt"] = works["torchvision"] = True
    assert datasets.prepare_fashion_mnist() == str(tmp_path / "data" / "fashion-mnist")
    assert calls == []
    raw = tmp_path / "data" / "FashionMNIST" / "raw"
    assert sorted(p.name for p in raw.iterdir()) == sorted(NAMES)  # decompressed
    assert datasets.prepare_fashion_mnist() == str(raw)  # second time: already there


def test_debian_package_before_any_download(fresh):
    tmp_path, calls, works = fresh
    write_files(tmp_path / "no-debian-package")
    works["apt"] = works["torchvision"] = True
    assert datasets.prepare_fashion_mnist() == str(tmp_path / "no-debian-package")
    assert calls == []


def test_apt_download_before_torchvision(fresh, capsys):
    _, calls, works = fresh
    works["apt"] = works["torchvision"] = True
    assert datasets.prepare_fashion_mnist() == "apt"
    assert calls == ["apt"]
    assert "got it from apt" in capsys.readouterr().out


def test_torchvision_when_apt_fails(fresh):
    _, calls, works = fresh
    works["torchvision"] = True
    assert datasets.prepare_fashion_mnist() == "torchvision"
    assert calls == ["apt", "torchvision"]


def test_nothing_works_one_line_saying_what_to_run(fresh):
    tmp_path, calls, _ = fresh
    with pytest.raises(DownloadError) as error:
        datasets.prepare_fashion_mnist()
    assert calls == ["apt", "torchvision"]
    line = str(error.value)
    assert line == datasets.fashion_mnist_missing(tmp_path / "data")
    assert "\n" not in line
    assert datasets.INSTALL_FASHION_MNIST in line
    assert datasets.PREPARE_FASHION_MNIST in line


def test_offline_never_fetches(fresh, monkeypatch):
    _, calls, works = fresh
    works["apt"] = works["torchvision"] = True
    network.set_offline(True)
    with pytest.raises(DownloadError):
        datasets.prepare_fashion_mnist()
    assert calls == []


def test_chapters_stop_with_the_same_line_not_a_small_stand_in(fresh, monkeypatch):
    tmp_path, _, _ = fresh
    network.set_offline(True)
    line = datasets.fashion_mnist_missing(tmp_path / "data")
    with pytest.raises(DownloadError) as error:
        datasets.fashion_mnist_tensors(True, pad_to_32=True)
    assert str(error.value) == line
    with pytest.raises(DownloadError) as error:
        datasets.get_fashion_mnist(train=False)
    assert str(error.value) == line


def test_stand_in_only_when_asked_and_never_where_refused(fresh, monkeypatch, capsys):
    monkeypatch.setattr(network, "_state", dict(network._state))  # restored after
    network.set_offline(True)
    network.set_stand_ins(True)  # the library's default (the book's CI turns it off)
    dataset = datasets.get_fashion_mnist(train=False, fallback=True)
    assert isinstance(dataset, standins.DigitsMNIST)
    assert "[STAND-IN] Fashion-MNIST" in capsys.readouterr().out
    network.set_stand_ins(False)  # what the book's settings do under CI=true
    with pytest.raises(DownloadError):
        datasets.get_fashion_mnist(train=False, fallback=True)


def test_tensors_from_the_verified_files(fresh):
    tmp_path, _, _ = fresh
    write_files(tmp_path / "data" / "fashion-mnist")
    x, y = datasets.fashion_mnist_tensors(True, pad_to_32=True, rgb=True)
    assert x.shape == (3, 3, 32, 32) and x.dtype == torch.float32
    assert y.tolist() == [7, 2, 9]


def test_a_corrupt_file_is_refused(fresh):
    tmp_path, _, _ = fresh
    folder = write_files(tmp_path / "data" / "fashion-mnist")
    (folder / f"{NAMES[0]}.gz").write_bytes(gzip.compress(b"not the data"))
    with pytest.raises(ValueError, match="SHA-256 mismatch"):
        datasets.prepare_fashion_mnist()


def _fake_tool(bin_dir: Path, name: str, script: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!{sys.executable}\n{script}")
    path.chmod(0o755)


def test_apt_download_unpacks_without_root_into_data(tmp_path, monkeypatch):
    # apt-get and dpkg-deb stand-ins on PATH: "download" writes a .deb in the current
    # folder, "dpkg-deb -x" unpacks the package's files under the target folder.
    hashes = {n: hashlib.sha256(_contents(n)).hexdigest() for n in NAMES}
    monkeypatch.setattr(datasets, "FASHION_MNIST_SHA256", hashes)
    payload = write_files(tmp_path / "payload")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "log"
    _fake_tool(
        bin_dir,
        "apt-get",
        "import os, sys\n"
        f"open({str(log)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        "open('dataset-fashion-mnist_1_all.deb', 'w').write('deb')\n",
    )
    _fake_tool(
        bin_dir,
        "dpkg-deb",
        "import shutil, sys\n"
        "target = sys.argv[3] + '/usr/share/datasets/fashion-mnist'\n"
        f"shutil.copytree({str(payload)!r}, target)\n",
    )
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    root = tmp_path / "data"
    raw = root / "FashionMNIST" / "raw"
    assert "apt-get download" in datasets._fetch_debian_package(root, raw)
    assert sorted(p.name for p in raw.iterdir()) == sorted(NAMES)
    assert sorted(p.name for p in root.iterdir()) == ["FashionMNIST"]  # temp removed
    assert log.read_text().split()[0] == "download"
    assert log.read_text().split()[-1] == datasets.DEBIAN_PACKAGE


def test_apt_download_failure_is_no_source(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_tool(bin_dir, "apt-get", "import sys\nsys.exit(100)\n")
    _fake_tool(bin_dir, "dpkg-deb", "")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    root = tmp_path / "data"
    assert datasets._fetch_debian_package(root, root / "FashionMNIST" / "raw") is None
    assert list(root.iterdir()) == []


def test_torchvision_download_is_verified(tmp_path, monkeypatch):
    import torchvision.datasets

    hashes = {n: hashlib.sha256(_contents(n)).hexdigest() for n in NAMES}
    monkeypatch.setattr(datasets, "FASHION_MNIST_SHA256", hashes)
    timeouts = []

    class FakeFashionMNIST:
        def __init__(self, root, train, download):
            timeouts.append(socket.getdefaulttimeout())
            raw = Path(root) / "FashionMNIST" / "raw"
            raw.mkdir(parents=True)
            for name in NAMES:
                data = _contents(name)
                (raw / name).write_bytes(data[:-1] + b"\xff" if corrupt else data)

    monkeypatch.setattr(torchvision.datasets, "FashionMNIST", FakeFashionMNIST)
    corrupt = False
    root = tmp_path / "good"
    source = datasets._fetch_with_torchvision(root, root / "FashionMNIST" / "raw")
    assert source == "torchvision's download"
    corrupt = True
    root = tmp_path / "bad"
    with pytest.raises(ValueError, match="SHA-256"):
        datasets._fetch_with_torchvision(root, root / "FashionMNIST" / "raw")
    assert timeouts == [datasets.NETWORK_TIMEOUT_SECONDS] * 2
    assert socket.getdefaulttimeout() is None


def test_prepare_command_fails_fast_with_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOOK_")}
    start = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "vitbook.data.datasets",
            "--prepare",
            "fashion-mnist",
            "--offline",
            "--data-dir",
            str(tmp_path / "data"),
            "--debian-dir",
            str(tmp_path / "absent"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert time.perf_counter() - start < 60
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == datasets.fashion_mnist_missing(tmp_path / "data") + "\n"


def _apt_has_the_package() -> bool:
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        return False
    shown = subprocess.run(
        ["apt-cache", "show", datasets.DEBIAN_PACKAGE], capture_output=True
    )
    return shown.returncode == 0


@pytest.mark.skipif(
    not _apt_has_the_package(),
    reason="apt-get, or Debian's package index with dataset-fashion-mnist, is missing",
)
def test_real_apt_download_gives_the_official_files(tmp_path):
    root = tmp_path / "data"
    raw = root / "FashionMNIST" / "raw"
    source = datasets._fetch_debian_package(root, raw)
    if source is None:
        pytest.skip("apt-get download could not reach a Debian mirror")
    assert datasets._install_fashion_mnist_files(raw, []) == str(raw)  # SHA-256 check
