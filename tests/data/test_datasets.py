"""vitbook.data.datasets: each getter's real data, its stand-in offline or after a failed
download, and the errors without a fallback (Fashion-MNIST: test_fashion_mnist_sources.py)."""

from __future__ import annotations

import pytest
import torch
from torchvision import transforms

from vitbook.data import datasets, paths
from vitbook.data.download import DownloadError


def test_food_data_offline_uses_stand_in(capsys):
    data = datasets.get_food_data()
    assert data.stand_in
    assert data.train_dir.is_dir() and data.test_dir.is_dir()
    assert capsys.readouterr().out == (
        "[STAND-IN] pizza/steak/sushi is not available offline: using texture photos "
        "(brick, grass, gravel) from scikit-image instead.\n"
    )


def test_food_data_offline_without_fallback_raises():
    with pytest.raises(
        DownloadError, match=r"set_offline\(True\).* and fallback=False"
    ):
        datasets.get_food_data(fallback=False)


def test_failed_download_falls_back_and_says_why(monkeypatch, capsys, online):

    def failing(url, *args, **kwargs):
        raise DownloadError(f"Could not download {url}: HTTP status 503")

    monkeypatch.setattr(datasets, "download_data", failing)
    assert datasets.get_food_data("20%").stand_in
    out = capsys.readouterr().out
    assert "HTTP status 503" in out and "[STAND-IN]" in out
    with pytest.raises(DownloadError, match="503"):
        datasets.get_food_data(fallback=False)


def test_a_failed_torchvision_download_says_what_to_do(monkeypatch, capsys, online):

    def unreachable(root, train, transform):
        raise RuntimeError("Error downloading cifar-10-python.tar.gz")

    monkeypatch.setattr(datasets, "_real_cifar10", unreachable)
    with pytest.raises(
        DownloadError, match="Could not download CIFAR-10.*fallback=True"
    ):
        datasets.get_cifar10(fallback=False)
    assert len(datasets.get_cifar10(train=False)) == 720  # the stand-in
    out = capsys.readouterr().out
    assert out.startswith("[INFO] Could not get CIFAR-10: Error downloading")


def test_unknown_food_subset():
    with pytest.raises(ValueError, match="Unknown subset"):
        datasets.get_food_data("50%")


def test_mnist_stand_in_shape_and_split():
    train = datasets.get_mnist(train=True, transform=transforms.ToTensor())
    test = datasets.get_mnist(train=False, transform=transforms.ToTensor())
    assert len(train) == 1437 and len(test) == 360
    image, label = train[0]
    assert image.shape == (1, 28, 28) and 0 <= label <= 9
    assert len(train.classes) == 10
    assert sorted(set(test.targets)) == list(range(10))


def test_cifar_stand_in_shape_and_labels():
    test = datasets.get_cifar10(train=False, transform=transforms.ToTensor())
    assert len(test) == 720
    images = torch.stack([test[i][0] for i in range(20)])
    assert images.shape == (20, 3, 32, 32)
    assert images.std() > 0.1  # real pictures, not blank canvases
    assert sorted(set(test.targets)) == list(range(10))


def test_a_data_dir_pointing_to_a_file_is_explained(tmp_path):
    """It ended in a raw FileExistsError traceback from deep inside the stand-in."""
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a folder")
    for value in (a_file, a_file / "data"):
        paths.set_data_dir(value)  # the autouse fixture restores it
        with pytest.raises(
            NotADirectoryError, match=rf"{a_file} is a file, not a folder.*unset it"
        ):
            datasets.get_food_data()
    paths.set_data_dir(tmp_path / "new" / "data")
    assert paths.data_dir() == tmp_path / "new" / "data"  # made when first used
    paths.set_data_dir(None)
    assert paths.data_dir() == paths.project_root() / "data"  # the checkout's


def test_the_mirror_and_the_debian_folder_are_set_not_read_from_the_book(tmp_path):
    assert datasets.course_data_url().startswith("https://github.com/mrdbourke/")
    # The autouse fixture puts the mirror and the Debian folder back.
    paths.set_mirror(" http://127.0.0.1:8000/files/ ")
    assert datasets.course_data_url() == "http://127.0.0.1:8000/files"
    assert paths.set_mirror("") == "http://127.0.0.1:8000/files"
    assert datasets.course_data_url().startswith("https://github.com/mrdbourke/")
    assert paths.debian_fashion_mnist() == datasets.DEBIAN_FASHION_MNIST
    paths.set_debian_fashion_mnist(tmp_path / "elsewhere")
    assert paths.debian_fashion_mnist() == tmp_path / "elsewhere"
