"""Batched twins of the PIL operations that RandAugment and AutoAugment apply to one image.

Each operation takes float images (n, C, H, W) with values in [0, 255] and one argument per
image, and returns images rounded as PIL's uint8 results are: :func:`brightness`,
:func:`color`, :func:`contrast`, :func:`sharpness`, :func:`invert`, :func:`posterize`,
:func:`solarize`, :func:`solarize_add`, :func:`auto_contrast`, :func:`equalize`, and the
affine ones (:func:`rotate`, :func:`shear_x`, :func:`shear_y`, :func:`translate_x`,
:func:`translate_y`), which sample through ``F.grid_sample`` as PIL's ``AFFINE`` transform
does. :data:`OPS` lists them by name; :func:`apply_ops` applies a different one to each
image of a batch. The policies that draw them are in :mod:`vitbook.data.gpu_augment.policies`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

__all__ = [
    "GEOMETRIC",
    "Fill",
    "Mode",
    "OPS",
    "OP_NAMES",
    "apply_ops",
    "auto_contrast",
    "brightness",
    "color",
    "contrast",
    "equalize",
    "invert",
    "posterize",
    "rotate",
    "sharpness",
    "shear_x",
    "shear_y",
    "solarize",
    "solarize_add",
    "translate_x",
    "translate_y",
]

#: How the affine operations fill the pixels they uncover: one value, or one per channel.
Fill = Sequence[float]
#: How they interpolate: a ``grid_sample`` mode, or a bool per image (True: bicubic).
Mode = str | torch.Tensor


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
    """PIL's ``ImageEnhance.Brightness``: blend with black (factor 0) up to the image (1)."""
    return _blend(torch.zeros_like(x), x, factor)


def color(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """PIL's ``ImageEnhance.Color``: blend with the grey image (factor 0: no colour)."""
    return _blend(_gray(x), x, factor)


def contrast(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """PIL's ``ImageEnhance.Contrast``: blend with the image's mean grey level."""
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
    """The negative image (no argument)."""
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
    fill: Fill,
    mode: Mode,
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


def rotate(
    x: torch.Tensor, degrees: torch.Tensor, fill: Fill = (0.0,), mode: Mode = "bilinear"
) -> torch.Tensor:
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


def shear_x(
    x: torch.Tensor, factor: torch.Tensor, fill: Fill = (0.0,), mode: Mode = "bilinear"
) -> torch.Tensor:
    """Shear horizontally: output pixel (X, Y) comes from (X + factor Y, Y)."""
    return _affine(x, _matrix(x, (1.0, factor, 0.0), (0.0, 1.0, 0.0)), fill, mode)


def shear_y(
    x: torch.Tensor, factor: torch.Tensor, fill: Fill = (0.0,), mode: Mode = "bilinear"
) -> torch.Tensor:
    """Shear vertically: output pixel (X, Y) comes from (X, factor X + Y)."""
    return _affine(x, _matrix(x, (1.0, 0.0, 0.0), (factor, 1.0, 0.0)), fill, mode)


def translate_x(
    x: torch.Tensor, pixels: torch.Tensor, fill: Fill = (0.0,), mode: Mode = "bilinear"
) -> torch.Tensor:
    """Shift left by ``pixels`` (output pixel (X, Y) comes from (X + pixels, Y))."""
    return _affine(x, _matrix(x, (1.0, 0.0, pixels), (0.0, 1.0, 0.0)), fill, mode)


def translate_y(
    x: torch.Tensor, pixels: torch.Tensor, fill: Fill = (0.0,), mode: Mode = "bilinear"
) -> torch.Tensor:
    """Shift up by ``pixels`` (output pixel (X, Y) comes from (X, Y + pixels))."""
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
    fill: Fill = (0.0,),
    mode: Mode = "bilinear",
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


def _apply_sorted(
    x: torch.Tensor,
    op: torch.Tensor,
    arg: torch.Tensor,
    fill: Fill,
    mode: Mode,
) -> torch.Tensor:
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
