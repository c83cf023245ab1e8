"""Crops, flips and random erasing on a batch: a random box per image, drawn as torchvision
and timm draw it for one image.

* :func:`random_hflip`: a left-right flip with probability ``p``;
* :func:`random_pad_crop`: torchvision's ``RandomCrop(size, padding=4)`` (the 200-epoch recipe);
* :func:`random_resized_crop`: timm's ``RandomResizedCropAndInterpolation`` (the 300-epoch
  recipe), its boxes drawn by :func:`resized_crop_boxes`;
* :func:`random_erasing`: timm's ``RandomErasing(mode="pixel")``, on normalised images.

The crops take a flip probability too, folded into the same gather or matrix product.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = [
    "random_erasing",
    "random_hflip",
    "random_pad_crop",
    "random_resized_crop",
    "resized_crop_boxes",
]


def random_hflip(
    x: torch.Tensor, p: float = 0.5, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Flip each image left-right with probability ``p``."""
    flip = torch.rand(x.shape[0], device=x.device, generator=generator) < p
    return torch.where(flip.view(-1, 1, 1, 1), x.flip(-1), x)


def random_pad_crop(
    x: torch.Tensor,
    padding: int = 4,
    hflip: float = 0.0,
    generator: torch.Generator | None = None,
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
    device: torch.device | str | None = None,
    generator: torch.Generator | None = None,
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
    generator: torch.Generator | None = None,
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
    generator: torch.Generator | None = None,
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
