"""The one DataLoader builder of the package: a shuffled training loader and an ordered
test loader over two datasets (images on disk, tensors in memory, padded texts)."""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
from torch.utils.data import DataLoader, Dataset

from going_modular.data.checks import check_sizes

__all__ = ["default_num_workers", "train_test_loaders"]


def default_num_workers() -> int:
    """Worker processes for loading: all cores with a GPU to feed, none on a CPU-only machine."""
    return (os.cpu_count() or 0) if torch.cuda.is_available() else 0


def train_test_loaders(
    train_data: Dataset,
    test_data: Dataset,
    batch_size: int,
    *,
    num_workers: int = 0,
    seed: int | None = None,
    collate_fn: Callable | None = None,
    test_batch_size: int | None = None,
) -> tuple[DataLoader, DataLoader]:
    """A shuffled training DataLoader and an ordered test DataLoader over two datasets.

    Both pin memory when there is a GPU to copy to. Both start their workers afresh every
    epoch, so each pass draws its workers' seeds anew, from the training loader's generator
    (whose state a checkpoint saves) and from torch's global generator for the test loader,
    one number per pass whether or not there are workers: a resumed run draws the same ones
    and continues exactly. The training order follows ``seed`` (torch's global generator when
    None).
    ``collate_fn`` makes batches of unequal items (e.g. padded texts); ``test_batch_size``
    defaults to ``batch_size``.
    """
    check_sizes(batch_size=batch_size)
    check_sizes(minimum=0, num_workers=num_workers)
    if test_batch_size is not None:
        check_sizes(test_batch_size=test_batch_size)
    options = {
        "num_workers": num_workers,
        "pin_memory": torch.cuda.is_available(),
        "collate_fn": collate_fn,
    }
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    return (
        DataLoader(
            train_data, batch_size, shuffle=True, generator=generator, **options
        ),
        DataLoader(test_data, test_batch_size or batch_size, shuffle=False, **options),
    )
