"""The CCT recipes' data pieces: per-image CIFAR transforms and MixUp/CutMix.

Hassani et al., "Escaping the Big Data Paradigm with Compact Transformers" (2021), train
their small transformers from scratch on CIFAR with strong regularisation rather than more
data. This module rebuilds the data side of the two recipes of the reference code
(SHI-Labs/Compact-Transformers) from the same library pieces the reference used; their
hyper-parameters are in :mod:`vitbook.training.cct_recipes`.

* :func:`cifar_train_transform` / :func:`cifar_test_transform`: per-image transforms. The
  300-epoch recipe is timm's: ``RandomResizedCropAndInterpolation``, a flip, timm's RandAugment
  (:data:`RAND_AUGMENT`) and timm's ``RandomErasing``. The 200-epoch recipe is the reference
  ``examples/main.py``'s: AutoAugment's CIFAR-10 policy first, then a padded crop and a flip.
* :class:`MixUpCutMix`: timm's ``Mixup`` (MixUp or CutMix per batch, label smoothing folded
  into the soft targets) as the engine's batch transform; :func:`random_flip_batch`, the
  cheapest batch transform;
* :class:`TransformedDataset`: one dataset seen through several transforms.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from PIL import Image, ImageOps
from timm.data import Mixup, RandomResizedCropAndInterpolation, rand_augment_transform
from timm.data.mixup import mixup_target
from timm.data.random_erasing import RandomErasing
from torch.utils.data import Dataset
from torchvision.transforms import v2

from going_modular.data.checks import check_range

__all__ = [
    "CIFAR10_MEAN",
    "CIFAR10_STD",
    "CROPS",
    "POLICIES",
    "RAND_AUGMENT",
    "MixUpCutMix",
    "TransformedDataset",
    "cifar_test_transform",
    "cifar_train_transform",
    "random_flip_batch",
]

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
#: timm's RandAugment string of the reference config: 2 ops at magnitude 9 of 10, the
#: magnitude drawn from a normal with std 0.5 each time, "increasing" variants of the ops.
RAND_AUGMENT = "rand-m9-mstd0.5-inc1"
POLICIES = ("autoaugment", "randaugment", None)
CROPS = ("pad", "resized", None)


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
    tensors (a ``batch_transform`` for the engine)."""
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
    timm mixes pairs, so in a batch of odd size (a last, smaller batch) the even part is
    mixed and the last image is left as it is, with its smoothed one-hot target.
    :meth:`state_dict` holds the step counter and whether mixing has stopped (the random
    draws are NumPy's global generator's, which a checkpoint saves with the others).
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
        check_range("prob", prob, 0, 1)
        check_range("switch_prob", switch_prob, 0, 1)
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
        self.steps += 1
        if self.stop_after_steps is not None and self.steps > self.stop_after_steps:
            self.mix.mixup_enabled = False
        even = len(X) - len(X) % 2
        if even == len(X):
            X, targets = self.mix(X.clone(), y)
            return X, targets.to(X.dtype)
        last = mixup_target(  # lam=1: the sample's own smoothed one-hot target
            y[even:], self.num_classes, 1.0, self.mix.label_smoothing
        )
        if even == 0:
            return X.clone(), last.to(X.dtype)
        mixed, targets = self.mix(X[:even].clone(), y[:even])
        X = torch.cat([mixed, X[even:]])
        return X, torch.cat([targets, last]).to(X.dtype)

    def state_dict(self) -> dict[str, Any]:
        """The step counter and whether mixing is on, for a checkpoint."""
        return {"steps": self.steps, "mixup_enabled": self.mix.mixup_enabled}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`: the steps already taken and the mixing switch."""
        self.steps = int(state["steps"])
        self.mix.mixup_enabled = bool(state["mixup_enabled"])

    def __repr__(self) -> str:
        m = self.mix
        return (
            f"MixUpCutMix(timm Mixup: mixup {m.mixup_alpha}, cutmix {m.cutmix_alpha}, "
            f"prob {m.mix_prob}, switch {m.switch_prob}, smoothing {m.label_smoothing}, "
            f"stop_after_steps={self.stop_after_steps})"
        )
