"""Datasets, stand-ins and DataLoaders, including every bad-input error."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms

from going_modular import data_setup, datasets, paths, standins
from going_modular.download import DownloadError

TO_TENSOR = transforms.Compose([transforms.Resize((64, 64)), transforms.ToTensor()])


def test_texture_photos_layout(texture_photos):
    for split, count in (("train", 75), ("test", 25)):
        classes = data_setup.check_image_folder(texture_photos / split)
        assert classes == list(standins.TEXTURE_CLASSES)
        for name in classes:
            assert len(list((texture_photos / split / name).glob("*.jpg"))) == count


def test_texture_train_and_test_are_different_images(texture_photos):
    def pixels(split):
        return {
            Image.open(p).tobytes()
            for p in sorted((texture_photos / split).rglob("*.jpg"))
        }

    assert not pixels("train") & pixels("test")


def test_create_dataloaders(texture_photos):
    train_dl, test_dl, class_names = data_setup.create_dataloaders(
        texture_photos / "train",
        texture_photos / "test",
        TO_TENSOR,
        batch_size=32,
        num_workers=0,
    )
    assert class_names == ["brick", "grass", "gravel"]
    X, y = next(iter(train_dl))
    assert X.shape == (32, 3, 64, 64) and y.shape == (32,)
    assert len(train_dl.dataset) == 225 and len(test_dl.dataset) == 75


def test_missing_folder_says_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist.*get_food_data"):
        data_setup.create_dataloaders(
            tmp_path / "nope", tmp_path / "nope", TO_TENSOR, 8
        )


def test_folder_without_classes(tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "loose.jpg").write_bytes(b"")
    with pytest.raises(ValueError, match="no class subfolders"):
        data_setup.create_dataloaders(
            tmp_path / "train", tmp_path / "train", TO_TENSOR, 8
        )


def test_mismatched_classes(tmp_path):
    for split, name in (("train", "a"), ("test", "b")):
        (tmp_path / split / name).mkdir(parents=True)
        Image.new("RGB", (8, 8)).save(tmp_path / split / name / "x.png")
    with pytest.raises(ValueError, match="differ"):
        data_setup.create_dataloaders(
            tmp_path / "train", tmp_path / "test", TO_TENSOR, 8
        )


def test_non_positive_batch_size(texture_photos):
    with pytest.raises(ValueError, match="positive"):
        data_setup.create_dataloaders(
            texture_photos / "train", texture_photos / "test", TO_TENSOR, 0
        )


def test_corrupt_image_names_the_file(tmp_path):
    for name in ("pizza", "sushi"):
        (tmp_path / "train" / name).mkdir(parents=True)
    (tmp_path / "train" / "pizza" / "broken.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    Image.new("RGB", (8, 8)).save(tmp_path / "train" / "sushi" / "x.png")
    with pytest.raises(
        ValueError,
        match="(?s)Cannot decode images: 1 file.*broken.jpg.*Delete or replace",
    ):  # checked when the loaders are made, before any epoch
        data_setup.create_dataloaders(
            tmp_path / "train", tmp_path / "train", TO_TENSOR, 1, num_workers=0
        )
    train_dl, _, _ = data_setup.create_dataloaders(
        tmp_path / "train",
        tmp_path / "train",
        TO_TENSOR,
        1,
        num_workers=0,
        check_images=False,
    )
    with pytest.raises(
        ValueError, match="Cannot decode image .*broken.jpg.*Delete or replace"
    ):
        list(train_dl)


def test_walk_through_dir(texture_photos, capsys):
    data_setup.walk_through_dir(texture_photos)
    out = capsys.readouterr().out
    assert "There are 2 directories and 0 images" in out
    assert "There are 0 directories and 75 images" in out


def test_food_data_offline_uses_stand_in(capsys):
    data = datasets.get_food_data()
    assert data.stand_in
    assert data.train_dir.is_dir() and data.test_dir.is_dir()
    assert capsys.readouterr().out.count("[STAND-IN]") == 1


def test_food_data_offline_without_fallback_raises():
    with pytest.raises(DownloadError, match="BOOK_OFFLINE=1 and fallback=False"):
        datasets.get_food_data(fallback=False)


def test_failed_download_falls_back_and_says_why(monkeypatch, capsys):
    monkeypatch.delenv("BOOK_OFFLINE")

    def failing(url, *args, **kwargs):
        raise DownloadError(f"Could not download {url}: HTTP status 503")

    monkeypatch.setattr(datasets, "download_data", failing)
    assert datasets.get_food_data("20%").stand_in
    out = capsys.readouterr().out
    assert "HTTP status 503" in out and "[STAND-IN]" in out
    with pytest.raises(DownloadError, match="503"):
        datasets.get_food_data(fallback=False)


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


def test_digit_splits_are_disjoint():
    train_images, _ = standins._digits_split(train=True)
    test_images, _ = standins._digits_split(train=False)
    train_set = {im.tobytes() for im in train_images}
    overlap = sum(im.tobytes() in train_set for im in test_images)
    assert overlap <= 2  # sklearn's digits hold a couple of exact duplicates
    assert (
        np.unique(np.concatenate([train_images, test_images]), axis=0).shape[0] > 1780
    )


def _image_folder(root, layout):
    """Write small real-looking PNGs: ``layout`` maps a relative folder to an image count."""
    rng = np.random.default_rng(0)
    for folder, count in layout.items():
        (root / folder).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            pixels = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / folder / f"img{i}.png")


def test_hidden_folders_and_files_are_never_classes_or_samples(tmp_path):
    _image_folder(
        tmp_path,
        {
            "train/.ipynb_checkpoints": 1,  # would sort first and become class 0
            "train/pizza": 2,
            "train/pizza/.ipynb_checkpoints": 1,
            "train/sushi": 3,
            "test/pizza": 1,
            "test/sushi": 1,
        },
    )
    Image.new("RGB", (8, 8)).save(tmp_path / "train" / "sushi" / "._img0.png")
    train_dl, test_dl, classes = data_setup.create_dataloaders(
        tmp_path / "train", tmp_path / "test", TO_TENSOR, 2, num_workers=0
    )
    assert classes == ["pizza", "sushi"] == test_dl.dataset.classes
    assert sorted(t for _, t in train_dl.dataset.samples) == [0, 0, 1, 1, 1]
    assert [t for _, t in test_dl.dataset.samples] == [0, 1]
    assert not any("/." in path for path, _ in train_dl.dataset.samples)


def test_walk_through_dir_skips_hidden_folders(tmp_path, capsys):
    _image_folder(tmp_path, {"pizza": 2, ".ipynb_checkpoints": 1})
    data_setup.walk_through_dir(tmp_path)
    out = capsys.readouterr().out
    assert "There are 1 directories and 0 images" in out
    assert "checkpoints" not in out


def test_negative_workers(texture_photos):
    with pytest.raises(ValueError, match="num_workers must be 0 or more, got -1"):
        data_setup.create_dataloaders(
            texture_photos / "train", texture_photos / "test", TO_TENSOR, 8, -1
        )


def test_book_data_dir_pointing_to_a_file_is_explained(tmp_path, monkeypatch):
    """It ended in a raw FileExistsError traceback from deep inside the stand-in."""
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a folder")
    for value in (a_file, a_file / "data"):
        monkeypatch.setenv("BOOK_DATA_DIR", str(value))
        with pytest.raises(
            NotADirectoryError, match=rf"{a_file} is a file, not a folder.*unset it"
        ):
            datasets.get_food_data()
    monkeypatch.setenv("BOOK_DATA_DIR", str(tmp_path / "new" / "data"))
    assert paths.data_dir() == tmp_path / "new" / "data"  # made when first used
