"""Chapter 7's ImageNet feature-extractor path (vitbook.book.ch07_lab), run offline on
class-coded images through a shuffled loader: it must learn them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tests.dry_run_fixtures import class_coded_images
from vitbook.book import ch07_lab
from vitbook.training.experiments import tensor_loaders
from vitbook.training.loop import fit
from vitbook.training.recipe import Recipe

CLASSES = 3


class TinyFrozenBackbone(nn.Module):
    """A stand-in for ViT-B/16: a fixed random projection of the pixels as phi(x), and a
    head in ``.heads`` as torchvision's ViT keeps it."""

    def __init__(self, pixels: int, dim: int = 32):
        super().__init__()
        self.features = nn.Sequential(nn.Flatten(), nn.Linear(pixels, dim))
        self.features.requires_grad_(False)
        self.heads = nn.Linear(dim, CLASSES)

    def forward(self, x):
        return self.heads(self.features(x))


def _loader(per_class: int, seed: int, shuffle: bool) -> DataLoader:
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(CLASSES), per_class)
    rng.shuffle(labels)
    images = class_coded_images(labels, (16, 16, 3), rng)
    x = torch.tensor(images).permute(0, 3, 1, 2).float() / 255
    y = torch.tensor(labels)
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(
        TensorDataset(x, y), batch_size=8, shuffle=shuffle, generator=generator
    )


def _two_pass_extractor(model, train_loader, test_loader, epochs, **_):
    """The broken variant: images and labels read in SEPARATE passes of each loader."""
    head, model.heads = model.heads, nn.Identity()
    model.eval()
    cached = []
    for dl in (train_loader, test_loader):
        with torch.inference_mode():
            images = torch.cat([model(x) for x, _ in dl])
        labels = torch.cat([y for _, y in dl])  # a second pass: another order
        cached.append((images, labels))
    model.heads = head
    loaders = tensor_loaders(*cached, 8)
    recipe = Recipe(optimizer=torch.optim.Adam, lr=1e-2, epochs=epochs)
    return fit(head, *loaders, recipe, device="cpu", progress=False)


def _final_test_accuracy(extractor) -> float:
    torch.manual_seed(0)
    model = TinyFrozenBackbone(3 * 16 * 16)
    train = _loader(40, seed=1, shuffle=True)  # shuffled, as create_dataloaders does
    test = _loader(30, seed=2, shuffle=True)  # shuffled too: pairing must not matter
    results = extractor(model, train, test, 15, lr=1e-2, progress=False)
    return results["test_acc"][-1]


def test_the_feature_extractor_learns_class_coded_images_from_a_shuffled_loader():
    accuracy = _final_test_accuracy(ch07_lab.imagenet_feature_extractor)
    assert accuracy >= 0.9, accuracy  # chance is 1/3


def test_a_two_pass_variant_fails_the_same_check():
    """What the test above guards against: a shuffled loader read twice pairs the images
    of one order with the labels of another, and the head learns noise."""
    accuracy = _final_test_accuracy(_two_pass_extractor)
    assert accuracy < 0.6, accuracy


def test_the_head_is_trained_in_place_and_the_backbone_is_left_alone():
    torch.manual_seed(0)
    model = TinyFrozenBackbone(3 * 16 * 16)
    frozen = model.features[1].weight.clone()
    ch07_lab.imagenet_feature_extractor(
        model, _loader(10, 1, True), _loader(5, 2, False), 2, progress=False
    )
    assert isinstance(model.heads, nn.Linear)
    assert model.heads.weight.abs().sum() > 0
    torch.testing.assert_close(model.features[1].weight, frozen)


@pytest.mark.parametrize("shuffle", [True, False])
def test_cache_features_keeps_images_and_labels_paired(shuffle):
    loader = _loader(10, 3, shuffle)
    features, labels = ch07_lab.cache_features(nn.Flatten(), loader)
    # class k is bright in its own band of rows: the brightest band gives the label
    rows = features.view(-1, 3, 16, 16).mean(dim=(1, 3))
    bands = torch.stack([part.mean(1) for part in rows.tensor_split(CLASSES, dim=1)], 1)
    assert torch.equal(bands.argmax(1), labels)
