"""RandAugment and AutoAugment on a batch: each image draws its own operations and arguments.

* :class:`RandAugment`: timm's ``rand-m9-mstd0.5-inc1``, the 300-epoch CCT recipe's policy;
* :class:`AutoAugment`: torchvision's CIFAR-10 policy, the 200-epoch recipe's.

Each policy's ``sample`` draws, for ``n`` images, the operation (an index into
:data:`~vitbook.data.gpu_augment.ops.OP_NAMES`, -1 for none) and its argument, layer by
layer, with the distributions of the CPU transforms (the tests compare the draws); calling the
policy applies them with :func:`~vitbook.data.gpu_augment.ops.apply_ops`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Generator

from vitbook.data.gpu_augment.ops import OP_NAMES, apply_ops

__all__ = [
    "CIFAR10_POLICY",
    "RAND_INCREASING",
    "AutoAugment",
    "RandAugment",
    "autoaugment_arg",
    "rand_increasing_arg",
]

Device = torch.device | str


def _sign(n: int, device: Device, generator: Generator | None = None) -> torch.Tensor:
    return torch.randint(0, 2, (n,), device=device, generator=generator) * 2.0 - 1.0


#: timm's ``_RAND_INCREASING_TRANSFORMS`` ("inc1"), as names of :data:`~vitbook.data.gpu_augment.ops.OPS` (timm's
#: PosterizeIncreasing etc. are these operations with increasing level functions).
RAND_INCREASING = (
    "AutoContrast",
    "Equalize",
    "Invert",
    "Rotate",
    "Posterize",
    "Solarize",
    "SolarizeAdd",
    "Color",
    "Contrast",
    "Brightness",
    "Sharpness",
    "ShearX",
    "ShearY",
    "TranslateX",
    "TranslateY",
)


def rand_increasing_arg(
    name: str, magnitude: torch.Tensor, size: int, sign: torch.Tensor
) -> torch.Tensor:
    """timm's increasing level functions: magnitude in [0, 10] -> operation argument."""
    level = magnitude / 10
    if name == "Rotate":
        return level * 30 * sign
    if name == "Posterize":
        return 4 - torch.floor(level * 4)
    if name == "Solarize":
        return 256 - torch.floor(level * 256).clamp(max=256)
    if name == "SolarizeAdd":
        return torch.floor(level * 110).clamp(max=128)
    if name in ("Color", "Contrast", "Brightness", "Sharpness"):
        return (1 + level * 0.9 * sign).clamp(min=0.1)
    if name in ("ShearX", "ShearY"):
        return level * 0.3 * sign
    if name in ("TranslateX", "TranslateY"):
        return level * 0.45 * size * sign
    return torch.zeros_like(magnitude)


class RandAugment:
    """timm's RandAugment ``rand-m{magnitude}-mstd{std}-inc1`` on a batch.

    Each image draws ``num_ops`` operations (with replacement) from :data:`RAND_INCREASING`;
    each is applied with probability ``prob`` at a magnitude drawn from N(``magnitude``,
    ``std``) clipped to [0, 10]. Geometric operations fill with ``fill`` (timm: the image
    mean given as ``img_mean``, else 128) and interpolate bilinearly or bicubically, drawn per
    image and operation (timm's default "random" resampling).
    """

    def __init__(
        self,
        num_ops: int = 2,
        magnitude: float = 9.0,
        std: float = 0.5,
        prob: float = 0.5,
        fill: Sequence[float] = (128.0, 128.0, 128.0),
        ops: Sequence[str] = RAND_INCREASING,
    ):
        self.num_ops, self.magnitude, self.std, self.prob = (
            num_ops,
            magnitude,
            std,
            prob,
        )
        self.fill, self.ops = tuple(fill), tuple(ops)
        self.ids = torch.tensor([OP_NAMES.index(o) for o in self.ops])

    def sample(
        self, n: int, size: int, device: Device, generator: Generator | None = None
    ) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Per layer: operation ids (-1 when skipped), arguments and bicubic flags."""
        layers = []
        for _ in range(self.num_ops):
            pick = torch.randint(
                len(self.ops), (n,), device=device, generator=generator
            )
            op = self.ids.to(device)[pick]
            skip = torch.rand(n, device=device, generator=generator) > self.prob
            magnitude = torch.randn(n, device=device, generator=generator)
            magnitude = (self.magnitude + self.std * magnitude).clamp(0, 10)
            sign = _sign(n, device, generator)
            arg = torch.zeros(n, device=device)
            for j, name in enumerate(self.ops):
                arg = torch.where(
                    pick == j, rand_increasing_arg(name, magnitude, size, sign), arg
                )
            cubic = torch.rand(n, device=device, generator=generator) < 0.5
            layers.append((torch.where(skip, -1, op), arg, cubic))
        return layers

    def __call__(
        self, x: torch.Tensor, generator: Generator | None = None
    ) -> torch.Tensor:
        for op, arg, cubic in self.sample(x.shape[0], x.shape[-1], x.device, generator):
            x = apply_ops(x, op, arg, fill=self.fill, mode=cubic)
        return x

    def __repr__(self) -> str:
        return (
            f"RandAugment(n={self.num_ops}, m={self.magnitude}, mstd={self.std}, "
            f"p={self.prob}, fill={self.fill})"
        )


#: AutoAugment's CIFAR-10 policy (Cubuk et al. 2019), as torchvision lists it: 25 sub-policies
#: of two (operation, probability, magnitude bin of 10) each.
CIFAR10_POLICY = (
    (("Invert", 0.1, None), ("Contrast", 0.2, 6)),
    (("Rotate", 0.7, 2), ("TranslateX", 0.3, 9)),
    (("Sharpness", 0.8, 1), ("Sharpness", 0.9, 3)),
    (("ShearY", 0.5, 8), ("TranslateY", 0.7, 9)),
    (("AutoContrast", 0.5, None), ("Equalize", 0.9, None)),
    (("ShearY", 0.2, 7), ("Posterize", 0.3, 7)),
    (("Color", 0.4, 3), ("Brightness", 0.6, 7)),
    (("Sharpness", 0.3, 9), ("Brightness", 0.7, 9)),
    (("Equalize", 0.6, None), ("Equalize", 0.5, None)),
    (("Contrast", 0.6, 7), ("Sharpness", 0.6, 5)),
    (("Color", 0.7, 7), ("TranslateX", 0.5, 8)),
    (("Equalize", 0.3, None), ("AutoContrast", 0.4, None)),
    (("TranslateY", 0.4, 3), ("Sharpness", 0.2, 6)),
    (("Brightness", 0.9, 6), ("Color", 0.2, 8)),
    (("Solarize", 0.5, 2), ("Invert", 0.0, None)),
    (("Equalize", 0.2, None), ("AutoContrast", 0.6, None)),
    (("Equalize", 0.2, None), ("Equalize", 0.6, None)),
    (("Color", 0.9, 9), ("Equalize", 0.6, None)),
    (("AutoContrast", 0.8, None), ("Solarize", 0.2, 8)),
    (("Brightness", 0.1, 3), ("Color", 0.7, 0)),
    (("Solarize", 0.4, 5), ("AutoContrast", 0.9, None)),
    (("TranslateY", 0.9, 9), ("TranslateY", 0.7, 9)),
    (("AutoContrast", 0.9, None), ("Solarize", 0.8, 3)),
    (("Equalize", 0.8, None), ("Invert", 0.1, None)),
    (("TranslateY", 0.7, 9), ("AutoContrast", 0.9, None)),
)


def autoaugment_arg(name: str, bin_: int | None, size: int) -> tuple[float, bool]:
    """torchvision's AutoAugment magnitude of ``bin_`` (of 10) and whether it takes a sign."""
    if bin_ is None:
        return 0.0, False
    frac = bin_ / 9
    if name in ("ShearX", "ShearY"):
        return 0.3 * frac, True
    if name in ("TranslateX", "TranslateY"):
        return float(int(150 / 331 * size * frac)), True
    if name == "Rotate":
        return 30.0 * frac, True
    if name in ("Brightness", "Color", "Contrast", "Sharpness"):
        return 0.9 * frac, True  # the factor is 1 + signed magnitude
    if name == "Posterize":
        return float(round(8 - bin_ / (9 / 4))), False
    if name == "Solarize":
        return 255.0 * (1 - frac), False
    raise ValueError(f"No magnitude for {name!r}.")


class AutoAugment:
    """torchvision's ``AutoAugment(AutoAugmentPolicy.CIFAR10)`` on a batch: each image draws
    one of the 25 sub-policies and applies its two operations with their probabilities.

    Nearest-neighbour interpolation (torchvision's default) and grey ``fill``, as the CPU
    recipe (the reference's CIFAR10Policy fills with 128).
    """

    def __init__(self, fill: Sequence[float] = (128.0,), mode: str = "nearest"):
        self.fill, self.mode = tuple(fill), mode

    def _tables(self, size: int, device):
        op, prob, mag, signed = (
            torch.zeros(len(CIFAR10_POLICY), 2, device=device) for _ in range(4)
        )
        for i, sub in enumerate(CIFAR10_POLICY):
            for j, (name, p, bin_) in enumerate(sub):
                m, s = autoaugment_arg(name, bin_, size)
                op[i, j], prob[i, j], mag[i, j], signed[i, j] = (
                    OP_NAMES.index(name),
                    p,
                    m,
                    float(s),
                )
        return op.long(), prob, mag, signed.bool()

    def sample(
        self, n: int, size: int, device: Device, generator: Generator | None = None
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer: operation ids (-1 when skipped) and arguments for ``n`` images."""
        op, prob, mag, signed = self._tables(size, device)
        sub = torch.randint(
            len(CIFAR10_POLICY), (n,), device=device, generator=generator
        )
        layers = []
        for j in range(2):
            o, p, m, s = op[sub, j], prob[sub, j], mag[sub, j], signed[sub, j]
            apply = torch.rand(n, device=device, generator=generator) < p
            m = torch.where(s, m * _sign(n, device, generator), m)
            enhance = (o >= OP_NAMES.index("Color")) & (
                o <= OP_NAMES.index("Sharpness")
            )
            m = torch.where(enhance, 1 + m, m)
            layers.append((torch.where(apply, o, -1), m))
        return layers

    def __call__(
        self, x: torch.Tensor, generator: Generator | None = None
    ) -> torch.Tensor:
        for op, arg in self.sample(x.shape[0], x.shape[-1], x.device, generator):
            x = apply_ops(x, op, arg, fill=self.fill, mode=self.mode)
        return x

    def __repr__(self) -> str:
        return f"AutoAugment(policy=CIFAR10, fill={self.fill}, mode={self.mode!r})"
