"""TinyVGG: the small CNN of the CNN Explainer, the book's first model before any transformer."""

from __future__ import annotations

import torch
from torch import nn

from going_modular.models.checks import check_sizes
from going_modular.models.registry import register_model

__all__ = ["TinyVGG", "tinyvgg", "vgg_block"]


def vgg_block(in_channels: int, out_channels: int) -> nn.Sequential:
    """Conv 3x3, ReLU, conv 3x3, ReLU, max-pool 2x2: (B, C, H, W) -> (B, out, H/2, W/2)."""
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.Conv2d(out_channels, out_channels, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
    )


class TinyVGG(nn.Module):
    """Two VGG-style blocks (conv, ReLU, conv, ReLU, max-pool) and a linear ``head``.

    The arguments are the course's: ``input_shape`` (input channels), ``hidden_units``
    and ``output_shape`` (classes). Each block halves the image, so the head sees
    ``hidden_units * (img_size // 4) ** 2`` features: ``img_size`` must be the size of the
    images the model will see.
    """

    def __init__(
        self,
        input_shape: int = 3,
        hidden_units: int = 16,
        output_shape: int = 3,
        img_size: int = 64,
    ):
        super().__init__()
        check_sizes(
            input_shape=input_shape,
            hidden_units=hidden_units,
            output_shape=output_shape,
            img_size=img_size,
        )
        if img_size < 4:
            raise ValueError(
                f"TinyVGG needs images of at least 4x4 pixels, got {img_size}."
            )
        self.features = nn.Sequential(
            vgg_block(input_shape, hidden_units),
            vgg_block(hidden_units, hidden_units),
        )
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(hidden_units * (img_size // 4) ** 2, output_shape)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


@register_model
def tinyvgg(
    num_classes: int = 3,
    img_size: int = 64,
    in_channels: int = 3,
    hidden_units: int = 16,
) -> TinyVGG:
    """TinyVGG for ``img_size`` x ``img_size`` images."""
    return TinyVGG(in_channels, hidden_units, num_classes, img_size)
