"""Folders of images checked closely before a long run: what the command line trains on.

Images are read as they are: upright as their EXIF orientation says, 16-bit and float
images scaled to 8 bits by the range of their data, class folders walked without counting
a folder twice (a symbolic link loop is refused) or opening what is not a regular file (a
FIFO named ``x.png`` is skipped with a warning), one file under two classes or in both
splits refused, and :func:`verify_images` decodes every image once before training, so a
corrupt or truncated file (of any format) or one of more pixels than Pillow's
``MAX_IMAGE_PIXELS`` is named before the first epoch, not in the middle of one. Paths in
messages are shown with :func:`~vitbook.data.files.shown`, so a name that is not UTF-8
prints.
"""

from __future__ import annotations

import os
import stat
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps
from torchvision import datasets

from vitbook.data.files import shown

__all__ = [
    "LARGE_IMAGE_PIXELS",
    "ImageDecodeError",
    "ImageFolderWarning",
    "VisibleImageFolder",
    "check_image_folder",
    "image_splits",
    "is_hidden",
    "load_rgb",
    "verify_images",
]


class ImageDecodeError(ValueError):
    """An image file that cannot be decoded; the message names it and what to do."""


class ImageFolderWarning(UserWarning):
    """Something in an image folder worth knowing that does not stop training: files
    skipped or counted twice, images so large that decoding them is slow."""


# Images of more pixels are worth shrinking once (4096x4096: about 48 MB decoded).
LARGE_IMAGE_PIXELS = 4096 * 4096


# TIFF tags that state the largest sample value (MaxSampleValue, SMaxSampleValue).
_STATED_MAXIMUM = (281, 341)


def _stated_maximum(image: Image.Image) -> float | None:
    """The largest sample value a TIFF file states, if it states one."""
    tags = getattr(image, "tag_v2", {})
    stated = next((tags[t] for t in _STATED_MAXIMUM if t in tags), None)
    return (
        float(max(stated) if isinstance(stated, tuple) else stated) if stated else None
    )


def _value_range(
    image: Image.Image, finite: np.ndarray, stated: float | None
) -> tuple[float, float]:
    """The range that maps to 0-255: 0.0-1.0 for floats; for integers the ``stated``
    maximum, else 0-255 when every value fits 8 bits (8-bit data in a 16-bit PNG or an
    int32 TIFF), else 0-65535; the data's own minimum and maximum when they fall outside."""
    if image.mode == "F":
        low, high = 0.0, 1.0
    elif stated is not None and stated > 0:
        low, high = 0.0, stated
    else:
        low, high = 0.0, 255.0 if finite.size and finite.max() <= 255 else 65535.0
    if finite.size and (finite.min() < low or finite.max() > high):
        low, high = float(finite.min()), float(finite.max())
    return low, high


def _to_8_bits(image: Image.Image, stated: float | None = None) -> Image.Image:
    """A 16-bit (``I;16``, ``I``) or float (``F``) image as 8-bit greyscale ("L").

    Values are scaled by their range (:func:`_value_range`; ``stated``: the file's largest
    sample value, if it says): a 16-bit ramp stays a ramp, a
    float 0.5 is mid-grey, 8-bit values in a 16-bit file keep their grey levels instead of
    turning black, a depth map is stretched over its own range. Other modes are returned
    unchanged.
    """
    if image.mode not in ("I", "F") and not image.mode.startswith("I;16"):
        return image
    values = np.asarray(image, dtype=np.float64)
    finite = values[np.isfinite(values)]
    low, high = _value_range(image, finite, stated)
    scaled = (values - low) / (high - low) if high > low else np.zeros_like(values)
    scaled = np.nan_to_num(scaled, nan=0.0).clip(0.0, 1.0)
    return Image.fromarray(np.round(scaled * 255).astype(np.uint8), mode="L")


def load_rgb(path: str | Path) -> Image.Image:
    """Open an image as RGB, upright as its EXIF orientation says (as a photo viewer shows
    it), 16-bit and float ones scaled to 8 bits by their range; or raise an error that
    names the file and what to do. Only regular files are opened (never a FIFO)."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"No image file at {shown(path)}. Check the path.")
    try:
        with Image.open(path) as image:
            return _as_rgb(image)
    except Exception as error:  # Pillow raises OSError, SyntaxError, ValueError, ...
        raise ImageDecodeError(
            f"Cannot decode image {shown(path)}: {_describe(error)}. Delete or replace "
            "this file and try again."
        ) from error


def _as_rgb(image: Image.Image) -> Image.Image:
    """An opened image decoded as :func:`load_rgb` gives it."""
    upright = ImageOps.exif_transpose(image)  # a copy, without the TIFF tags
    return _to_8_bits(upright, _stated_maximum(image)).convert("RGB")


def _describe(error: Exception) -> str:
    if isinstance(error, Image.DecompressionBombError):
        return f"{error} If the image is genuine, shrink it."
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _too_many_pixels(image: Image.Image) -> str | None:
    """Why ``image`` is too large to train on (more pixels than Pillow's
    ``MAX_IMAGE_PIXELS``, where Pillow warns of a decompression bomb), or None."""
    limit, pixels = Image.MAX_IMAGE_PIXELS, image.width * image.height
    if limit is None or pixels <= limit:
        return None
    return (
        f"{image.width}x{image.height} pixels ({pixels / 1e6:.0f} megapixels, about "
        f"{3 * pixels / 2**20:.0f} MB each time it is decoded), above the "
        f"{limit / 1e6:.0f}-megapixel limit. Shrink it (e.g. mogrify -resize "
        "4096x4096 FILE, or Pillow's Image.thumbnail): training resizes every image "
        "to the model's input size anyway"
    )


def _image_problem(path: str) -> tuple[str | None, tuple[int, int]]:
    """Why the image at ``path`` cannot be trained on (None when it can), and its width
    and height (0, 0 when it cannot be opened).

    Its size is checked from the header (:func:`_too_many_pixels`), then it is decoded
    in full, as training decodes it: Pillow's ``verify()`` (for PNG, every chunk's
    checksum), then :func:`load_rgb`'s decoding, which reads every byte of any format (a
    truncated BMP, TIFF, GIF or PPM passes ``verify()``); a JPEG is decoded at 1/8
    scale, which still reads all of its data.
    """
    size = (0, 0)
    try:
        with warnings.catch_warnings():  # a too large image is refused, not warned of
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(path) as image:
                size = image.size
                if (too_large := _too_many_pixels(image)) is not None:
                    return too_large, size
                if image.format == "JPEG":
                    image.draft(image.mode, (1, 1))
                    image.load()
                    return None, size
                image.verify()
            with Image.open(path) as image:  # verify() leaves an image unusable
                _as_rgb(image)
    except Exception as error:
        return _describe(error), size
    return None, size


def _warn_if_large(sizes: dict[str, tuple[int, int]]) -> None:
    """Warn when the largest of ``sizes`` (path -> width, height) has more than
    :data:`LARGE_IMAGE_PIXELS`: each epoch decodes it at full size again."""
    pixels = {path: width * height for path, (width, height) in sizes.items()}
    largest = max(pixels, key=pixels.get, default=None)
    if largest is None or pixels[largest] <= LARGE_IMAGE_PIXELS:
        return
    large = sum(count > LARGE_IMAGE_PIXELS for count in pixels.values())
    width, height = sizes[largest]
    warnings.warn(
        f"{large} image(s) have more than {LARGE_IMAGE_PIXELS / 1e6:.0f} megapixels, "
        f"the largest {shown(largest)} ({width}x{height}, about "
        f"{3 * pixels[largest] / 2**20:.0f} MB decoded): every epoch decodes each "
        "image at full size before resizing it, which is slow and takes memory. "
        "Resize them once beforehand (e.g. mogrify -resize 1024x1024 FILE)",
        ImageFolderWarning,
        stacklevel=3,
    )


def verify_images(paths: Iterable[str | Path]) -> None:
    """Decode every image in ``paths`` once; raise :class:`ImageDecodeError` listing all
    the files that cannot be trained on (corrupt, truncated, not an image, or of too
    many pixels: :func:`_image_problem`), or warn (:class:`ImageFolderWarning`) naming
    the largest image when it has more than :data:`LARGE_IMAGE_PIXELS`.

    About a millisecond per small image: run it before training, so a bad file is found
    before the first epoch rather than after hours of it.
    """
    checked = {
        path: _image_problem(path)
        for path in dict.fromkeys(map(str, paths))  # each file once, in order
    }
    bad = [
        f"{shown(path)}: {problem}"
        for path, (problem, _) in checked.items()
        if problem is not None
    ]
    if bad:
        raise ImageDecodeError(
            f"Cannot decode images: {len(bad)} file(s) are corrupt, truncated, too large "
            "or not images:\n  "
            + "\n  ".join(bad)
            + "\nDelete or replace them and try again."
        )
    _warn_if_large({path: size for path, (_, size) in checked.items()})


def check_image_folder(folder: str | Path) -> list[str]:
    """Check that ``folder`` exists and holds one subfolder per class; return the class names."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(
            f"Data folder {folder} does not exist. Download the data first (for example with "
            "vitbook.data.datasets.get_food_data()) or check the path."
        )
    classes = sorted(
        p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")
    )
    if not classes:
        raise ValueError(
            f"Data folder {folder} has no class subfolders. Expected the ImageFolder layout "
            f"{folder}/<class_name>/<image>.jpg, one subfolder per class."
        )
    return classes


def is_hidden(path: str | Path, root: str | Path) -> bool:
    """Whether any part of ``path`` below ``root`` starts with a dot (``.ipynb_checkpoints``)."""
    return any(part.startswith(".") for part in Path(path).relative_to(root).parts)


def _unlisted(error: OSError) -> None:
    """Refuse a folder :func:`os.walk` cannot list (which it would skip in silence)."""
    raise ValueError(
        f"{shown(error.filename)} cannot be read ({error.strerror or error}), so its "
        "images cannot be listed. Give it read permission (chmod u+rx), or move it out "
        "of the data folder."
    )


def _walk_once(
    folder: str, seen: dict[tuple[int, int], str]
) -> Iterable[tuple[str, list[str]]]:
    """``(folder, files)`` below ``folder``, following links to folders but not hidden
    folders; a folder already in ``seen`` (a link loop, or two links to one folder) is
    refused, since its images would be counted again, and so is a folder that cannot be
    listed (no permission), whose images would be missed."""
    for dirpath, dirnames, filenames in os.walk(
        folder, onerror=_unlisted, followlinks=True
    ):
        status = os.stat(dirpath)
        key = (status.st_dev, status.st_ino)
        if key in seen:
            raise ValueError(
                f"{shown(dirpath)} leads to a folder already read as "
                f"{shown(seen[key])} (a symbolic link loop, or a second link to the "
                "same folder), so its images would be counted again. Remove the link "
                "or replace it with a copy."
            )
        seen[key] = dirpath
        dirnames[:] = [name for name in dirnames if not name.startswith(".")]
        yield dirpath, filenames


class VisibleImageFolder(datasets.ImageFolder):
    """torchvision's ImageFolder without hidden folders and files, and without loops.

    A ``.ipynb_checkpoints`` folder (Jupyter makes one when a notebook opens an image) or
    macOS's ``._name.jpg`` files would otherwise become a class or a sample, and a hidden
    class folder sorts first, shifting every label against a test folder without it.
    Links to folders are followed, but a folder reached twice (``ln -s . loop``) is refused
    rather than read again and again. ``split`` ("train", "test") names the split in errors.
    """

    def __init__(
        self,
        root: str | Path,
        transform=None,
        loader=load_rgb,
        split: str | None = None,
    ):
        root = str(root)
        self.split = split
        super().__init__(
            root,
            transform=transform,
            loader=loader,
            is_valid_file=lambda path: (
                datasets.folder.has_file_allowed_extension(
                    path, datasets.folder.IMG_EXTENSIONS
                )
                and not is_hidden(path, root)
            ),
        )

    def find_classes(self, directory: str | Path) -> tuple[list[str], dict[str, int]]:
        classes = check_image_folder(directory)
        return classes, {name: i for i, name in enumerate(classes)}

    def make_dataset(
        self,
        directory: str | Path,
        class_to_idx: dict[str, int],
        extensions: tuple[str, ...] | None = None,
        is_valid_file: Callable[[str], bool] | None = None,
        allow_empty: bool = False,
    ) -> list[tuple[str, int]]:
        """torchvision's samples, in its order, walked by :func:`_walk_once`; an empty
        class folder is reported with its split and path."""
        samples, empty, seen, odd = [], [], {}, []
        for name in sorted(class_to_idx):
            class_dir = os.path.join(directory, name)
            found = [
                path
                for dirpath, filenames in sorted(_walk_once(class_dir, seen))
                for filename in sorted(filenames)
                if is_valid_file(path := os.path.join(dirpath, filename))
            ]
            regular = {path: _is_regular_file(path) for path in found}
            odd += [path for path, ok in regular.items() if not ok]
            found = [path for path, ok in regular.items() if ok]
            if not found:
                empty.append(class_dir)
            samples += [(path, class_to_idx[name]) for path in found]
        if empty and not allow_empty:
            split = f" ({self.split} split)" if self.split else ""
            folders, verb = (
                ("folders", "hold") if len(empty) > 1 else ("folder", "holds")
            )
            raise FileNotFoundError(
                f"Class {folders} {', '.join(map(shown, empty))}{split} {verb} no "
                "images (files ending in "
                f"{', '.join(datasets.folder.IMG_EXTENSIONS)}). Add images, or remove "
                "the class from both train/ and test/."
            )
        if odd:
            warnings.warn(
                _listing(
                    f"Skipped {len(odd)} entries named like images that "
                    "are not regular files (a FIFO, socket, device or broken link)",
                    [shown(path) for path in odd],
                ),
                ImageFolderWarning,
                stacklevel=2,
            )
        _check_one_label_per_file(samples, self.split)
        return samples


def _is_regular_file(path: str) -> bool:
    """Whether ``path`` is, or links to, a regular file: never opens it (a FIFO's
    ``open`` would wait for a writer forever)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:  # a broken link
        return False


def _listing(what: str, lines: list[str], most: int = 10) -> str:
    """``what``, then up to ``most`` of ``lines`` indented, and how many more."""
    more = f"\n  ... and {len(lines) - most} more" if len(lines) > most else ""
    return f"{what}:\n  " + "\n  ".join(lines[:most]) + more


def _file_ids(
    samples: list[tuple[str, int]],
) -> dict[tuple[int, int], list[tuple[str, int]]]:
    """The samples grouped by the file they are (device and inode: a symbolic or hard
    link is the same file as its target)."""
    groups: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for path, label in samples:
        status = os.stat(path)
        groups.setdefault((status.st_dev, status.st_ino), []).append((path, label))
    return groups


def _check_one_label_per_file(
    samples: list[tuple[str, int]], split: str | None
) -> None:
    """Refuse one file under two labels (a link in another class folder); warn about one
    file counted twice under the same label."""
    repeated = [group for group in _file_ids(samples).values() if len(group) > 1]
    clashes = [g for g in repeated if len({label for _, label in g}) > 1]
    where = f" in the {split} split" if split else ""
    if clashes:
        raise ValueError(
            _listing(
                f"{len(clashes)} file(s){where} sit under two classes at once (links to "
                "one file), so their label is ambiguous. Remove the links or copy the "
                "files into one class",
                [" = ".join(shown(path) for path, _ in group) for group in clashes],
            )
        )
    if repeated:
        warnings.warn(
            _listing(
                f"{len(repeated)} file(s){where} are counted more than once (links to "
                "one file in the same class)",
                [" = ".join(shown(path) for path, _ in group) for group in repeated],
            ),
            ImageFolderWarning,
            stacklevel=3,
        )


def _check_test_apart(
    train: list[tuple[str, int]], test: list[tuple[str, int]]
) -> None:
    """Refuse test images that are training images too (the same file, through a link or
    a test folder inside the training folder): the test score would be inflated."""
    train_ids = _file_ids(train)
    shared = [
        f"{shown(path)} = {shown(train_ids[key][0][0])}"
        for key, group in _file_ids(test).items()
        if key in train_ids
        for path, _ in group
    ]
    if shared:
        raise ValueError(
            _listing(
                f"{len(shared)} test image(s) are also training images (the same file), "
                "which would inflate the test score. Keep the test images apart",
                shared,
            )
        )


def image_splits(
    train_dir: str | Path,
    test_dir: str | Path,
    transform: Callable | None = None,
    test_transform: Callable | None = None,
    *,
    check_images: bool = True,
) -> tuple[VisibleImageFolder, VisibleImageFolder]:
    """The train and test :class:`VisibleImageFolder` datasets, checked before any training.

    Both folders must hold the same class subfolders, at least two, none of them empty; no
    file may be under two classes or in both splits (links count as the same file);
    with ``check_images`` every image of both splits is opened once (:func:`verify_images`).
    Raises FileNotFoundError, ValueError or :class:`ImageDecodeError` naming the folder or
    the files and what to do.
    """
    train_classes = check_image_folder(train_dir)
    test_classes = check_image_folder(test_dir)
    if train_classes != test_classes:
        raise ValueError(
            f"Train classes {train_classes} and test classes {test_classes} differ; "
            "both folders need the same class subfolders."
        )
    if len(train_classes) == 1:
        raise ValueError(
            f"{train_dir} and {test_dir} hold a single class, {train_classes[0]!r}: a "
            "classifier needs at least two classes (one subfolder of images per class)."
        )
    train_data = VisibleImageFolder(train_dir, transform=transform, split="train")
    test_data = VisibleImageFolder(
        test_dir, transform=test_transform or transform, split="test"
    )
    _check_test_apart(train_data.samples, test_data.samples)
    if check_images:
        verify_images(path for path, _ in train_data.samples + test_data.samples)
    return train_data, test_data
