"""Chapter 7's online path, where a test can reach it: a linear head trained on cached
features of a frozen pre-trained backbone (the ImageNet ViT-B/16 feature extractor).

The chapter runs it on torchvision's ViT-B/16 and the pizza/steak/sushi photos, which need
the network; ``tests/book/test_ch07_lab.py`` runs the same function on class-coded images
and a small frozen backbone, through a shuffled loader.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn

from vitbook.training.experiments import tensor_loaders
from vitbook.training.loop import fit
from vitbook.training.recipe import Recipe

__all__ = ["cache_features", "imagenet_feature_extractor"]


@torch.inference_mode()
def cache_features(
    backbone: nn.Module, loader: Iterable, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(features, labels)`` of every batch of ``loader``, in ONE pass: each batch's
    images and labels are taken together, so a shuffled loader keeps them paired (two
    passes of a shuffled loader would pair the images of one order with the labels of
    another)."""
    backbone.to(device).eval()
    features, labels = [], []
    for images, targets in loader:
        features.append(backbone(images.to(device)).cpu())
        labels.append(targets)
    return torch.cat(features), torch.cat(labels)


def imagenet_feature_extractor(
    model: nn.Module,
    train_loader: Iterable,
    test_loader: Iterable,
    epochs: int,
    *,
    device: torch.device | str = "cpu",
    lr: float = 1e-3,
    batch_size: int = 32,
    seed: int = 0,
    adjust: Callable[[Recipe], Recipe] = lambda recipe: recipe,
    progress: bool = True,
) -> dict[str, list[float]]:
    """Train ``model.heads`` (torchvision's ViT keeps its head there) on cached features
    of the frozen rest of ``model``: the features of the training and test images are
    computed once (the backbone in eval mode; ViT-B/16 has no dropout and the weights'
    transforms are deterministic, so each image has one feature vector), then the head
    trains with Adam for ``epochs`` on them. ``adjust`` may change the recipe (the book
    caps it in a dry run). Returns ``fit``'s per-epoch history; ``model.heads`` is the
    trained head again afterwards."""
    head, model.heads = model.heads, nn.Identity()  # the backbone alone gives phi(x)
    try:
        train = cache_features(model, train_loader, device)
        test = cache_features(model, test_loader, device)
    finally:
        model.heads = head
    loaders = tensor_loaders(train, test, batch_size, seed=seed)
    recipe = adjust(Recipe(optimizer=torch.optim.Adam, lr=lr, epochs=epochs))
    return fit(head, *loaders, recipe, device=device, progress=progress)
