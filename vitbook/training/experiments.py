"""Small experiments done honestly: subsets of in-memory data, several seeds, mean and spread.

The chapters compare models and recipes. One run proves little; these helpers make it cheap to
repeat a run over seeds and report ``mean ± std``::

    runs = over_seeds(lambda seed: fit(seed), seeds=(0, 1, 2))
    mean, std = summarize([r["test_acc"][-1] for r in runs])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from going_modular.data.checks import check_sizes
from going_modular.data.loaders import train_test_loaders
from going_modular.utils import set_seeds

__all__ = [
    "balanced_subset",
    "format_mean_std",
    "over_seeds",
    "step_loader",
    "summarize",
    "tensor_loaders",
]

R = TypeVar("R")


def balanced_subset(
    labels: torch.Tensor,
    per_class: int,
    seed: int = 0,
    classes: Sequence[int] | None = None,
) -> torch.Tensor:
    """Indices of ``per_class`` examples of each class (all classes, or ``classes``), shuffled.

    Raises ValueError, before any work, when a class has fewer examples than asked for.
    """
    generator = torch.Generator().manual_seed(seed)
    chosen = []
    for c in classes if classes is not None else labels.unique().tolist():
        members = (labels == c).nonzero().flatten()
        if len(members) < per_class:
            raise ValueError(
                f"class {c} has {len(members)} examples; cannot take {per_class} per class."
            )
        chosen.append(
            members[torch.randperm(len(members), generator=generator)[:per_class]]
        )
    indices = torch.cat(chosen)
    return indices[torch.randperm(len(indices), generator=generator)]


def tensor_loaders(
    train: tuple[torch.Tensor, torch.Tensor],
    test: tuple[torch.Tensor, torch.Tensor],
    batch_size: int,
    seed: int = 0,
    test_batch_size: int = 1024,
) -> tuple[DataLoader, DataLoader]:
    """DataLoaders over in-memory ``(images, labels)`` pairs; the training order follows ``seed``
    (:func:`~going_modular.data.loaders.train_test_loaders` over two TensorDatasets)."""
    return train_test_loaders(
        TensorDataset(*train),
        TensorDataset(*test),
        batch_size,
        seed=seed,
        test_batch_size=test_batch_size,
    )


def over_seeds(run: Callable[[int], R], seeds: Iterable[int] = (0, 1, 2)) -> list[R]:
    """Call ``run(seed)`` for each seed, after seeding Python, NumPy and torch with it."""
    results = []
    for seed in seeds:
        set_seeds(seed)
        results.append(run(seed))
    return results


def summarize(values: Iterable[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    array = np.asarray(list(values), dtype=float)
    if array.size == 0:
        raise ValueError("summarize() needs at least one value.")
    return float(array.mean()), float(array.std(ddof=1)) if array.size > 1 else 0.0


def format_mean_std(
    values: Iterable[float], scale: float = 100.0, digits: int = 1
) -> str:
    """``"87.3 ± 0.4"``: mean ± std of ``values`` times ``scale`` (percent by default)."""
    mean, std = summarize(values)
    return f"{mean * scale:.{digits}f} ± {std * scale:.{digits}f}"


def step_loader(
    train: tuple[torch.Tensor, torch.Tensor],
    batch_size: int,
    steps: int,
    seed: int = 0,
) -> DataLoader:
    """A loader of exactly ``steps`` full batches, reshuffling at every pass over the data.

    For budgets counted in optimizer steps: a small training set is cycled through as often
    as needed, a large one is only partly seen. Iterating the loader again continues with
    fresh shuffles (the generator is not reset).
    """
    check_sizes(steps=steps, batch_size=batch_size)
    dataset = TensorDataset(*train)
    sampler = torch.utils.data.RandomSampler(
        dataset,
        num_samples=steps * batch_size,
        generator=torch.Generator().manual_seed(seed),
    )
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
