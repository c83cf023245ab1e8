"""vitbook.data.gpu_augment.ops: each batched operation against the PIL operation the CPU
recipe calls (same image, same argument), and the two ways of applying them per image."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from timm.data import auto_augment as aa

from vitbook.data.gpu_augment import ops as ops
from vitbook.data.gpu_augment.policies import AutoAugment, RandAugment

SIZE = 32


def _tensor(image: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.array(image)).permute(2, 0, 1)[None].float()


def _one(value: float) -> torch.Tensor:
    return torch.tensor([float(value)])


@pytest.mark.parametrize(
    ("pil_op", "arg", "ours"),
    [
        (aa.auto_contrast, None, ops.auto_contrast),
        (aa.equalize, None, ops.equalize),
        (aa.invert, None, ops.invert),
        (aa.posterize, 1, ops.posterize),
        (aa.posterize, 3, ops.posterize),
        (aa.solarize, 26, ops.solarize),
        (aa.solarize, 200, ops.solarize),
        (aa.solarize_add, 99, ops.solarize_add),
        (aa.color, 0.2, ops.color),
        (aa.color, 1.8, ops.color),
        (aa.contrast, 0.2, ops.contrast),
        (aa.contrast, 1.8, ops.contrast),
        (aa.brightness, 0.2, ops.brightness),
        (aa.brightness, 1.8, ops.brightness),
        (aa.sharpness, 0.2, ops.sharpness),
        (aa.sharpness, 1.8, ops.sharpness),
    ],
)
def test_pixel_operations_match_pil(photo, pil_op, arg, ours):
    expected = _tensor(pil_op(photo) if arg is None else pil_op(photo, arg))
    got = ours(_tensor(photo), None if arg is None else _one(arg))
    assert (got - expected).abs().max() <= 1  # PIL rounds the same way, up to one level


@pytest.mark.parametrize(
    ("pil_op", "arg", "ours"),
    [
        (aa.rotate, 23.0, ops.rotate),
        (aa.shear_x, 0.27, ops.shear_x),
        (aa.shear_y, -0.13, ops.shear_y),
        (aa.translate_x_abs, 6, ops.translate_x),
        (aa.translate_y_abs, -9, ops.translate_y),
    ],
)
def test_geometric_operations_match_pil(photo, pil_op, arg, ours):
    fill = (125, 123, 114)
    expected = _tensor(pil_op(photo, arg, fillcolor=fill, resample=Image.BILINEAR))
    got = ours(_tensor(photo), _one(arg), fill=fill, mode="bilinear")
    diff = (got - expected).abs()
    # sub-pixel conventions differ slightly at edges; the images are the same
    assert diff.mean() < 1.5 and (diff <= 2).float().mean() > 0.95


def test_rotate_nearest_matches_pil(photo):
    expected = _tensor(photo.rotate(17, resample=Image.NEAREST, fillcolor=(128,) * 3))
    got = ops.rotate(_tensor(photo), _one(17), fill=(128.0,), mode="nearest")
    assert (got - expected).abs().max() <= 1


@pytest.mark.parametrize("policy", [RandAugment(), AutoAugment()])
def test_sync_free_and_sorted_paths_agree(photo, policy):
    x = _tensor(photo).repeat(300, 1, 1, 1)
    x = (x + torch.randint(0, 30, x.shape)).clamp(0, 255)  # different images
    for layer in policy.sample(300, SIZE, "cpu", torch.Generator().manual_seed(1)):
        op, arg, *mode = layer
        mode = mode[0] if mode else policy.mode
        fast = ops.apply_ops(x, op, arg, fill=policy.fill, mode=mode, sync_free=False)
        free = ops.apply_ops(x, op, arg, fill=policy.fill, mode=mode, sync_free=True)
        torch.testing.assert_close(fast, free)
        x = fast
