"""vitbook.data.image_folders and going_modular.data_setup: loaders of an ImageFolder and of any two datasets, and images read
as they are: link loops, 16-bit and float depth, decompression bombs, every image checked
before the first epoch, hidden, one-class and empty-class folders, bad arguments."""

from __future__ import annotations

import io
import os
import struct
import threading
import time
import warnings
import zlib

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import TensorDataset
from torchvision import transforms

from going_modular import data_setup
from going_modular.data.loaders import train_test_loaders
from vitbook.data import image_folders
from vitbook.data.image_folders import ImageDecodeError, load_rgb, verify_images

TO_TENSOR = transforms.Compose([transforms.Resize((8, 8)), transforms.ToTensor()])


def _images(folder, count, size=8):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(len(str(folder)))
    for i in range(count):
        pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"img{i}.png")


def _two_splits(root, train=3, test=1):
    for split, count in (("train", train), ("test", test)):
        for name in ("shirt", "shoe"):
            _images(root / split / name, count)
    return root / "train", root / "test"


def _loaders(train_dir, test_dir, **kwargs):
    """The command line's loaders: folders checked closely, then the usual builder."""
    train, test = image_folders.image_splits(train_dir, test_dir, TO_TENSOR, **kwargs)
    return (*train_test_loaders(train, test, 2), train.classes)


# Link loops (FAIL 7) --------------------------------------------------------------------


def test_a_link_loop_in_a_class_folder_is_refused_with_its_path(tmp_path):
    """``ln -s . train/shirt/loop`` multiplied a class's images (24 -> 344) silently."""
    train_dir, test_dir = _two_splits(tmp_path)
    os.symlink(".", train_dir / "shirt" / "loop")
    with pytest.raises(ValueError, match=r"shirt/loop leads to a folder already read"):
        _loaders(train_dir, test_dir)


def test_two_links_to_one_folder_are_refused(tmp_path):
    train_dir, test_dir = _two_splits(tmp_path)
    _images(tmp_path / "elsewhere", 2)
    os.symlink(tmp_path / "elsewhere", train_dir / "shirt" / "a")
    os.symlink(tmp_path / "elsewhere", train_dir / "shoe" / "b")
    with pytest.raises(ValueError, match=r"shoe/b leads to a folder already read"):
        _loaders(train_dir, test_dir)


def test_a_link_to_a_folder_elsewhere_is_followed_once(tmp_path):
    train_dir, test_dir = _two_splits(tmp_path)
    _images(tmp_path / "more_shirts", 2)
    os.symlink(tmp_path / "more_shirts", train_dir / "shirt" / "more")
    train_dl, _, classes = _loaders(train_dir, test_dir)
    targets = sorted(t for _, t in train_dl.dataset.samples)
    assert classes == ["shirt", "shoe"] and targets == [0] * 5 + [1] * 3


# Depth (FAIL 8) --------------------------------------------------------------------------


def test_a_16_bit_ramp_stays_a_ramp(tmp_path):
    """A 0-65535 ramp loaded 99.6% white with two grey levels."""
    ramp = np.tile(np.linspace(0, 65535, 256).round().astype(np.uint16), (4, 1))
    path = tmp_path / "ramp16.png"
    Image.fromarray(ramp).save(path)
    assert Image.open(path).mode == "I;16"
    pixels = np.asarray(load_rgb(path))
    assert pixels.shape == (4, 256, 3) and (pixels == pixels[..., :1]).all()
    np.testing.assert_array_equal(pixels[0, :, 0], np.arange(256))


def test_float_images_are_scaled_by_their_range(tmp_path):
    """A float TIFF of 0.5 loaded black."""
    Image.fromarray(np.full((4, 4), 0.5, np.float32)).save(tmp_path / "half.tif")
    assert Image.open(tmp_path / "half.tif").mode == "F"
    assert set(np.asarray(load_rgb(tmp_path / "half.tif")).ravel()) == {128}
    # Values outside [0, 1] (a depth map in metres) are stretched over their own range.
    depth = np.array([[2.0, 4.0], [6.0, 10.0]], np.float32)
    Image.fromarray(depth).save(tmp_path / "depth.tif")
    np.testing.assert_array_equal(
        np.asarray(load_rgb(tmp_path / "depth.tif"))[..., 0], [[0, 64], [128, 255]]
    )


def test_8_bit_images_are_unchanged(tmp_path):
    pixels = np.random.default_rng(0).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "rgb.png")
    Image.fromarray(pixels[..., 0]).save(tmp_path / "grey.png")
    np.testing.assert_array_equal(np.asarray(load_rgb(tmp_path / "rgb.png")), pixels)
    grey = np.asarray(load_rgb(tmp_path / "grey.png"))
    np.testing.assert_array_equal(grey, np.repeat(pixels[..., :1], 3, axis=2))


def test_a_16_bit_dataset_trains_on_grey_levels_not_white(tmp_path):
    train_dir, test_dir = _two_splits(tmp_path)
    dark = np.full((8, 8), 16384, np.uint16)  # a quarter of the 16-bit range
    Image.fromarray(dark).save(train_dir / "shirt" / "dark16.png")
    train_dl, _, _ = _loaders(train_dir, test_dir)
    index = [p for p, _ in train_dl.dataset.samples].index(
        str(train_dir / "shirt" / "dark16.png")
    )
    image, _ = train_dl.dataset[index]
    assert image.unique().tolist() == [pytest.approx(64 / 255)]


@pytest.mark.parametrize(("dtype", "suffix"), [(np.uint16, "png"), (np.int32, "tif")])
def test_8_bit_values_in_a_wider_file_keep_their_grey_levels(tmp_path, dtype, suffix):
    """8-bit data saved as a 16-bit PNG or an int32 TIFF loaded near-black (255 -> 1)."""
    ramp = np.tile(np.arange(256, dtype=dtype), (2, 1))
    path = tmp_path / f"ramp.{suffix}"
    Image.fromarray(ramp).save(path)
    assert Image.open(path).mode in ("I;16", "I")
    np.testing.assert_array_equal(np.asarray(load_rgb(path))[0, :, 0], np.arange(256))


def test_a_tiffs_stated_maximum_sets_the_range(tmp_path):
    """12-bit data (MaxSampleValue 4095) spans black to white, not 0 to 16."""
    path = tmp_path / "twelve.tif"
    Image.fromarray(np.array([[0, 1365, 4095]], np.int32)).save(
        path, tiffinfo={281: 4095}
    )
    np.testing.assert_array_equal(np.asarray(load_rgb(path))[0, :, 0], [0, 85, 255])


def test_the_exif_orientation_is_applied(tmp_path):
    """A phone's portrait photo (stored landscape, EXIF orientation 6) loaded sideways."""
    pixels = np.random.default_rng(1).integers(0, 256, (2, 4, 3), dtype=np.uint8)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to view
    Image.fromarray(pixels).save(tmp_path / "phone.png", exif=exif)
    upright = np.asarray(load_rgb(tmp_path / "phone.png"))
    assert upright.shape == (4, 2, 3)
    np.testing.assert_array_equal(upright, np.rot90(pixels, k=-1))


# Non-files and one file under two labels ----------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_named_like_an_image_is_skipped_with_a_warning(tmp_path):
    """A FIFO named pipe.png hung the CLI: opening it waits for a writer forever."""
    train_dir, test_dir = _two_splits(tmp_path)
    fifo = train_dir / "shirt" / "pipe.png"
    os.mkfifo(fifo)
    result = {}

    def load():
        with pytest.warns(UserWarning, match=r"not regular files.*\n  .*pipe\.png"):
            result["loaders"] = _loaders(train_dir, test_dir)

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    worker.join(timeout=20)
    assert not worker.is_alive(), "opened the FIFO and waits for a writer"
    samples = [path for path, _ in result["loaders"][0].dataset.samples]
    assert len(samples) == 6 and str(fifo) not in samples


def test_one_file_under_two_classes_is_refused_with_both_paths(tmp_path):
    train_dir, test_dir = _two_splits(tmp_path)
    os.symlink(train_dir / "shirt" / "img0.png", train_dir / "shoe" / "also.png")
    with pytest.raises(
        ValueError, match=r"under two classes.*\n  .*shirt/img0\.png = .*shoe/also\.png"
    ):
        _loaders(train_dir, test_dir)


def test_a_test_image_that_is_a_training_image_is_refused(tmp_path):
    train_dir, test_dir = _two_splits(tmp_path)
    os.link(train_dir / "shoe" / "img1.png", test_dir / "shoe" / "leak.png")
    with pytest.raises(
        ValueError, match=r"also training images.*\n  .*test/shoe/leak\.png = "
    ):
        _loaders(train_dir, test_dir)


def test_a_file_linked_twice_in_one_class_is_counted_with_a_warning(tmp_path):
    train_dir, test_dir = _two_splits(tmp_path)
    os.symlink(train_dir / "shirt" / "img0.png", train_dir / "shirt" / "again.png")
    with pytest.warns(UserWarning, match="counted more than once"):
        train_dl, _, _ = _loaders(train_dir, test_dir)
    assert len(train_dl.dataset) == 7


# Decompression bombs and corrupt files, found before the first epoch ---------------------


def _png_header(width: int, height: int) -> bytes:
    """A PNG that declares ``width`` x ``height`` pixels (its data is never reached)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)  # 1-bit grey
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IEND", b"")


def test_a_decompression_bomb_is_refused_with_its_name(tmp_path):
    """A 50000x50000 PNG gave a raw DecompressionBombError traceback."""
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(_png_header(50_000, 50_000))
    with pytest.raises(ImageDecodeError, match=r"bomb.png.*exceeds limit.*shrink it"):
        load_rgb(bomb)
    with pytest.raises(ImageDecodeError, match=r"bomb.png: Image size \(2500000000"):
        verify_images([bomb])


def test_verify_images_lists_every_bad_file(tmp_path):
    good = tmp_path / "good.jpg"
    Image.fromarray(
        np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    ).save(good)
    data = good.read_bytes()
    (tmp_path / "truncated.jpg").write_bytes(data[: len(data) // 2])
    buffer = io.BytesIO()
    Image.new("RGB", (64, 64), "red").save(buffer, format="PNG")
    (tmp_path / "cut.png").write_bytes(buffer.getvalue()[:-20])
    (tmp_path / "text.png").write_text("not an image")
    (tmp_path / "bomb.png").write_bytes(_png_header(50_000, 50_000))
    paths = sorted(tmp_path.iterdir())
    with pytest.raises(ImageDecodeError) as info:
        verify_images(paths)
    message = str(info.value)
    assert message.startswith("Cannot decode images: 4 file(s)")
    for name in ("truncated.jpg", "cut.png", "text.png", "bomb.png"):
        assert f"{tmp_path / name}: " in message
    assert "good.jpg" not in message and "Delete or replace them" in message
    verify_images([good])  # nothing to say


def test_a_corrupt_image_stops_the_loaders_before_any_batch(tmp_path):
    train_dir, test_dir = _two_splits(tmp_path)
    (test_dir / "shoe" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    (train_dir / "shirt" / "broken.jpg").write_bytes(b"\xff\xd8 no jpeg")
    with pytest.raises(ImageDecodeError, match="2 file") as info:
        _loaders(train_dir, test_dir)
    assert "shoe/broken.png" in str(info.value) and "shirt/broken.jpg" in str(
        info.value
    )
    train_dl, _, _ = _loaders(train_dir, test_dir, check_images=False)  # found later
    with pytest.raises(ImageDecodeError, match="broken.jpg"):
        list(train_dl)


@pytest.mark.parametrize("fmt", ["BMP", "TIFF", "GIF", "PPM", "PNG", "WEBP"])
def test_a_truncated_image_of_any_format_is_named_before_training(fmt, tmp_path):
    """A BMP, TIFF, GIF or PPM cut in half passed Pillow's ``verify()`` and failed in
    epoch 1 (issue 53)."""
    pixels = np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt)
    whole, cut = tmp_path / f"whole.{fmt}", tmp_path / f"cut.{fmt}"
    whole.write_bytes(buffer.getvalue())
    cut.write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    with pytest.raises(ImageDecodeError, match="1 file") as info:
        verify_images([whole, cut])
    assert f"{cut}: " in str(info.value) and "whole" not in str(info.value)


def test_an_image_of_too_many_pixels_is_refused_not_warned_of(tmp_path, monkeypatch):
    """Above Pillow's MAX_IMAGE_PIXELS (89 megapixels) an image only warned, then cost
    ~700 MB in training (issue 53); at the limit it is fine."""
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 64 * 64)
    Image.new("RGB", (64, 64)).save(tmp_path / "at_limit.png")
    Image.new("RGB", (65, 64)).save(tmp_path / "above.png")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # refused, not warned of
        verify_images([tmp_path / "at_limit.png"])
        with pytest.raises(ImageDecodeError) as info:
            verify_images([tmp_path / "above.png"])
    assert f"{tmp_path / 'above.png'}: 65x64 pixels (0 megapixels" in str(info.value)
    assert "Shrink it" in str(info.value)


def test_a_name_that_is_not_utf8_is_shown_with_escapes(tmp_path):
    cut = os.fsencode(tmp_path) + b"/caf\xe9.png"
    with open(cut, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n garbage")
    with pytest.raises(ImageDecodeError) as info:
        verify_images([os.fsdecode(cut)])
    assert f"{tmp_path}/caf\\xe9.png: " in str(info.value)
    str(info.value).encode("utf-8")  # prints on any terminal


def test_checking_the_texture_photos_is_cheap(texture_photos):
    start = time.perf_counter()
    train, test = image_folders.image_splits(
        texture_photos / "train", texture_photos / "test"
    )
    assert len(train) + len(test) == 300 and train.classes == test.classes
    assert time.perf_counter() - start < 5  # measured: ~0.1 s for 300 JPEGs


# Folders a classifier cannot learn from ----------------------------------------------------


def test_a_one_class_dataset_is_refused(tmp_path):
    _images(tmp_path / "train" / "shirt", 3)
    _images(tmp_path / "test" / "shirt", 1)
    with pytest.raises(ValueError, match=r"single class, 'shirt'.*at least two"):
        _loaders(tmp_path / "train", tmp_path / "test")


@pytest.mark.parametrize("split", ["train", "test"])
def test_an_empty_class_folder_names_its_split_and_path(tmp_path, split):
    train_dir, test_dir = _two_splits(tmp_path)
    empty = tmp_path / split / "shoe"
    for image in empty.iterdir():
        image.unlink()
    (empty / "notes.txt").write_text("no images here")
    with pytest.raises(
        FileNotFoundError,
        match=rf"Class folder {empty} \({split} split\) holds no images",
    ):
        _loaders(train_dir, test_dir)


# Loaders and their arguments --------------------------------------------------------------


def test_create_dataloaders(texture_photos):
    to_64 = transforms.Compose([transforms.Resize((64, 64)), transforms.ToTensor()])
    train_dl, test_dl, class_names = data_setup.create_dataloaders(
        texture_photos / "train", texture_photos / "test", to_64, 32, num_workers=0
    )
    assert class_names == ["brick", "grass", "gravel"]
    X, y = next(iter(train_dl))
    assert X.shape == (32, 3, 64, 64) and y.shape == (32,)
    assert len(train_dl.dataset) == 225 and len(test_dl.dataset) == 75


def test_train_test_loaders_seed_collate_and_test_batch_size():
    train = TensorDataset(torch.arange(10))
    test = TensorDataset(torch.arange(5))

    def first_batch(seed):
        loader, _ = train_test_loaders(train, test, 4, seed=seed)
        return next(iter(loader))[0]

    assert torch.equal(first_batch(3), first_batch(3))
    assert not torch.equal(first_batch(3), first_batch(4))
    _, test_dl = train_test_loaders(
        train, test, 4, test_batch_size=5, collate_fn=lambda items: len(items)
    )
    assert list(test_dl) == [5]


@pytest.mark.parametrize(
    ("batch_size", "num_workers", "message"),
    [
        (0, 0, "batch_size must be a positive integer, got 0"),
        (2, -1, "num_workers must be an integer >= 0, got -1"),
    ],
)
def test_bad_loader_arguments_are_named(tmp_path, batch_size, num_workers, message):
    train_dir, test_dir = _two_splits(tmp_path)
    with pytest.raises(ValueError, match=message):
        data_setup.create_dataloaders(
            train_dir, test_dir, TO_TENSOR, batch_size, num_workers
        )


def test_missing_folder_says_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist.*get_food_data"):
        _loaders(tmp_path / "nope", tmp_path / "nope")


def test_folder_without_classes(tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "loose.jpg").write_bytes(b"")
    with pytest.raises(ValueError, match="no class subfolders"):
        _loaders(tmp_path / "train", tmp_path / "train")


def test_mismatched_classes(tmp_path):
    _images(tmp_path / "train" / "a", 1)
    _images(tmp_path / "test" / "b", 1)
    with pytest.raises(ValueError, match="differ"):
        _loaders(tmp_path / "train", tmp_path / "test")


# Hidden files and folders -----------------------------------------------------------------


def test_hidden_folders_and_files_are_never_classes_or_samples(tmp_path):
    for folder, count in {
        "train/.ipynb_checkpoints": 1,  # would sort first and become class 0
        "train/pizza": 2,
        "train/pizza/.ipynb_checkpoints": 1,
        "train/sushi": 3,
        "test/pizza": 1,
        "test/sushi": 1,
    }.items():
        _images(tmp_path / folder, count)
    Image.new("RGB", (8, 8)).save(tmp_path / "train" / "sushi" / "._img0.png")
    train_dl, test_dl, classes = _loaders(tmp_path / "train", tmp_path / "test")
    assert classes == ["pizza", "sushi"] == test_dl.dataset.classes
    assert sorted(t for _, t in train_dl.dataset.samples) == [0, 0, 1, 1, 1]
    assert [t for _, t in test_dl.dataset.samples] == [0, 1]
    assert not any("/." in path for path, _ in train_dl.dataset.samples)


def test_walk_through_dir_counts_and_skips_hidden_folders(
    texture_photos, tmp_path, capsys
):
    data_setup.walk_through_dir(texture_photos)
    out = capsys.readouterr().out
    assert "There are 2 directories and 0 images" in out
    assert "There are 0 directories and 75 images" in out
    _images(tmp_path / "pizza", 2)
    _images(tmp_path / ".ipynb_checkpoints", 1)
    data_setup.walk_through_dir(tmp_path)
    out = capsys.readouterr().out
    assert "There are 1 directories and 0 images" in out
    assert "checkpoints" not in out


def test_the_largest_image_is_named_when_it_is_large(tmp_path, monkeypatch):
    """A 9000x9000 PNG trained at full-size decoding (1.7 GB) without a word."""
    train_dir, test_dir = _two_splits(tmp_path)
    _images(train_dir / "shoe" / "big", 1, size=20)  # the largest, 400 pixels
    monkeypatch.setattr(image_folders, "LARGE_IMAGE_PIXELS", 100)
    with pytest.warns(image_folders.ImageFolderWarning) as caught:
        image_folders.image_splits(train_dir, test_dir)
    (warning,) = caught
    assert f"the largest {train_dir / 'shoe' / 'big' / 'img0.png'} (20x20" in str(
        warning.message
    )
    assert "decodes each image at full size" in str(warning.message)
    monkeypatch.setattr(image_folders, "LARGE_IMAGE_PIXELS", 400)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not large: nothing said
        image_folders.image_splits(train_dir, test_dir)
