"""The CIFAR training recipes of Compact Transformers: their hyper-parameters.

Hassani et al., "Escaping the Big Data Paradigm with Compact Transformers" (2021), train
their small transformers from scratch on CIFAR with strong regularisation rather than more
data. The reference code (SHI-Labs/Compact-Transformers) has two recipes:
:data:`CCT_CIFAR_200` and :data:`CCT_CIFAR_300`, each a :class:`CCTRecipe` holding its
hyper-parameters and their source. A recipe gives its per-image transforms (built in
:mod:`going_modular.data.augment`) and, through :meth:`CCTRecipe.training_recipe`, the optimiser,
the reference's learning-rate schedule, the losses and the batch transform that
:func:`vitbook.training.loop.fit` trains with.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torchvision.transforms import v2

from going_modular.data.augment import (
    CIFAR10_MEAN,
    CIFAR10_STD,
    MixUpCutMix,
    cifar_test_transform,
    cifar_train_transform,
)
from going_modular.data.checks import check_range, check_sizes
from vitbook.training.recipe import Recipe

__all__ = [
    "CCT_CIFAR_200",
    "CCT_CIFAR_300",
    "RECIPES",
    "WARMUPS",
    "CCTRecipe",
]

WARMUPS = ("linear", "harmonic")


@dataclass(frozen=True)
class CCTRecipe:
    """Hyper-parameters of a CCT training recipe; see :data:`CCT_CIFAR_200`, :data:`CCT_CIFAR_300`.

    ``epochs`` counts every training epoch, including ``warmup_epochs`` at the start and
    ``cooldown_epochs`` at ``min_lr`` at the end. ``warmup`` is the warmup's shape:
    ``"linear"`` (timm: from ``warmup_lr`` up to ``lr``) or ``"harmonic"`` (``examples/
    main.py``: ``lr / (warmup_epochs - e)`` in epoch ``e``). Both references change the learning
    rate once per epoch. ``exempt_1d_params`` keeps biases and norm scales out of weight decay.
    ``mix_off_epoch`` is the epoch after which MixUp/CutMix stop.
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
    warmup: str = "linear"
    warmup_lr: float = 0.0

    def __post_init__(self) -> None:
        """Refuse values that make no sense, naming the field."""
        if self.warmup not in WARMUPS:
            raise ValueError(
                f"Unknown warmup {self.warmup!r}; choose one of {WARMUPS}."
            )
        check_sizes(epochs=self.epochs, batch_size=self.batch_size)
        check_range("lr", self.lr, 0, math.inf, low_open=True)
        check_range("weight_decay", self.weight_decay, 0, math.inf)
        check_range("warmup_lr", self.warmup_lr, 0, self.lr)
        check_range("min_lr", self.min_lr, 0, self.lr)
        check_range("warmup_epochs", self.warmup_epochs, 0, self.epochs)
        check_range("cooldown_epochs", self.cooldown_epochs, 0, self.epochs)
        if self.warmup_epochs + self.cooldown_epochs > self.epochs:
            raise ValueError(
                f"warmup_epochs ({self.warmup_epochs:g}) + cooldown_epochs "
                f"({self.cooldown_epochs:g}) exceed epochs ({self.epochs}): shorten them."
            )
        check_range("label_smoothing", self.label_smoothing, 0, 1, high_open=True)
        check_range("random_erasing", self.random_erasing, 0, 1)
        check_range("mixup_alpha", self.mixup_alpha, 0, math.inf)
        check_range("cutmix_alpha", self.cutmix_alpha, 0, math.inf)
        check_range("mix_prob", self.mix_prob, 0, 1)
        check_range("mix_switch_prob", self.mix_switch_prob, 0, 1)
        if self.mix_off_epoch is not None:
            check_range("mix_off_epoch", self.mix_off_epoch, 0, self.epochs)

    @property
    def mixes(self) -> bool:
        """True when the recipe mixes images (MixUp or CutMix)."""
        return self.mixup_alpha > 0 or self.cutmix_alpha > 0

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

    def lr_factor(self, epoch: int) -> float:
        """The learning rate of the recipe's epoch ``epoch`` (0-based), as a fraction of ``lr``.

        ``"harmonic"``: ``1 / (W - e)`` during warmup, then a cosine from ``lr`` to ``min_lr``
        over the remaining epochs (``examples/main.py``). ``"linear"``: ``warmup_lr`` rising
        linearly during warmup, then timm's cosine counted from epoch 0 over the epochs before
        the cooldown, then ``min_lr`` (timm's ``CosineLRScheduler`` with ``warmup_t``).
        A fractional warmup ``W`` ends in a partial epoch: the harmonic ``1 / (W - e)`` is
        capped at 1 there, so no epoch ever exceeds ``lr``.
        """
        lo = self.min_lr / self.lr
        warm, cosine_end = self.warmup_epochs, self.epochs - self.cooldown_epochs
        if self.warmup == "harmonic":
            if epoch < warm:
                return min(1.0, 1.0 / (warm - epoch))
            progress = (epoch - warm) / max(1.0, cosine_end - warm)
        else:
            if epoch < warm:
                start = self.warmup_lr / self.lr
                return start + epoch * (1.0 - start) / warm
            if epoch >= cosine_end:
                return lo
            progress = epoch / cosine_end
        return lo + (1.0 - lo) * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))

    def schedule(
        self, optimizer: torch.optim.Optimizer, total_steps: int
    ) -> torch.optim.lr_scheduler.LambdaLR:
        """The recipe's schedule for a run of ``total_steps`` steps, stepped per batch: step
        ``t`` gets the rate of the recipe's epoch ``floor(t E / T)``, so a shorter run gets the
        recipe's schedule compressed in time."""
        per_recipe_epoch = total_steps / self.epochs

        def factor(step: int) -> float:
            return self.lr_factor(min(self.epochs - 1, int(step / per_recipe_epoch)))

        return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)

    def training_recipe(
        self,
        steps_per_epoch: int,
        epochs: int | None = None,
        *,
        num_classes: int | None = None,
    ) -> Recipe:
        """What :func:`vitbook.training.loop.fit` needs for a run of this recipe: AdamW, the
        recipe's :meth:`schedule`, the losses and the batch transform.

        ``epochs`` defaults to the recipe's. A shorter run keeps the recipe's schedule,
        compressed in time, so warmup, cooldown and the MixUp/CutMix cut-off shrink in
        proportion. ``num_classes`` is needed when the recipe mixes. With mixing, label
        smoothing is applied to the mixed targets (timm's way) and the training loss is a
        plain cross-entropy on soft targets; otherwise the loss smooths.
        """
        epochs = self.epochs if epochs is None else epochs
        if epochs <= 0 or steps_per_epoch <= 0:
            raise ValueError(
                f"Need positive epochs and steps_per_epoch, got {epochs}, {steps_per_epoch}."
            )
        if self.mixes and num_classes is None:
            raise ValueError(
                f"Recipe {self.name!r} mixes images: pass num_classes to training_recipe()."
            )
        per_recipe_epoch = epochs * steps_per_epoch / self.epochs
        batch_transform = None
        if self.mixes:
            stop = None
            if self.mix_off_epoch is not None:
                stop = round(self.mix_off_epoch * per_recipe_epoch)
            batch_transform = MixUpCutMix(
                num_classes,
                self.mixup_alpha,
                self.cutmix_alpha,
                self.mix_prob,
                self.mix_switch_prob,
                stop_after_steps=stop,
                label_smoothing=self.label_smoothing,
            )
        return Recipe(
            lr=self.lr,
            weight_decay=self.weight_decay,
            exempt_1d_params=self.exempt_1d_params,
            schedule=self.schedule,
            label_smoothing=0.0 if self.mixes else self.label_smoothing,
            batch_transform=batch_transform,
            epochs=epochs,
        )


_REPO = "SHI-Labs/Compact-Transformers"

#: The recipe behind the reference README's 200-epoch CIFAR table (CCT-7/3x1 94.78%,
#: CCT-2/3x2 89.17% on CIFAR-10): the repository's ``examples/main.py`` defaults. That script
#: decays every parameter (no exemption), warms up for 5 epochs at lr/5, lr/4, ..., lr/1, then
#: follows a per-epoch cosine to 0; its transform is AutoAugment's CIFAR-10 policy, then a
#: padded random crop and a flip; label smoothing 0.1, no MixUp/CutMix, no random erasing.
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
    warmup="harmonic",
)

#: The authors' later CIFAR-10 config for timm's training script (``configs/datasets/
#: cifar10.yml``): 300 cosine epochs + 10 cooldown, AdamW lr 5.5e-4 (warmup from 1e-5 over 10
#: epochs), weight decay 6e-2 with biases and norms exempt (timm's default), RandAugment
#: ``rand-m9-mstd0.5-inc1``, a random 80-100% resized crop with random interpolation, MixUp 0.8
#: / CutMix 1.0 (one or the other per batch) until epoch 175, random erasing 0.25 ("pixel"),
#: label smoothing 0.1, batch 128; all from timm.
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
    warmup="linear",
    warmup_lr=1e-5,
)

#: The presets by the name the CLI's ``--recipe`` takes.
RECIPES: dict[str, CCTRecipe] = {"cct": CCT_CIFAR_300, "cct200": CCT_CIFAR_200}
