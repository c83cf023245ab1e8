"""The CIFAR training recipe of Compact Transformers: its data pieces and its hyper-parameters.

Hassani et al., "Escaping the Big Data Paradigm with Compact Transformers" (2021), train their
small transformers from scratch on CIFAR with strong regularisation rather than more data. This
module holds the pieces, built from torchvision's transforms v2:

* :func:`cifar_train_transform` / :func:`cifar_test_transform`: crop, flip, AutoAugment or
  RandAugment, normalisation and random erasing for 32x32 images (the test side only normalises);
* :func:`mixup_cutmix`: a batch transform for :func:`going_modular.engine.train` that mixes pairs
  of images (MixUp or CutMix) and returns soft targets;
* :class:`CCTRecipe`: the hyper-parameters, with two presets taken from the authors' repository
  (SHI-Labs/Compact-Transformers) and :meth:`CCTRecipe.build`, which makes the optimizer, the
  schedule, the losses and the batch transform for a model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset
from torchvision.transforms import InterpolationMode, v2

from .optim import param_groups_weight_decay, warmup_cosine_schedule

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
POLICIES = ("autoaugment", "randaugment", None)
CROPS = ("pad", "resized", None)


def _policy(policy: str | None) -> list[v2.Transform]:
    if policy == "autoaugment":
        return [v2.AutoAugment(v2.AutoAugmentPolicy.CIFAR10)]
    if policy == "randaugment":
        return [v2.RandAugment(num_ops=2, magnitude=9)]
    if policy is None:
        return []
    raise ValueError(f"Unknown policy {policy!r}; choose one of {POLICIES}.")


def _crop(crop: str | None, img_size: int) -> list[v2.Transform]:
    if crop == "pad":
        return [v2.RandomCrop(img_size, padding=4)]
    if crop == "resized":
        return [
            v2.RandomResizedCrop(
                img_size,
                scale=(0.8, 1.0),
                interpolation=InterpolationMode.BICUBIC,
                antialias=True,
            )
        ]
    if crop is None:
        return []
    raise ValueError(f"Unknown crop {crop!r}; choose one of {CROPS}.")


def _to_normalised_tensor(
    mean: Sequence[float], std: Sequence[float]
) -> list[v2.Transform]:
    return [
        v2.ToImage(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(mean, std),
    ]


def cifar_train_transform(
    img_size: int = 32,
    policy: str | None = "autoaugment",
    random_erasing: float = 0.25,
    mean: Sequence[float] = CIFAR10_MEAN,
    std: Sequence[float] = CIFAR10_STD,
    *,
    crop: str | None = "pad",
    hflip: bool = True,
) -> v2.Compose:
    """Training transform for CIFAR-sized images (PIL or uint8 tensors) -> normalised float tensors.

    Resize to ``img_size``; ``crop`` ``"pad"`` (random 32x32 crop of the image padded by 4, as the
    200-epoch reference script) or ``"resized"`` (a random 80-100% area crop resized back, as the
    timm-based reference configs) or None; a horizontal flip (``hflip``); ``policy``
    ``"autoaugment"`` (AutoAugment's CIFAR-10 policy), ``"randaugment"`` (2 operations at
    magnitude 9) or None; then float conversion, normalisation with ``mean``/``std``, and random
    erasing of one rectangle with probability ``random_erasing`` (filled with Gaussian noise, as
    timm's "pixel" mode; 0 turns it off).
    """
    steps: list[v2.Transform] = [v2.Resize((img_size, img_size), antialias=True)]
    steps += _crop(crop, img_size)
    if hflip:
        steps.append(v2.RandomHorizontalFlip())
    steps += _policy(policy)
    steps += _to_normalised_tensor(mean, std)
    if random_erasing > 0:
        steps.append(v2.RandomErasing(p=random_erasing, value="random"))
    steps.append(v2.ToPureTensor())
    return v2.Compose(steps)


def cifar_test_transform(
    img_size: int = 32,
    mean: Sequence[float] = CIFAR10_MEAN,
    std: Sequence[float] = CIFAR10_STD,
) -> v2.Compose:
    """Test transform: resize to ``img_size``, convert to float and normalise; nothing random."""
    return v2.Compose(
        [
            v2.Resize((img_size, img_size), antialias=True),
            *_to_normalised_tensor(mean, std),
            v2.ToPureTensor(),
        ]
    )


class TransformedDataset(Dataset):
    """A view of ``dataset`` (yielding ``(image, label)``) with its own ``transform``.

    Lets several pipelines share one dataset that was built once, without a transform.
    """

    def __init__(self, dataset: Dataset, transform: Any = None):
        self.dataset, self.transform = dataset, transform
        self.classes = list(getattr(dataset, "classes", []))

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        image, label = self.dataset[index]
        return (self.transform(image) if self.transform else image), label


class MixUpCutMix:
    """Batch transform ``(X, y) -> (X_mixed, soft_targets)`` for the engine's ``batch_transform``.

    Each call mixes the batch with probability ``prob``: CutMix with probability ``switch_prob``
    and MixUp otherwise (only one of them if the other's alpha is 0). Unmixed batches get one-hot
    targets, so targets are always float of shape (B, num_classes). After ``stop_after_steps``
    calls it stops mixing for good (the reference turns MixUp/CutMix off late in training).
    """

    def __init__(
        self,
        num_classes: int,
        mixup_alpha: float = 0.8,
        cutmix_alpha: float = 1.0,
        prob: float = 1.0,
        switch_prob: float = 0.5,
        stop_after_steps: int | None = None,
    ):
        if mixup_alpha <= 0 and cutmix_alpha <= 0:
            raise ValueError(
                "Need mixup_alpha > 0 or cutmix_alpha > 0 (or no batch transform)."
            )
        if not 0.0 <= prob <= 1.0 or not 0.0 <= switch_prob <= 1.0:
            raise ValueError(
                f"prob and switch_prob must be in [0, 1], got {prob}, {switch_prob}."
            )
        self.num_classes, self.prob, self.stop_after_steps = (
            num_classes,
            prob,
            stop_after_steps,
        )
        mixup = (
            v2.MixUp(alpha=mixup_alpha, num_classes=num_classes)
            if mixup_alpha > 0
            else None
        )
        cutmix = (
            v2.CutMix(alpha=cutmix_alpha, num_classes=num_classes)
            if cutmix_alpha > 0
            else None
        )
        if mixup and cutmix:
            self.mix = v2.RandomChoice(
                [cutmix, mixup], p=[switch_prob, 1.0 - switch_prob]
            )
        else:
            self.mix = mixup or cutmix
        self.steps = 0

    def __call__(
        self, X: torch.Tensor, y: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.steps += 1
        stopped = (
            self.stop_after_steps is not None and self.steps > self.stop_after_steps
        )
        if stopped or (self.prob < 1.0 and torch.rand(()).item() >= self.prob):
            return X, nn.functional.one_hot(y, self.num_classes).to(X.dtype)
        return self.mix(X, y)

    def __repr__(self) -> str:
        return f"MixUpCutMix(prob={self.prob}, stop_after_steps={self.stop_after_steps}, {self.mix})"


def mixup_cutmix(
    num_classes: int,
    mixup_alpha: float = 0.8,
    cutmix_alpha: float = 1.0,
    prob: float = 1.0,
    switch_prob: float = 0.5,
    stop_after_steps: int | None = None,
) -> MixUpCutMix:
    """MixUp (alpha 0.8) or CutMix (alpha 1.0), half the batches each, as the reference config."""
    return MixUpCutMix(
        num_classes, mixup_alpha, cutmix_alpha, prob, switch_prob, stop_after_steps
    )


@dataclass
class TrainingParts:
    """What :meth:`CCTRecipe.build` makes for one model and one run length."""

    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    loss_fn: nn.Module
    test_loss_fn: nn.Module
    batch_transform: MixUpCutMix | None
    warmup_steps: int
    total_steps: int


@dataclass(frozen=True)
class CCTRecipe:
    """Hyper-parameters of a CCT training recipe; see :data:`CCT_CIFAR_200`, :data:`CCT_CIFAR_300`.

    ``epochs`` counts every training epoch, including ``warmup_epochs`` at the start and
    ``cooldown_epochs`` at ``min_lr`` at the end. ``exempt_1d_params`` keeps biases and norm
    scales out of weight decay. ``mix_off_epoch`` is the epoch after which MixUp/CutMix stop.
    """

    name: str
    epochs: int
    batch_size: int
    lr: float
    weight_decay: float
    exempt_1d_params: bool
    warmup_epochs: float
    cooldown_epochs: float
    min_lr: float
    label_smoothing: float
    policy: str | None
    crop: str | None
    hflip: bool
    random_erasing: float
    mixup_alpha: float
    cutmix_alpha: float
    mix_prob: float
    mix_switch_prob: float
    mix_off_epoch: float | None
    source: str

    def replace(self, **changes: Any) -> CCTRecipe:
        """A copy with some fields changed, e.g. ``recipe.replace(label_smoothing=0.0)``."""
        return dataclasses.replace(self, **changes)

    def train_transform(
        self,
        img_size: int = 32,
        mean: Sequence[float] = CIFAR10_MEAN,
        std: Sequence[float] = CIFAR10_STD,
    ) -> v2.Compose:
        """This recipe's per-image training transform (see :func:`cifar_train_transform`)."""
        return cifar_train_transform(
            img_size,
            self.policy,
            self.random_erasing,
            mean,
            std,
            crop=self.crop,
            hflip=self.hflip,
        )

    def test_transform(
        self,
        img_size: int = 32,
        mean: Sequence[float] = CIFAR10_MEAN,
        std: Sequence[float] = CIFAR10_STD,
    ) -> v2.Compose:
        """The matching test transform (see :func:`cifar_test_transform`)."""
        return cifar_test_transform(img_size, mean, std)

    def _scale(self, epochs: int) -> float:
        """Shorter runs keep the recipe's proportions: warmup, cooldown and mix-off shrink."""
        return min(1.0, epochs / self.epochs)

    def build(
        self,
        model: nn.Module,
        steps_per_epoch: int,
        epochs: int | None = None,
        *,
        num_classes: int | None = None,
    ) -> TrainingParts:
        """AdamW, warmup + cosine schedule (per step), losses and batch transform for ``model``.

        ``epochs`` defaults to the recipe's; a shorter run shrinks the warmup, the cooldown and
        the MixUp/CutMix cut-off in proportion. ``num_classes`` is needed when the recipe mixes.
        """
        epochs = self.epochs if epochs is None else epochs
        if epochs <= 0 or steps_per_epoch <= 0:
            raise ValueError(
                f"Need positive epochs and steps_per_epoch, got {epochs}, {steps_per_epoch}."
            )
        scale = self._scale(epochs)
        total_steps = epochs * steps_per_epoch
        warmup_steps = min(
            total_steps, round(self.warmup_epochs * scale * steps_per_epoch)
        )
        cooldown_steps = round(self.cooldown_epochs * scale * steps_per_epoch)
        cosine_end = max(warmup_steps + 1, total_steps - cooldown_steps)
        params = (
            param_groups_weight_decay(model, self.weight_decay)
            if self.exempt_1d_params
            else [{"params": [p for p in model.parameters() if p.requires_grad]}]
        )
        optimizer = torch.optim.AdamW(
            params, lr=self.lr, weight_decay=self.weight_decay
        )
        scheduler = warmup_cosine_schedule(
            optimizer, warmup_steps, cosine_end, min_factor=self.min_lr / self.lr
        )
        batch_transform = None
        if self.mixup_alpha > 0 or self.cutmix_alpha > 0:
            if num_classes is None:
                raise ValueError(
                    f"Recipe {self.name!r} mixes images: pass num_classes to build()."
                )
            stop = None
            if self.mix_off_epoch is not None:
                stop = round(self.mix_off_epoch * scale * steps_per_epoch)
            batch_transform = mixup_cutmix(
                num_classes,
                self.mixup_alpha,
                self.cutmix_alpha,
                self.mix_prob,
                self.mix_switch_prob,
                stop_after_steps=stop,
            )
        return TrainingParts(
            optimizer=optimizer,
            scheduler=scheduler,
            loss_fn=nn.CrossEntropyLoss(label_smoothing=self.label_smoothing),
            test_loss_fn=nn.CrossEntropyLoss(),
            batch_transform=batch_transform,
            warmup_steps=warmup_steps,
            total_steps=total_steps,
        )


_REPO = "SHI-Labs/Compact-Transformers"

#: The recipe behind the reference README's 200-epoch CIFAR table (CCT-7/3x1 94.78%,
#: CCT-2/3x2 89.17% on CIFAR-10): the repository's ``examples/main.py`` defaults. That script
#: decays every parameter (no exemption), warms up for 5 epochs and uses AutoAugment's CIFAR-10
#: policy after a padded random crop and a flip, with label smoothing 0.1 and no MixUp/CutMix.
CCT_CIFAR_200 = CCTRecipe(
    name="cct-cifar-200",
    epochs=200,
    batch_size=128,
    lr=5e-4,
    weight_decay=3e-2,
    exempt_1d_params=False,
    warmup_epochs=5,
    cooldown_epochs=0,
    min_lr=0.0,
    label_smoothing=0.1,
    policy="autoaugment",
    crop="pad",
    hflip=True,
    random_erasing=0.0,
    mixup_alpha=0.0,
    cutmix_alpha=0.0,
    mix_prob=0.0,
    mix_switch_prob=0.0,
    mix_off_epoch=None,
    source=f"{_REPO}: examples/main.py defaults (README 200-epoch table)",
)

#: The authors' later CIFAR-10 config for timm's training script (``configs/datasets/
#: cifar10.yml``): 300 cosine epochs + 10 cooldown, AdamW lr 5.5e-4, weight decay 6e-2 with
#: biases and norms exempt (timm's default), RandAugment m9, a random 80-100% resized crop,
#: MixUp 0.8 / CutMix 1.0 (one or the other per batch) until epoch 175, random erasing 0.25,
#: label smoothing 0.1, batch 128. RandAugment is torchvision's (2 ops, magnitude 9), close to
#: timm's ``rand-m9-mstd0.5-inc1`` but not identical.
CCT_CIFAR_300 = CCTRecipe(
    name="cct-cifar-300",
    epochs=310,
    batch_size=128,
    lr=5.5e-4,
    weight_decay=6e-2,
    exempt_1d_params=True,
    warmup_epochs=10,
    cooldown_epochs=10,
    min_lr=1e-5,
    label_smoothing=0.1,
    policy="randaugment",
    crop="resized",
    hflip=True,
    random_erasing=0.25,
    mixup_alpha=0.8,
    cutmix_alpha=1.0,
    mix_prob=1.0,
    mix_switch_prob=0.5,
    mix_off_epoch=175,
    source=f"{_REPO}: configs/datasets/cifar10.yml (timm train.py)",
)

RECIPES: dict[str, CCTRecipe] = {"cct": CCT_CIFAR_300, "cct200": CCT_CIFAR_200}
