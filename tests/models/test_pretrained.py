"""The frozen ViT-B/16 feature extractor: offline stand-in, frozen backbone, errors, registry."""

from __future__ import annotations

import contextlib
import io
import urllib.error

import pytest
import torch
from PIL import Image
from torchvision.models import VisionTransformer

from going_modular.models import build_model
from vitbook.data import network
from vitbook.data.download import DownloadError
from vitbook.models import pretrained
from vitbook.models.pretrained import (
    create_vit_feature_extractor,
    weights_transforms,
)

HEAD_PARAMS = 768 * 3 + 3
TOTAL_PARAMS = (
    85_800_963  # torchvision's 86,567,656 with a 3-class head instead of 1000
)


def _stand_in_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("[STAND-IN]")]


@pytest.fixture(scope="module")
def offline_extractor():
    """One offline build (with the output it printed), shared: building ViT-B/16 takes ~1 s."""
    was_offline = network.is_offline()
    network.set_offline(True)
    torch.manual_seed(0)
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        result = create_vit_feature_extractor(num_classes=3)
    network.set_offline(was_offline)
    return (*result, buffer.getvalue())


def test_offline_fallback_is_untrained_and_says_so_in_one_line(offline_extractor):
    model, _, loaded, printed = offline_extractor
    assert isinstance(model, VisionTransformer)
    assert loaded is False
    lines = _stand_in_lines(printed)
    assert len(lines) == 1 and "UNTRAINED" in lines[0] and "IMAGENET1K_V1" in lines[0]
    # a checkpoint of it rebuilds without any download: the state dict holds every weight
    assert model.build_config["kwargs"] == {
        "num_classes": 3,
        "img_size": 224,
        "weights": None,
    }


def test_only_the_new_head_is_trainable(offline_extractor):
    model = offline_extractor[0]
    trainable = {n: p.numel() for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {"heads.weight": 768 * 3, "heads.bias": 3}
    assert sum(trainable.values()) == HEAD_PARAMS
    assert sum(p.numel() for p in model.parameters()) == TOTAL_PARAMS


def test_head_output_shape_and_gradients_reach_only_the_head(offline_extractor):
    model = offline_extractor[0]
    logits = model(torch.randn(2, 3, 224, 224))
    assert logits.shape == (2, 3)
    logits.sum().backward()
    assert model.heads.weight.grad is not None
    assert all(
        p.grad is None for n, p in model.named_parameters() if not n.startswith("heads")
    )
    model.zero_grad(set_to_none=True)


@pytest.mark.parametrize(
    ("weights", "size"), [("DEFAULT", 224), ("IMAGENET1K_SWAG_E2E_V1", 384)]
)
def test_transforms_give_the_weights_image_size_offline(weights, size):
    image = Image.new("RGB", (500, 375), color=(200, 120, 40))
    assert weights_transforms(weights)(image).shape == (3, size, size)


def test_fallback_false_offline_raises_download_error_with_url_and_advice():
    with pytest.raises(
        DownloadError, match=r"https://download\.pytorch\.org/.*set_offline\(True\)"
    ):
        create_vit_feature_extractor(3, fallback=False)


def test_failed_download_falls_back_or_raises(monkeypatch, capsys, online):
    real = pretrained.vit_b_16

    def no_network(*, weights=None, **kwargs):
        if weights is not None:
            raise urllib.error.URLError("no route to host")
        return real(weights=None, **kwargs)

    monkeypatch.setattr(pretrained, "vit_b_16", no_network)
    with pytest.raises(DownloadError, match="no route to host"):
        create_vit_feature_extractor(3, "IMAGENET1K_SWAG_E2E_V1", fallback=False)
    model, _, loaded = create_vit_feature_extractor(3, "IMAGENET1K_SWAG_E2E_V1")
    out = capsys.readouterr().out
    assert loaded is False and len(_stand_in_lines(out)) == 1 and "[INFO]" in out
    assert model.image_size == 384
    assert model.encoder.pos_embedding.shape == (1, 24 * 24 + 1, 768)


def test_unknown_weights_name_lists_the_choices():
    with pytest.raises(ValueError, match="IMAGENET1K_SWAG_E2E_V1"):
        create_vit_feature_extractor(3, "IMAGENET22K")


def test_registry_builds_it_and_checks_the_image_size(capsys):
    model = build_model("vit_b_16_pretrained", num_classes=5)
    assert model.heads.out_features == 5
    assert model.build_config == {
        "name": "vit_b_16_pretrained",
        "kwargs": {"num_classes": 5},
    }
    assert len(_stand_in_lines(capsys.readouterr().out)) == 1
    with pytest.raises(ValueError, match="trained at 224x224.*img_size=384"):
        build_model("vit_b_16_pretrained", img_size=384)
    with pytest.raises(ValueError, match="3 channels"):
        build_model("vit_b_16_pretrained", in_channels=1)
