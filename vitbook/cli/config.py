"""A run's :class:`RunConfig`: every option checked and complete, all that the steps below
the command line receive (they never see the parsed options)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from vitbook.cli.errors import UsageError
from vitbook.cli.resume import Resumed
from vitbook.training import cct_recipes

__all__ = [
    "DRY_RUN_STEPS",
    "PER_PROCESS",
    "RunConfig",
    "data_label",
    "flag",
    "flags",
    "gpu_augment_applies",
]

# Training and test batches per epoch with --dry-run (as in the book's dry run).
DRY_RUN_STEPS = 2
# Options each torchrun process may set for itself: where things are on its machine, its
# own resources, what rank 0 alone does. Every other option must be alike on all ranks.
PER_PROCESS = (
    "data_dir",
    "output_dir",
    "resume",
    "num_workers",
    "dist_timeout",
    "offline",
    "data_root",
    "mlflow",
)


def flag(field: str) -> str:
    """The command-line option of a :class:`RunConfig` field: ``batch_size`` ->
    ``--batch-size``."""
    return "--" + field.replace("_", "-")


def flags(fields: Sequence[str]) -> str:
    """The options of ``fields`` in a sentence: "--a, --b and --c"."""
    named = [flag(field) for field in fields]
    return f"{', '.join(named[:-1])} and {named[-1]}" if len(named) > 1 else named[0]


def data_label(data_dir: Path | None, dataset: str | None) -> str:
    """The data in a sentence: the dataset's name, or "the images in PATH"."""
    return f"the images in {data_dir}" if data_dir else dataset


def gpu_augment_applies(dataset: str | None, gpu_augment: str, recipe) -> bool:
    """Whether ``--gpu-augment`` can apply: only a recipe on cifar10 has per-image
    augmentations to move; "on" without one is refused."""
    applies = recipe is not None and dataset == "cifar10"
    if gpu_augment == "on" and not applies:
        raise UsageError(
            "--gpu-augment on needs --recipe cct or cct200 with --dataset cifar10"
        )
    return applies


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """One run's options, checked and complete (a recipe's defaults filled in, a resumed
    run's own options restored): all that the steps below the command line receive."""

    model: str
    dataset: str | None  # None with data_dir
    data_dir: Path | None
    recipe: str
    epochs: int
    batch_size: int
    lr: float
    weight_decay: float
    warmup_epochs: float
    label_smoothing: float
    max_grad_norm: float | None
    img_size: int | None
    max_steps: int | None
    dry_run: bool  # every epoch capped at DRY_RUN_STEPS training and test batches
    amp: bool
    gpu_augment: str
    compile: bool
    time_budget: float | None  # minutes
    num_workers: int | None
    seed: int
    no_fallback: bool
    offline: bool  # never touch the network
    data_root: Path | None  # where datasets land; None: the library's default
    output_dir: Path
    resume: Path | None
    dist_timeout: float  # seconds
    mlflow: bool
    cct: cct_recipes.CCTRecipe | None  # the --recipe, explicit options applied
    options: dict  # the options as given, for results.json
    inputs: tuple[tuple[int, int], ...]  # (image size, channels) the data can take
    num_classes: int
    resumed: Resumed | None

    @property
    def data_label(self) -> str:
        """The data in a sentence: the dataset's name, or "the images in PATH"."""
        return data_label(self.data_dir, self.dataset)

    def _options(self) -> dict:
        """The options' values (the fields up to ``mlflow``, the rest derived)."""
        names = [f.name for f in dataclasses.fields(self)]
        return {k: getattr(self, k) for k in names[: names.index("mlflow") + 1]}

    def params(self) -> dict:
        """The options that are set, as MLflow parameters."""
        return {k: v for k, v in self._options().items() if v is not None}

    def shared(self) -> dict:
        """The options every torchrun process must be given alike (all but
        :data:`PER_PROCESS`)."""
        return {k: v for k, v in self._options().items() if k not in PER_PROCESS}

    def augments_on(self, device_type: str) -> bool:
        """Whether the recipe's augmentation runs batched on the training device."""
        wanted = self.gpu_augment == "on" or (
            self.gpu_augment == "auto" and device_type == "cuda"
        )
        return wanted and gpu_augment_applies(self.dataset, self.gpu_augment, self.cct)
