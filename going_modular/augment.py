"""The CIFAR training recipes of Compact Transformers: their data pieces and hyper-parameters.

Hassani et al., "Escaping the Big Data Paradigm with Compact Transformers" (2021), train their
small transformers from scratch on CIFAR with strong regularisation rather than more data. The
reference code (SHI-Labs/Compact-Transformers) has two recipes, and this module rebuilds each
from the same library pieces the reference used:

* :func:`cifar_train_transform` / :func:`cifar_test_transform`: per-image transforms. The
  300-epoch recipe is timm's: ``RandomResizedCropAndInterpolation``, a flip, timm's RandAugment
  (:data:`RAND_AUGMENT`) and timm's ``RandomErasing``. The 200-epoch recipe is the reference
  ``examples/main.py``'s: AutoAugment's CIFAR-10 policy first, then a padded crop and a flip.
* :func:`mixup_cutmix`: timm's ``Mixup`` (MixUp or CutMix per batch, label smoothing folded
  into the soft targets) as a batch transform for :func:`going_modular.engine.train`;
* :class:`CCTRecipe`: the hyper-parameters, the two presets, and :meth:`CCTRecipe.build`, which
  makes the optimizer, the reference's learning-rate schedule, the losses and the batch
  transform for a model.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Any

import torch
from PIL import Image, ImageOps
from timm.data import Mixup, RandomResizedCropAndInterpolation, rand_augment_transform
from timm.data.random_erasing import RandomErasing
from torch import nn
from torch.utils.data import Dataset
from torchvision.transforms import v2

from .optim import param_groups_weight_decay

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
#: timm's RandAugment string of the reference config: 2 ops at magnitude 9 of 10, the
#: magnitude drawn from a normal with std 0.5 each time, "increasing" variants of the ops.
RAND_AUGMENT = "rand-m9-mstd0.5-inc1"
POLICIES = ("autoaugment", "randaugment", None)
CROPS = ("pad", "resized", None)
WARMUPS = ("linear", "harmonic")


def _posterize(img: Image.Image, bits_to_keep: int, **_: Any) -> Image.Image:
    """timm's posterize, keeping its behaviour at 0 bits (a black image) under Pillow >= 13.

    At magnitude 10 (reached when m9's magnitude noise is drawn above 1), timm's increasing
    posterize keeps 0 bits; Pillow 13 refuses ``ImageOps.posterize(img, 0)``, older Pillow
    returned black, which this reproduces.
    """
    if bits_to_keep >= 8:
        return img
    if bits_to_keep <= 0:
        return img.point([0] * 256 * len(img.getbands()))
    return ImageOps.posterize(img, bits_to_keep)


def _policy(policy: str | None, img_size: int, mean: Sequence[float]) -> list[Any]:
    if policy == "autoaugment":
        # The reference's CIFAR10Policy fills uncovered pixels with grey 128.
        return [v2.AutoAugment(v2.AutoAugmentPolicy.CIFAR10, fill=128)]
    if policy == "randaugment":
        # The hyper-parameters timm's create_transform passes for this image size and mean.
        hparams = {
            "translate_const": int(img_size * 0.45),
            "img_mean": tuple(min(255, round(255 * m)) for m in mean),
        }
        rand_augment = rand_augment_transform(RAND_AUGMENT, hparams)
        for op in rand_augment.ops:
            if op.name.startswith("Posterize"):
                op.aug_fn = _posterize
        return [rand_augment]
    if policy is None:
        return []
    raise ValueError(f"Unknown policy {policy!r}; choose one of {POLICIES}.")


def _crop(crop: str | None, img_size: int) -> list[Any]:
    if crop == "pad":
        return [v2.RandomCrop(img_size, padding=4)]
    if crop == "resized":
        # timm's crop with the config's scale and "random" (bilinear or bicubic) resampling.
        return [
            RandomResizedCropAndInterpolation(
                img_size, scale=(0.8, 1.0), interpolation="random"
            )
        ]
    if crop is None:
        return []
    raise ValueError(f"Unknown crop {crop!r}; choose one of {CROPS}.")


def _check_range(
    name: str,
    value: float,
    low: float,
    high: float,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    """Raise ValueError naming ``name`` unless ``value`` is a number in the interval."""
    ok = (
        not isinstance(value, bool)
        and isinstance(value, Real)
        and math.isfinite(value)
        and (low < value if low_open else low <= value)
        and (value < high if high_open else value <= high)
    )
    if not ok:
        interval = (
            f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        )
        raise ValueError(
            f"{name} must be a finite number in {interval}, got {value!r}."
        )


def _to_normalised_tensor(
    mean: Sequence[float], std: Sequence[float]
) -> list[v2.Transform]:
    return [
        v2.ToImage(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(mean, std),
        v2.ToPureTensor(),
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
    """Training transform: a PIL image (or uint8 tensor) -> a normalised float tensor.

    The order follows the reference script that uses each policy:

    * ``policy="autoaugment"`` (``examples/main.py``, the 200-epoch recipe): AutoAugment's
      CIFAR-10 policy (grey fill), then the crop, then the flip;
    * ``policy="randaugment"`` or None (timm's training transform, the 300-epoch recipe): the
      crop, the flip, then timm's RandAugment :data:`RAND_AUGMENT`.

    ``crop`` is ``"pad"`` (a random ``img_size`` crop of the image padded by 4), ``"resized"``
    (timm's random 80-100% area crop resized back) or None; ``hflip`` flips half the images.
    Then float conversion, normalisation with ``mean``/``std`` (one value per channel, so grey
    images work too) and timm's random erasing with probability ``random_erasing`` (one
    rectangle filled with Gaussian noise, mode "pixel"; 0 turns it off).
    """
    geometric = _crop(crop, img_size) + ([v2.RandomHorizontalFlip()] if hflip else [])
    photometric = _policy(policy, img_size, mean)
    if policy == "autoaugment":
        steps = [v2.ToPILImage(), *photometric, *geometric]
    else:
        steps = [v2.ToPILImage(), *geometric, *photometric]
    steps += _to_normalised_tensor(mean, std)
    if random_erasing > 0:
        steps.append(RandomErasing(random_erasing, mode="pixel", device="cpu"))
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


def random_flip_batch(
    X: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Flip a random half of a batch left-right: the cheapest augmentation, for in-memory
    tensors (a ``batch_transform`` for :func:`going_modular.engine.train`)."""
    flip = torch.rand(len(X), device=X.device) < 0.5
    return torch.where(flip[:, None, None, None], X.flip(-1), X), y


class MixUpCutMix:
    """Batch transform ``(X, y) -> (X_mixed, soft_targets)`` for the engine's ``batch_transform``.

    A thin wrapper around timm's ``Mixup`` (mode "batch": one mixing coefficient per batch, each
    image mixed with the batch reversed). Each call mixes with probability ``prob``: CutMix with
    probability ``switch_prob``, MixUp otherwise (only one of them if the other's alpha is 0).
    Targets are always float (B, num_classes) with ``label_smoothing`` already applied, so train
    with a plain ``nn.CrossEntropyLoss()``. After ``stop_after_steps`` calls mixing stops for
    good and the targets stay smoothed one-hot vectors, as in timm's ``mixup_off_epoch``.
    Batches must have an even size (timm's rule): use ``drop_last=True`` or an even batch size.
    """

    def __init__(
        self,
        num_classes: int,
        mixup_alpha: float = 0.8,
        cutmix_alpha: float = 1.0,
        prob: float = 1.0,
        switch_prob: float = 0.5,
        stop_after_steps: int | None = None,
        label_smoothing: float = 0.0,
    ):
        if mixup_alpha <= 0 and cutmix_alpha <= 0:
            raise ValueError(
                "Need mixup_alpha > 0 or cutmix_alpha > 0 (or no batch transform)."
            )
        if not 0.0 <= prob <= 1.0 or not 0.0 <= switch_prob <= 1.0:
            raise ValueError(
                f"prob and switch_prob must be in [0, 1], got {prob}, {switch_prob}."
            )
        self.num_classes, self.prob = num_classes, prob
        self.stop_after_steps = stop_after_steps
        self.mix = Mixup(
            mixup_alpha=mixup_alpha,
            cutmix_alpha=cutmix_alpha,
            prob=prob,
            switch_prob=switch_prob,
            mode="batch",
            label_smoothing=label_smoothing,
            num_classes=num_classes,
        )
        self.steps = 0

    def __call__(
        self, X: torch.Tensor, y: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if len(X) % 2:
            raise ValueError(
                f"MixUp/CutMix needs an even batch size, got {len(X)}: use an even "
                "batch_size and drop_last=True in the DataLoader."
            )
        self.steps += 1
        if self.stop_after_steps is not None and self.steps > self.stop_after_steps:
            self.mix.mixup_enabled = False
        X, targets = self.mix(X.clone(), y)
        return X, targets.to(X.dtype)

    def __repr__(self) -> str:
        m = self.mix
        return (
            f"MixUpCutMix(timm Mixup: mixup {m.mixup_alpha}, cutmix {m.cutmix_alpha}, "
            f"prob {m.mix_prob}, switch {m.switch_prob}, smoothing {m.label_smoothing}, "
            f"stop_after_steps={self.stop_after_steps})"
        )


def mixup_cutmix(
    num_classes: int,
    mixup_alpha: float = 0.8,
    cutmix_alpha: float = 1.0,
    prob: float = 1.0,
    switch_prob: float = 0.5,
    stop_after_steps: int | None = None,
    label_smoothing: float = 0.0,
) -> MixUpCutMix:
    """MixUp (alpha 0.8) or CutMix (alpha 1.0), half the batches each, as the reference config."""
    return MixUpCutMix(
        num_classes,
        mixup_alpha,
        cutmix_alpha,
        prob,
        switch_prob,
        stop_after_steps,
        label_smoothing,
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
        for name in ("epochs", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}.")
        _check_range("lr", self.lr, 0, math.inf, low_open=True)
        _check_range("weight_decay", self.weight_decay, 0, math.inf)
        _check_range("warmup_lr", self.warmup_lr, 0, self.lr)
        _check_range("min_lr", self.min_lr, 0, self.lr)
        _check_range("warmup_epochs", self.warmup_epochs, 0, self.epochs)
        _check_range("cooldown_epochs", self.cooldown_epochs, 0, self.epochs)
        if self.warmup_epochs + self.cooldown_epochs > self.epochs:
            raise ValueError(
                f"warmup_epochs ({self.warmup_epochs:g}) + cooldown_epochs "
                f"({self.cooldown_epochs:g}) exceed epochs ({self.epochs}): shorten them."
            )
        _check_range("label_smoothing", self.label_smoothing, 0, 1, high_open=True)
        _check_range("random_erasing", self.random_erasing, 0, 1)
        _check_range("mixup_alpha", self.mixup_alpha, 0, math.inf)
        _check_range("cutmix_alpha", self.cutmix_alpha, 0, math.inf)
        _check_range("mix_prob", self.mix_prob, 0, 1)
        _check_range("mix_switch_prob", self.mix_switch_prob, 0, 1)
        if self.mix_off_epoch is not None:
            _check_range("mix_off_epoch", self.mix_off_epoch, 0, self.epochs)

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

    def build(
        self,
        model: nn.Module,
        steps_per_epoch: int,
        epochs: int | None = None,
        *,
        num_classes: int | None = None,
    ) -> TrainingParts:
        """AdamW, the recipe's schedule (stepped per batch), losses and batch transform.

        ``epochs`` defaults to the recipe's. A shorter run keeps the recipe's schedule, compressed
        in time: step ``t`` of ``T`` gets the rate of the recipe's epoch ``floor(t E / T)``, so
        warmup, cooldown and the MixUp/CutMix cut-off shrink in proportion. ``num_classes`` is
        needed when the recipe mixes. With mixing, label smoothing is applied to the mixed
        targets (timm's way) and ``loss_fn`` is a plain cross-entropy on soft targets;
        otherwise ``loss_fn`` smooths.
        """
        epochs = self.epochs if epochs is None else epochs
        if epochs <= 0 or steps_per_epoch <= 0:
            raise ValueError(
                f"Need positive epochs and steps_per_epoch, got {epochs}, {steps_per_epoch}."
            )
        if self.mixes and num_classes is None:
            raise ValueError(
                f"Recipe {self.name!r} mixes images: pass num_classes to build()."
            )
        total_steps = epochs * steps_per_epoch
        per_recipe_epoch = total_steps / self.epochs  # steps per epoch of the recipe

        def factor(step: int) -> float:
            return self.lr_factor(min(self.epochs - 1, int(step / per_recipe_epoch)))

        params = (
            param_groups_weight_decay(model, self.weight_decay)
            if self.exempt_1d_params
            else [{"params": [p for p in model.parameters() if p.requires_grad]}]
        )
        optimizer = torch.optim.AdamW(
            params, lr=self.lr, weight_decay=self.weight_decay
        )
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        batch_transform = None
        loss_fn = nn.CrossEntropyLoss(label_smoothing=self.label_smoothing)
        if self.mixes:
            stop = None
            if self.mix_off_epoch is not None:
                stop = round(self.mix_off_epoch * per_recipe_epoch)
            batch_transform = mixup_cutmix(
                num_classes,
                self.mixup_alpha,
                self.cutmix_alpha,
                self.mix_prob,
                self.mix_switch_prob,
                stop_after_steps=stop,
                label_smoothing=self.label_smoothing,
            )
            loss_fn = nn.CrossEntropyLoss()
        return TrainingParts(
            optimizer=optimizer,
            scheduler=scheduler,
            loss_fn=loss_fn,
            test_loss_fn=nn.CrossEntropyLoss(),
            batch_transform=batch_transform,
            warmup_steps=min(
                total_steps, math.ceil(self.warmup_epochs * per_recipe_epoch)
            ),
            total_steps=total_steps,
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

RECIPES: dict[str, CCTRecipe] = {"cct": CCT_CIFAR_300, "cct200": CCT_CIFAR_200}
"""The CCT recipe: transforms, MixUp/CutMix, the recipe's optimiser and schedule, the engine's
time budget and the CLI's ``--recipe`` and ``--time-budget``."""
