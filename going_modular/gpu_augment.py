"""Batched, device-side augmentation: the CCT recipes' image transforms on whole batches.

The CPU recipes in :mod:`going_modular.augment` transform one PIL image at a time in loader
workers; on Colab two cores cannot keep a GPU busy that way. Here the images stay in memory as
one uint8 tensor (on the training device) and every step of the recipe runs on a whole batch at
once, with its random parameters drawn per sample:

* crops (:func:`random_pad_crop`, :func:`random_resized_crop`) and :func:`random_hflip`;
* :class:`RandAugment` (timm's ``rand-m9-mstd0.5-inc1``) and :class:`AutoAugment` (the CIFAR-10
  policy), built on batched versions of the PIL operations in :data:`OPS`;
* normalisation and :func:`random_erasing` (one rectangle of Gaussian noise).

:class:`BatchAugment` chains them; :func:`recipe_augment` builds the chain of a
:class:`~going_modular.augment.CCTRecipe`, and :class:`DeviceLoader` serves shuffled, augmented
batches from the tensors. MixUp/CutMix stay the recipe's own batch transform, which the engine
already applies on the device. Images are float in [0, 255] between steps and rounded after
each operation, as PIL keeps them in uint8.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from functools import partial

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset, TensorDataset

Step = Callable[[torch.Tensor], torch.Tensor]

# --- the operations: float images (n, C, H, W) in [0, 255], one argument per sample ---------


def _col(v: torch.Tensor) -> torch.Tensor:
    return v.view(-1, 1, 1, 1)


def _gray(x: torch.Tensor) -> torch.Tensor:
    """PIL's "L" conversion (ITU-R 601-2 luma), rounded; (n, 1, H, W)."""
    if x.shape[1] == 1:
        return x
    r, g, b = x.unbind(1)
    return (0.299 * r + 0.587 * g + 0.114 * b).round().unsqueeze(1)


def _blend(degenerate: torch.Tensor, x: torch.Tensor, factor: torch.Tensor):
    """PIL's ``Image.blend(degenerate, x, factor)``: clipped to [0, 255], truncated."""
    return (degenerate + _col(factor) * (x - degenerate)).clamp(0, 255).floor()


def brightness(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    return _blend(torch.zeros_like(x), x, factor)


def color(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    return _blend(_gray(x), x, factor)


def contrast(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    mean = _gray(x).mean(dim=(1, 2, 3), keepdim=True).round()
    return _blend(mean, x, factor)


def sharpness(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Blend with PIL's SMOOTH filter (3x3, centre weight 5, total 13); borders kept."""
    h, w = x.shape[-2:]
    inner = x[..., 1:-1, 1:-1]
    box = 4 * inner  # the centre's extra weight; the loop adds the 3x3 neighbourhood
    for dy in range(3):
        for dx in range(3):
            box = box + x[..., dy : h - 2 + dy, dx : w - 2 + dx]
    smooth = x.clone()
    smooth[..., 1:-1, 1:-1] = (box / 13).round()
    return _blend(smooth, x, factor)


def invert(x: torch.Tensor, _: torch.Tensor | None = None) -> torch.Tensor:
    return 255 - x


def posterize(x: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """Keep the ``bits`` most significant bits (0 bits: black)."""
    step = torch.pow(2.0, 8 - _col(bits).clamp(0, 8))
    return torch.floor(x / step) * step


def solarize(x: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """Invert the pixels at or above ``threshold``."""
    return torch.where(x >= _col(threshold), 255 - x, x)


def solarize_add(x: torch.Tensor, add: torch.Tensor) -> torch.Tensor:
    """Add ``add`` to the pixels below 128 (timm's SolarizeAdd), clipped at 255."""
    return torch.where(x < 128, (x + _col(add)).clamp(max=255), x)


def auto_contrast(x: torch.Tensor, _: torch.Tensor | None = None) -> torch.Tensor:
    """Stretch each channel to [0, 255] (channels with one value stay as they are)."""
    low = x.amin(dim=(2, 3), keepdim=True)
    high = x.amax(dim=(2, 3), keepdim=True)
    flat = high <= low
    scale = torch.where(flat, 1.0, 255.0 / (high - low).clamp(min=1))
    low = torch.where(flat, 0.0, low)
    return ((x - low) * scale).clamp(0, 255).floor()


def equalize(x: torch.Tensor, _: torch.Tensor | None = None) -> torch.Tensor:
    """PIL's ``ImageOps.equalize`` per channel, with one histogram per image and channel."""
    n, c, h, w = x.shape
    flat = x.reshape(n * c, h * w).long()
    hist = torch.zeros(n * c, 256, device=x.device).scatter_add_(
        1, flat, torch.ones_like(flat, dtype=torch.float32)
    )
    # the count of the last non-zero bin is left out of the step, as in PIL
    last = 255 - torch.argmax((hist.flip(1) > 0).float(), dim=1, keepdim=True)
    step = torch.floor((hist.sum(1, keepdim=True) - hist.gather(1, last)) / 255)
    shifted = torch.cumsum(hist, 1) - hist  # pixels strictly below each value
    lut = torch.floor((shifted + torch.floor(step / 2)) / step.clamp(min=1)).clamp(
        max=255
    )
    lut = torch.where(step > 0, lut, torch.arange(256.0, device=x.device))
    return lut.gather(1, flat).reshape(n, c, h, w).to(x.dtype)


def _affine(
    x: torch.Tensor,
    matrix: torch.Tensor,
    fill: Sequence[float],
    mode: str | torch.Tensor,
) -> torch.Tensor:
    """Sample ``x`` at ``matrix @ (X, Y, 1)`` for each output point (X, Y), as PIL's AFFINE.

    ``matrix`` (n, 2, 3) maps output to input coordinates in pixels (pixel centres at +0.5);
    points outside the image get ``fill``. ``mode`` is an interpolation of ``grid_sample`` or a
    bool tensor (n,): True for bicubic, False for bilinear, per image (timm's "random").
    """
    _, c, h, w = x.shape
    a, b, t1 = matrix[:, 0].unbind(1)
    d, e, t2 = matrix[:, 1].unbind(1)
    theta = torch.stack(
        [
            torch.stack([a, b * h / w, a + b * h / w + 2 * t1 / w - 1], 1),
            torch.stack([d * w / h, e, d * w / h + e + 2 * t2 / h - 1], 1),
        ],
        1,
    )
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    fill_t = x.new_tensor(fill).view(1, -1, 1, 1)
    if fill_t.shape[1] != c:
        fill_t = fill_t.mean(1, keepdim=True).expand(1, c, 1, 1)
    x = x - fill_t
    if isinstance(mode, str):
        out = F.grid_sample(x, grid, mode, "zeros", align_corners=False)
    elif x.device.type == "cuda":  # both on every image: no host sync
        out = torch.where(
            _col(mode),
            F.grid_sample(x, grid, "bicubic", "zeros", align_corners=False),
            F.grid_sample(x, grid, "bilinear", "zeros", align_corners=False),
        )
    else:
        out = torch.empty_like(x)
        for flag, name in ((True, "bicubic"), (False, "bilinear")):
            idx = (mode == flag).nonzero().squeeze(1)
            out[idx] = F.grid_sample(
                x[idx], grid[idx], name, "zeros", align_corners=False
            )
    return out.add_(fill_t).clamp_(0, 255).round_()


def _matrix(x: torch.Tensor, *rows: Sequence[torch.Tensor | float]) -> torch.Tensor:
    n = x.shape[0]
    return torch.stack(
        [
            torch.stack([torch.as_tensor(v, device=x.device).expand(n) for v in row], 1)
            for row in rows
        ],
        1,
    ).float()


def rotate(x, degrees, fill=(0.0,), mode="bilinear"):
    """Rotate counter-clockwise by ``degrees`` about the centre (PIL's ``rotate``)."""
    h, w = x.shape[-2:]
    a = torch.deg2rad(-degrees)
    cos, sin = torch.cos(a), torch.sin(a)
    cx, cy = w / 2, h / 2
    m = _matrix(
        x,
        (cos, sin, cx - cos * cx - sin * cy),
        (-sin, cos, cy + sin * cx - cos * cy),
    )
    return _affine(x, m, fill, mode)


def shear_x(x, factor, fill=(0.0,), mode="bilinear"):
    return _affine(x, _matrix(x, (1.0, factor, 0.0), (0.0, 1.0, 0.0)), fill, mode)


def shear_y(x, factor, fill=(0.0,), mode="bilinear"):
    return _affine(x, _matrix(x, (1.0, 0.0, 0.0), (factor, 1.0, 0.0)), fill, mode)


def translate_x(x, pixels, fill=(0.0,), mode="bilinear"):
    return _affine(x, _matrix(x, (1.0, 0.0, pixels), (0.0, 1.0, 0.0)), fill, mode)


def translate_y(x, pixels, fill=(0.0,), mode="bilinear"):
    return _affine(x, _matrix(x, (1.0, 0.0, 0.0), (0.0, 1.0, pixels)), fill, mode)


#: The operations, by name; each takes images and one argument per sample, and its argument
#: that leaves an image unchanged (None: the operation has no argument).
OPS: dict[str, tuple[Callable[..., torch.Tensor], float | None]] = {
    "AutoContrast": (auto_contrast, None),
    "Equalize": (equalize, None),
    "Invert": (invert, None),
    "Rotate": (rotate, 0.0),
    "Posterize": (posterize, 8.0),
    "Solarize": (solarize, 256.0),
    "SolarizeAdd": (solarize_add, 0.0),
    "Color": (color, 1.0),
    "Contrast": (contrast, 1.0),
    "Brightness": (brightness, 1.0),
    "Sharpness": (sharpness, 1.0),
    "ShearX": (shear_x, 0.0),
    "ShearY": (shear_y, 0.0),
    "TranslateX": (translate_x, 0.0),
    "TranslateY": (translate_y, 0.0),
}
OP_NAMES = tuple(OPS)
GEOMETRIC = {"Rotate", "ShearX", "ShearY", "TranslateX", "TranslateY"}


def apply_ops(
    x: torch.Tensor,
    op: torch.Tensor,
    arg: torch.Tensor,
    *,
    fill: Sequence[float] = (0.0,),
    mode: str | torch.Tensor = "bilinear",
    sync_free: bool | None = None,
) -> torch.Tensor:
    """Apply operation ``OP_NAMES[op[i]]`` with argument ``arg[i]`` to image ``i`` (-1: none).

    ``sync_free`` runs each operation on the whole batch and keeps the samples that drew it,
    so a GPU never waits for the host (the default on CUDA); otherwise each operation runs on
    its own samples only, which is cheaper on a CPU. Both give the same images.
    """
    if sync_free is None:
        sync_free = x.device.type == "cuda"
    if not sync_free:
        return _apply_sorted(x, op, arg, fill, mode)
    out = x
    for k, name in enumerate(OP_NAMES):
        fn, neutral = OPS[name]
        chosen = op == k
        a = arg if neutral is None else torch.where(chosen, arg, neutral)
        extra = {"fill": fill, "mode": mode} if name in GEOMETRIC else {}
        out = torch.where(_col(chosen), fn(out, a, **extra), out)
    return out


def _apply_sorted(x, op, arg, fill, mode) -> torch.Tensor:
    """:func:`apply_ops` on a CPU: gather the images that draw an operation, sorted by
    (operation, bicubic), run each operation on its contiguous slice, and copy them back."""
    cubic = torch.zeros_like(op) if isinstance(mode, str) else mode.long()
    key = (op + 1) * 2 + cubic
    counts = torch.bincount(key, minlength=2 * len(OP_NAMES) + 2).tolist()
    order = torch.argsort(key, stable=True)[counts[0] + counts[1] :]  # op -1: untouched
    xs, args = x.index_select(0, order), arg[order]
    start = 0
    for k, name in enumerate(OP_NAMES):
        fn = OPS[name][0]
        for c in (0, 1):
            count = counts[2 * (k + 1) + c]
            if count == 0:
                continue
            part = slice(start, start + count)
            extra = {}
            if name in GEOMETRIC:
                m = mode if isinstance(mode, str) else ("bicubic", "bilinear")[1 - c]
                extra = {"fill": fill, "mode": m}
            xs[part] = fn(xs[part], args[part], **extra)
            start += count
    return x.index_copy(0, order, xs)


# --- the policies -----------------------------------------------------------------------------


def _sign(n: int, device, generator=None) -> torch.Tensor:
    return torch.randint(0, 2, (n,), device=device, generator=generator) * 2.0 - 1.0


#: timm's ``_RAND_INCREASING_TRANSFORMS`` ("inc1"), as names of :data:`OPS` (timm's
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
        self, n: int, size: int, device, generator=None
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

    def __call__(self, x: torch.Tensor, generator=None) -> torch.Tensor:
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
        self, n: int, size: int, device, generator=None
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

    def __call__(self, x: torch.Tensor, generator=None) -> torch.Tensor:
        for op, arg in self.sample(x.shape[0], x.shape[-1], x.device, generator):
            x = apply_ops(x, op, arg, fill=self.fill, mode=self.mode)
        return x

    def __repr__(self) -> str:
        return f"AutoAugment(policy=CIFAR10, fill={self.fill}, mode={self.mode!r})"


# --- crops, flips and erasing -----------------------------------------------------------------


def random_hflip(x: torch.Tensor, p: float = 0.5, generator=None) -> torch.Tensor:
    """Flip each image left-right with probability ``p``."""
    flip = torch.rand(x.shape[0], device=x.device, generator=generator) < p
    return torch.where(_col(flip), x.flip(-1), x)


def random_pad_crop(
    x: torch.Tensor, padding: int = 4, hflip: float = 0.0, generator=None
) -> torch.Tensor:
    """torchvision's ``RandomCrop(size, padding)`` (pad with zeros, crop at a random offset),
    then a left-right flip with probability ``hflip``; one gather does both."""
    n, c, h, w = x.shape
    dev = x.device
    padded = F.pad(x, (padding,) * 4).flatten(2)
    off = torch.randint(
        0, 2 * padding + 1, (2, n, 1, 1), device=dev, generator=generator
    )
    cols = torch.arange(w, device=dev).expand(n, 1, w)
    if hflip > 0:
        flip = torch.rand(n, 1, 1, device=dev, generator=generator) < hflip
        cols = torch.where(flip, cols.flip(-1), cols)
    rows = off[0] + torch.arange(h, device=dev)[:, None]
    index = (rows * (w + 2 * padding) + off[1] + cols).flatten(1)
    return padded.gather(2, index[:, None].expand(n, c, h * w)).view(n, c, h, w)


def resized_crop_boxes(
    n: int,
    height: int,
    width: int,
    scale: tuple[float, float] = (0.8, 1.0),
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
    device=None,
    generator=None,
    attempts: int = 10,
) -> torch.Tensor:
    """torchvision's ``RandomResizedCrop.get_params`` for ``n`` images: (n, 4) top, left, h, w.

    Up to ``attempts`` draws per image (area fraction uniform in ``scale``, aspect ratio
    log-uniform in ``ratio``); the first that fits wins; else the central crop of the
    clamped ratio, as torchvision's fallback.
    """
    area = height * width
    shape = (n, attempts)
    target = area * torch.empty(shape, device=device).uniform_(
        *scale, generator=generator
    )
    log_r = torch.empty(shape, device=device).uniform_(
        math.log(ratio[0]), math.log(ratio[1]), generator=generator
    )
    r = torch.exp(log_r)
    w = torch.round(torch.sqrt(target * r))
    h = torch.round(torch.sqrt(target / r))
    ok = (w > 0) & (h > 0) & (w <= width) & (h <= height)
    first = torch.argmax(ok.float(), dim=1, keepdim=True)
    any_ok = ok.any(1)
    w, h = w.gather(1, first).squeeze(1), h.gather(1, first).squeeze(1)
    # fallback: the whole image cropped to the nearest allowed ratio
    in_ratio = width / height
    if in_ratio < ratio[0]:
        fw, fh = width, round(width / ratio[0])
    elif in_ratio > ratio[1]:
        fh, fw = height, round(height * ratio[1])
    else:
        fw, fh = width, height
    w = torch.where(any_ok, w, float(fw))
    h = torch.where(any_ok, h, float(fh))
    u = torch.rand(2, n, device=device, generator=generator)
    top = torch.where(any_ok, torch.floor(u[0] * (height - h + 1)), (height - h) // 2)
    left = torch.where(any_ok, torch.floor(u[1] * (width - w + 1)), (width - w) // 2)
    return torch.stack([top, left, h, w], 1)


def _resample_matrix(
    start: torch.Tensor, length: torch.Tensor, size: int, cubic: torch.Tensor
) -> torch.Tensor:
    """(n, size, size) weights that resample the span [start, start + length) of each image
    row to ``size`` pixels: bilinear, or PIL's bicubic (a = -0.5) where ``cubic``; taps
    outside the span are dropped and the weights renormalised, as PIL's crop + resize."""
    dev = start.device
    src = start[:, None] + (torch.arange(size, device=dev) + 0.5) * (
        length[:, None] / size
    )
    src = src - 0.5
    taps = torch.floor(src)[..., None] + torch.arange(-1, 3, device=dev)  # (n, size, 4)
    d = (src[..., None] - taps).abs()
    a = -0.5
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = (((d - 5) * d + 8) * d - 4) * a
    bicubic = torch.where(d <= 1, near, torch.where(d < 2, far, 0.0))
    w = torch.where(cubic[:, None, None], bicubic, (1 - d).clamp(min=0))
    inside = (taps >= start[:, None, None]) & (taps < (start + length)[:, None, None])
    w = torch.where(inside, w, 0.0)
    w = w / w.sum(-1, keepdim=True)
    index = taps.clamp(0, size - 1).long()
    return torch.zeros(len(src), size, size, device=dev).scatter_add_(2, index, w)


def random_resized_crop(
    x: torch.Tensor,
    scale: tuple[float, float] = (0.8, 1.0),
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
    hflip: float = 0.0,
    generator=None,
) -> torch.Tensor:
    """A random crop per image (see :func:`resized_crop_boxes`) resized back to full size,
    bilinear or bicubic at random per image (timm's ``RandomResizedCropAndInterpolation(
    interpolation="random")``), then flipped left-right with probability ``hflip``.

    Resizing is separable: two small matrix products per image, which also do the flip.
    """
    n, _, height, width = x.shape
    dev = x.device
    top, left, h, w = resized_crop_boxes(
        n, height, width, scale, ratio, dev, generator
    ).unbind(1)
    cubic = torch.rand(n, device=dev, generator=generator) < 0.5
    rows = _resample_matrix(top, h, height, cubic)
    cols = _resample_matrix(left, w, width, cubic)
    if hflip > 0:
        flip = torch.rand(n, device=dev, generator=generator) < hflip
        cols = torch.where(flip[:, None, None], cols.flip(1), cols)
    c = x.shape[1]
    y = torch.bmm(x.reshape(n, c * height, width), cols.transpose(1, 2))
    y = y.view(n, c, height, width).transpose(1, 2).reshape(n, height, c * width)
    out = torch.bmm(rows, y).view(n, height, c, width).transpose(1, 2)
    return out.clamp(0, 255).round_()


def random_erasing(
    x: torch.Tensor,
    p: float = 0.25,
    scale: tuple[float, float] = (0.02, 1 / 3),
    ratio: tuple[float, float] = (0.3, 1 / 0.3),
    generator=None,
    attempts: int = 10,
) -> torch.Tensor:
    """Erase one rectangle per image with probability ``p``, filled with N(0, 1) noise.

    For normalised images, as timm's ``RandomErasing(mode="pixel")`` and torchvision's
    ``RandomErasing(value="random")``: area fraction uniform in ``scale``, aspect ratio
    log-uniform in ``ratio``, the first of ``attempts`` draws that fits.
    """
    n, _, height, width = x.shape
    dev = x.device
    area = (
        height
        * width
        * torch.empty(n, attempts, device=dev).uniform_(*scale, generator=generator)
    )
    r = torch.exp(
        torch.empty(n, attempts, device=dev).uniform_(
            math.log(ratio[0]), math.log(ratio[1]), generator=generator
        )
    )
    h = torch.round(torch.sqrt(area * r))
    w = torch.round(torch.sqrt(area / r))
    ok = (h < height) & (w < width)
    first = torch.argmax(ok.float(), dim=1, keepdim=True)
    h, w = h.gather(1, first), w.gather(1, first)
    erase = ok.any(1, keepdim=True) & (
        torch.rand(n, 1, device=dev, generator=generator) < p
    )
    u = torch.rand(2, n, 1, device=dev, generator=generator)
    top = torch.floor(u[0] * (height - h + 1))
    left = torch.floor(u[1] * (width - w + 1))
    ys = torch.arange(height, device=dev)[None, :, None]
    xs = torch.arange(width, device=dev)[None, None, :]
    inside = (
        (ys >= top[:, :, None])
        & (ys < (top + h)[:, :, None])
        & (xs >= left[:, :, None])
        & (xs < (left + w)[:, :, None])
        & erase[:, :, None]
    )
    if dev.type == "cuda":  # noise for every image: no host sync
        noise = torch.randn(x.shape, device=dev, generator=generator, dtype=x.dtype)
        return torch.where(inside[:, None], noise, x)
    idx = erase.squeeze(1).nonzero().squeeze(1)
    noise = torch.randn(
        (len(idx), *x.shape[1:]), generator=generator, dtype=x.dtype, device=dev
    )
    out = x.clone()
    out[idx] = torch.where(inside[idx, None], noise, x[idx])
    return out


# --- the pipeline -----------------------------------------------------------------------------


class BatchAugment:
    """uint8 batch (n, C, H, W) -> augmented, normalised float32 batch, on the batch's device.

    ``steps`` run on float images in [0, 255]; then normalisation with ``mean``/``std`` (in
    [0, 1] units, as torchvision's Normalize), then random erasing with probability
    ``random_erasing`` (0: none). No steps and no erasing give the test transform.
    """

    def __init__(
        self,
        steps: Sequence[Step] = (),
        mean: Sequence[float] = (0.5,),
        std: Sequence[float] = (0.5,),
        random_erasing: float = 0.0,
    ):
        self.steps, self.random_erasing = list(steps), random_erasing
        self.mean, self.std = tuple(mean), tuple(std)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        if images.dtype != torch.uint8 or images.ndim != 4:
            raise TypeError(
                f"BatchAugment takes uint8 batches (n, C, H, W), got {images.dtype} "
                f"{tuple(images.shape)}; keep the data as uint8 (see to_uint8_images)."
            )
        x = images.float()
        for step in self.steps:
            x = step(x)
        mean = x.new_tensor(self.mean).view(1, -1, 1, 1) * 255
        std = x.new_tensor(self.std).view(1, -1, 1, 1) * 255
        x = x.sub_(mean).div_(std)
        if self.random_erasing > 0:
            x = random_erasing(x, self.random_erasing)
        return x

    def __repr__(self) -> str:
        names = ", ".join(
            getattr(getattr(s, "func", s), "__name__", repr(s)) for s in self.steps
        )
        return f"BatchAugment([{names}], erasing={self.random_erasing})"


def recipe_augment(
    recipe,
    mean: Sequence[float],
    std: Sequence[float],
) -> BatchAugment:
    """The device-side twin of ``recipe.train_transform()`` (a :class:`~.augment.CCTRecipe`).

    The same steps in the same order as :func:`~.augment.cifar_train_transform`: AutoAugment
    (grey fill) before the crop and the flip, RandAugment (filled with ``mean`` in pixels, as
    timm's ``img_mean``) after them; then normalisation and random erasing.
    """
    flip = 0.5 if recipe.hflip else 0.0
    if recipe.crop == "pad":
        geometric: list[Step] = [partial(random_pad_crop, hflip=flip)]
    elif recipe.crop == "resized":
        geometric = [partial(random_resized_crop, hflip=flip)]
    elif recipe.crop is None:
        geometric = [random_hflip] if recipe.hflip else []
    else:
        raise ValueError(f"Unknown crop {recipe.crop!r}.")
    if recipe.policy == "autoaugment":
        steps = [AutoAugment(), *geometric]
    elif recipe.policy == "randaugment":
        img_mean = [min(255, round(255 * m)) for m in mean]
        steps = [*geometric, RandAugment(fill=img_mean)]
    elif recipe.policy is None:
        steps = geometric
    else:
        raise ValueError(f"Unknown policy {recipe.policy!r}.")
    return BatchAugment(steps, mean, std, recipe.random_erasing)


def to_uint8_images(dataset: Dataset, img_size: int | None = None) -> torch.Tensor:
    """All images of ``dataset`` (PIL images or uint8 arrays, no transform) as (N, C, H, W)
    uint8, resized to ``img_size`` (antialiased) when given."""
    import numpy as np

    data = getattr(dataset, "data", None)
    if data is not None and getattr(dataset, "transform", None) is None:
        arrays = np.asarray(data)
    else:
        arrays = np.stack([np.asarray(dataset[i][0]) for i in range(len(dataset))])
    x = torch.from_numpy(arrays)
    x = x.unsqueeze(1) if x.ndim == 3 else x.permute(0, 3, 1, 2)
    if img_size is not None and tuple(x.shape[-2:]) != (img_size, img_size):
        x = F.interpolate(
            x.float(), size=(img_size, img_size), mode="bilinear", antialias=True
        )
        x = x.round().clamp(0, 255).to(torch.uint8)
    return x.contiguous()


class DeviceLoader:
    """Shuffled batches ``(augment(images[idx]), labels[idx])`` from tensors on one device.

    A drop-in for the engine's dataloaders when the data fits in (GPU) memory: no workers, no
    host-to-device copies, augmentation batched by ``augment`` (a :class:`BatchAugment`).
    ``augment`` runs on ``chunk`` images at a time (a multiple of ``batch_size``; by default
    about 8 MiB of float images), which spreads its fixed cost per call over more images.
    ``drop_last`` drops a last, smaller batch (MixUp/CutMix need even batches). ``passes``
    makes one iteration (one epoch of the engine) that many shuffled passes over the images,
    for small datasets trained many times over without a test after every pass.
    """

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        batch_size: int,
        augment: Callable[[torch.Tensor], torch.Tensor],
        *,
        shuffle: bool = True,
        drop_last: bool = False,
        device: torch.device | str | None = None,
        chunk: int | None = None,
        passes: int = 1,
    ):
        if images.dtype != torch.uint8 or images.ndim != 4:
            raise TypeError(
                f"DeviceLoader needs uint8 images (N, C, H, W), got {images.dtype} "
                f"{tuple(images.shape)}; convert with to_uint8_images(dataset)."
            )
        if len(images) != len(labels) or len(images) == 0:
            raise ValueError(
                f"Need as many labels as images, and at least one: got {len(images)} "
                f"images and {len(labels)} labels."
            )
        if batch_size <= 0 or passes <= 0:
            raise ValueError(
                f"batch_size and passes must be positive, got {batch_size} and {passes}."
            )
        device = device or images.device
        self.images, self.labels = images.to(device), labels.to(device)
        self.batch_size, self.augment = batch_size, augment
        self.shuffle, self.drop_last, self.passes = shuffle, drop_last, passes
        if chunk is None:
            chunk = 2**23 // (4 * images[0].numel())
        self.chunk = max(1, chunk // batch_size) * batch_size

    @property
    def dataset(self) -> TensorDataset:
        """The uint8 images and their labels, as a dataset (for ``len`` and inspection)."""
        return TensorDataset(self.images, self.labels)

    def __len__(self) -> int:
        return math.ceil(self.passes * self._per_pass() / self.batch_size)

    def _per_pass(self) -> int:
        """Images served per pass (a multiple of the batch size with ``drop_last``)."""
        n = len(self.images)
        return n // self.batch_size * self.batch_size if self.drop_last else n

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        n, dev = len(self.images), self.images.device
        keep = self._per_pass()
        order = torch.cat(
            [
                (torch.randperm(n) if self.shuffle else torch.arange(n))[:keep]
                for _ in range(self.passes)
            ]
        ).to(dev)
        for first in range(0, len(order), self.chunk):
            idx = order[first : first + self.chunk]
            xs, ys = self.augment(self.images[idx]), self.labels[idx]
            for start in range(0, len(idx), self.batch_size):
                end = start + self.batch_size
                yield xs[start:end], ys[start:end]


def recipe_loaders(
    train_data: Dataset,
    test_data: Dataset,
    recipe,
    img_size: int,
    batch_size: int,
    device: torch.device | str,
    mean: Sequence[float],
    std: Sequence[float],
) -> tuple[DeviceLoader, DeviceLoader]:
    """Training and test :class:`DeviceLoader` for a recipe: the images of ``train_data`` and
    ``test_data`` (no transform; ``.targets`` labels) as uint8 tensors on ``device``, the
    training batches augmented by :func:`recipe_augment`, the test batches only normalised.
    A recipe that mixes gets even batches only (``drop_last``), as timm's MixUp needs."""
    mixes = recipe.mixup_alpha > 0 or recipe.cutmix_alpha > 0
    train = DeviceLoader(
        to_uint8_images(train_data, img_size),
        torch.as_tensor(train_data.targets),
        batch_size,
        recipe_augment(recipe, mean, std),
        drop_last=mixes,
        device=device,
    )
    test = DeviceLoader(
        to_uint8_images(test_data, img_size),
        torch.as_tensor(test_data.targets),
        batch_size,
        BatchAugment([], mean, std),
        shuffle=False,
        device=device,
    )
    return train, test
