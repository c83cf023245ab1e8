"""Predict on single images and show a grid of predictions with their true labels."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
from PIL import Image, ImageOps
from torch import nn
from torch.utils.data import Dataset
from torchvision import transforms

from going_modular.utils import check_device

__all__ = [
    "load_rgb",
    "plot_prediction_grid",
    "pred_and_plot_image",
    "predict_image",
    "tensor_to_image",
]

_GRID_INCHES = 8.2  # the widest a grid of predictions is drawn


def load_rgb(path: str | Path) -> Image.Image:
    """Open an image as RGB, upright as its EXIF orientation says, or say which file fails."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"No image file at {path}. Check the path.")
    try:
        with Image.open(path) as image:
            return ImageOps.exif_transpose(image).convert("RGB")
    except (OSError, Image.DecompressionBombError) as error:
        raise ValueError(
            f"Cannot decode image {path}: {str(error).rstrip('.')}."
        ) from None


def tensor_to_image(image: torch.Tensor) -> np.ndarray:
    """A (C, H, W) image tensor, normalised or not, as (H, W, C) in [0, 1] for imshow: each
    channel stretched to [0, 1], which undoes a per-channel normalisation."""
    image = image.detach().float().cpu()
    low = image.amin(dim=(1, 2), keepdim=True)
    high = image.amax(dim=(1, 2), keepdim=True)
    return ((image - low) / (high - low + 1e-8)).permute(1, 2, 0).squeeze(-1).numpy()


def _text(name: str) -> str:
    """A class name as matplotlib shows it literally (``$`` would start maths)."""
    return str(name).replace("$", r"\$")


def predict_image(
    model: nn.Module,
    image_path: str | Path,
    class_names: Sequence[str],
    transform: transforms.Compose,
    device: torch.device | str = "cpu",
) -> tuple[str, float]:
    """Return the predicted class name and its probability for the image at ``image_path``."""
    device = check_device(device)
    batch = transform(load_rgb(image_path)).unsqueeze(0)
    model.to(device).eval()
    with torch.inference_mode():
        try:
            logits = model(batch.to(device))
        except RuntimeError as error:
            raise RuntimeError(
                f"{error}\n(The image became a tensor of shape {tuple(batch.shape[1:])}: "
                "check image_size or the transform against the image size and channels "
                "the model was built for.)"
            ) from error
    probs = torch.softmax(logits, dim=1)[0]
    if len(probs) != len(class_names):
        raise ValueError(
            f"The model gives {len(probs)} class scores but {len(class_names)} class names "
            "were passed; pass the class names the model was trained with."
        )
    index = int(probs.argmax())
    return class_names[index], float(probs[index])


def pred_and_plot_image(
    model: nn.Module,
    class_names: Sequence[str],
    image_path: str | Path,
    image_size: tuple[int, int] = (224, 224),
    transform: transforms.Compose | None = None,
    device: torch.device | str = "cpu",
) -> tuple[str, float]:
    """Predict the class of one image, show it titled with the prediction, and return both.

    The arguments are the course's, in its order. Without ``transform`` the image is
    resized to ``image_size`` and normalised with the ImageNet statistics, as the course's
    helper does.
    """
    if transform is None:
        transform = transforms.Compose(
            [
                transforms.Resize(image_size),
                transforms.ToTensor(),
                transforms.Normalize(
                    mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]
                ),
            ]
        )
    label, prob = predict_image(model, image_path, class_names, transform, device)
    plt.figure(figsize=(5, 5))
    plt.imshow(load_rgb(image_path))
    plt.title(f"Pred: {_text(label)} | Prob: {prob:.3f}")
    plt.axis("off")
    return label, prob


def plot_prediction_grid(
    model: nn.Module,
    dataset: Dataset,
    class_names: Sequence[str],
    n: int = 9,
    device: torch.device | str = "cpu",
    seed: int = 42,
) -> plt.Figure:
    """Predict ``n`` random samples of a transformed ``dataset`` and show them in a grid.

    Titles are green when the prediction is right and red when it is wrong.
    """
    indices = random.Random(seed).sample(range(len(dataset)), k=min(n, len(dataset)))
    images, labels = zip(*(dataset[i] for i in indices), strict=True)
    model.to(device).eval()
    with torch.inference_mode():
        preds = model(torch.stack(images).to(device)).argmax(dim=1).cpu()
    cols = int(len(indices) ** 0.5 + 0.999)
    rows = (len(indices) + cols - 1) // cols
    panel = min(2.6, _GRID_INCHES / cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(panel * cols, (panel + 0.2) * rows), squeeze=False
    )
    for ax in axes.flat:
        ax.axis("off")
    for ax, image, label, pred in zip(axes.flat, images, labels, preds, strict=False):
        ax.imshow(tensor_to_image(image), cmap="gray")
        right = int(pred) == int(label)
        ax.set_title(
            f"true: {_text(class_names[label])}\npred: {_text(class_names[pred])}",
            color="green" if right else "red",
            fontsize=9,
        )
    fig.tight_layout()
    return fig
