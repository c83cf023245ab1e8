"""The live explorers build without a widget frontend, redraw when a control's value changes,
show the package's own numbers, and :func:`show` hands the static book the HTML explorer."""

from __future__ import annotations

import importlib.util
import re
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from going_modular.models.cct_variants import CCT, cct_7_3x1
from going_modular.models.layers import collect_attention, sinusoidal_embedding
from going_modular.models.registry import build_model
from going_modular.models.vit import ViT, vit_4_16
from vitbook.book import widgets
from vitbook.book.attention_maps import (
    attention_rollout,
    overlay,
)
from vitbook.book.explorers import PAPER_PRESETS, size_calculator, unit_range
from vitbook.models.complexity import count_macs, count_params
from vitbook.training.optim import warmup_cosine_schedule

ipywidgets = pytest.importorskip("ipywidgets")


@pytest.fixture(scope="module")
def vit():
    torch.manual_seed(0)
    return vit_4_16(img_size=32, patch_size=8, num_classes=3)  # a 4x4 grid


def _numbers(readout: str) -> dict[str, int]:
    """'name: <b>1,234</b>' pairs of the calculator's readout."""
    pairs = re.findall(r"([\w ,-]+): <b>([\d,]+)</b>", readout)
    return {name.strip(): int(n.replace(",", "")) for name, n in pairs}


def _expected(model: torch.nn.Module, side: int) -> dict[str, int]:
    macs = count_macs(model, (1, 3, side, side))
    return {
        "parameters": count_params(model),
        **{f"multiply-adds, {k}": macs[k] for k in ("total", "linear", "attention")},
    }


def _image_data(axes) -> np.ndarray:
    """The data of the last image drawn on ``axes``."""
    return np.asarray(axes.images[-1].get_array())


def test_show_gives_the_html_unless_live(monkeypatch):
    explorer = size_calculator()

    def not_called():
        raise AssertionError("the live explorer was built in a static run")

    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.setattr(widgets, "LIVE", None)
    assert widgets.show(explorer, not_called) is explorer  # Jupyter, nbconvert
    assert widgets.show(explorer, not_called, use_live=False) is explorer
    live = widgets.show(explorer, widgets.live_schedule_explorer, use_live=True)
    assert isinstance(live, widgets.LiveExplorer)
    displayed = []
    monkeypatch.setattr("IPython.display.display", displayed.append)
    live._ipython_display_()  # what a notebook calls to show it
    assert displayed == [live.box] and isinstance(live.box, ipywidgets.Widget)
    monkeypatch.setattr(widgets, "LIVE", True)  # the reader opts in
    assert isinstance(widgets.show(explorer, widgets.live_schedule_explorer),
                      widgets.LiveExplorer)  # fmt: skip
    assert widgets.show(explorer) is explorer  # nothing live to show
    monkeypatch.setattr(widgets, "LIVE", None)
    monkeypatch.setitem(sys.modules, "google.colab", object())  # on Colab
    assert widgets.wants_live() and not widgets.wants_live(False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)  # no ipywidgets
    assert widgets.show(explorer, not_called) is explorer


@pytest.mark.parametrize("label", list(PAPER_PRESETS))
def test_calculator_counts_are_the_packages(label):
    calculator = widgets.live_size_calculator()
    calculator.controls["preset"].value = label
    assert calculator.figure is None and calculator.picture.layout.display == "none"
    with torch.device("meta"):
        model = build_model(PAPER_PRESETS[label])
    side = calculator.controls["img"].value
    numbers = _numbers(calculator.readout.value)
    assert numbers.items() >= _expected(model, side).items()
    patches = model.num_patches if isinstance(model, ViT) else model.num_tokens
    assert numbers["tokens"] == patches + (model.cls_token is not None)
    is_cct = isinstance(model, CCT)
    assert calculator.controls["patch"].layout.display == ("none" if is_cct else None)
    assert calculator.controls["kernel"].layout.display == (None if is_cct else "none")


def test_calculator_follows_its_fields():
    calculator = widgets.live_size_calculator()
    calculator.controls["preset"].value = "ViT-B/16"
    with calculator.paused():
        calculator.controls["img"].value = 384
        calculator.controls["dim"].value = 512
        calculator.controls["heads"].value = 8
    with torch.device("meta"):
        model = ViT(img_size=384, dim=512, heads=8)
    numbers = _numbers(calculator.readout.value)
    assert numbers.items() >= _expected(model, 384).items()
    assert numbers["tokens"] == (384 // 16) ** 2 + 1
    calculator.controls[
        "heads"
    ].value = 7  # the package refuses it; the readout says why
    assert "not divisible by heads=7" in calculator.readout.value
    calculator.controls["preset"].value = "CCT-7/3x1"
    calculator.controls[
        "kernel"
    ].value = 7  # the CCT's default stride and padding follow
    with torch.device("meta"):
        model = CCT(kernel_size=7, depth=7, heads=4, mlp_ratio=2.0)
    assert _numbers(calculator.readout.value).items() >= _expected(model, 32).items()


def test_schedule_draws_the_engines_schedule():
    explorer = widgets.live_schedule_explorer(10, 100, 1e-3, 1e-4, 0.1, num_classes=5)
    before = explorer.picture.value
    explorer.controls["warmup"].value = 30
    assert explorer.picture.value != before
    curve, bars = explorer.figure.axes
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    factor = warmup_cosine_schedule(optimizer, 30, 100, 0.1).lr_lambdas[0]
    expected = [1e-3 * factor(step) for step in range(100)]
    assert np.allclose(curve.lines[0].get_ydata(), expected, rtol=1e-12, atol=0)
    assert "at step 29" in explorer.readout.value
    explorer.controls["smoothing"].value = 0.2
    heights = [bar.get_height() for bar in explorer.figure.axes[1].patches]
    assert np.allclose(heights, [0.84, 0.04, 0.04, 0.04, 0.04])
    explorer.controls["warmup"].value = 150  # past the end: refused by the package
    assert "warmup_steps must be a finite number in [0, 100]" in explorer.readout.value


def test_patch_explorer_redraws_grid_and_similarity():
    explorer = widgets.live_patch_explorer(torch.rand(3, 32, 48), (4, 8, 16), dim=192)
    image_axes, similarity_axes = explorer.figure.axes[:2]
    assert image_axes.get_title() == "P = 4: N = 64 patches"
    assert len(image_axes.lines) == 2 * (32 // 4 - 1)  # the grid's inner lines
    assert _image_data(similarity_axes).shape == (8, 8)  # the grid of P = 4
    before = explorer.picture.value
    explorer.controls["patch"].value = 16
    assert explorer.picture.value != before
    assert explorer.figure.axes[0].get_title() == "P = 16: N = 4 patches"
    assert "<b>4</b> patches" in explorer.readout.value
    # The position sliders span the finest grid (8 x 8); (2, 7) is (0, 1) of the 2 x 2.
    explorer.controls["row"].value, explorer.controls["column"].value = 2, 7
    assert explorer.controls["table"].value == "learned (at initialisation)"
    shown = _image_data(explorer.figure.axes[1])
    assert shown.shape == (2, 2) and shown[0, 1] == pytest.approx(1.0)
    assert (
        np.abs(np.delete(shown.flatten(), 1)).max() < 0.5
    )  # random: nearly orthogonal
    explorer.controls["table"].value = "sinusoidal"
    shown = _image_data(explorer.figure.axes[1])
    table = sinusoidal_embedding(4, 192)[0]
    expected = torch.nn.functional.cosine_similarity(table[1][None], table, dim=-1)
    assert np.allclose(shown.flatten(), expected.numpy(), atol=1e-6)
    with pytest.raises(ValueError, match="do not divide"):
        widgets.live_patch_explorer(torch.rand(3, 32, 32), (5,))
    wide = Image.new("RGB", (48, 32), "black")
    wide.paste("white", (8, 0, 40, 32))  # the centred square is white, the sides black
    explorer = widgets.live_patch_explorer(wide, (8,))
    assert (_image_data(explorer.figure.axes[0]) == 1).all()
    assert "(16 + 1) x 192" in explorer.readout.value  # 8 x 8 pixels x 3 channels


def test_attention_explorer_shows_the_models_maps(vit):
    images = torch.rand(2, 3, 32, 32)
    explorer = widgets.live_attention_explorer(vit, images, class_names=["a", "b", "c"])
    maps = torch.stack(collect_attention(vit, images))  # (layers, B, heads, 17, 17)
    controls = explorer.controls
    before = explorer.picture.value
    with explorer.paused():
        controls["image"].value, controls["layer"].value = 1, 2
        controls["head"].value, controls["row"].value, controls["column"].value = (
            1,
            0,
            3,
        )
    assert explorer.picture.value != before
    shown = explorer.figure.axes[1].images[0].get_array()
    displayed = unit_range(images)[1]  # the default: each image rescaled to [0, 1]
    assert np.allclose(shown, displayed.permute(1, 2, 0).numpy(), atol=1e-6)
    expected = maps[2, 1, 1, 1 + 3, 1:].reshape(4, 4)  # query: patch (0, 3)
    assert np.allclose(
        _image_data(explorer.figure.axes[1]), overlay(images[1], expected)
    )
    assert explorer.readout.value == "layer 3, head 2; query: patch (0, 3)"
    controls["class_token"].value = True
    expected = maps[2, 1, 1, 0, 1:].reshape(4, 4)
    assert np.allclose(
        _image_data(explorer.figure.axes[1]), overlay(images[1], expected)
    )
    controls["mode"].value = "rollout"
    expected = attention_rollout(list(maps))[1, 0, 1:].reshape(4, 4)
    assert np.allclose(
        _image_data(explorer.figure.axes[1]), overlay(images[1], expected)
    )
    assert "SeqPool weights" not in controls["mode"].options


def test_attention_explorer_shows_seqpool_weights():
    torch.manual_seed(0)
    cct = cct_7_3x1(num_classes=10)  # 16x16 tokens, no class token
    images = torch.rand(1, 3, 32, 32)
    explorer = widgets.live_attention_explorer(cct, images)
    assert "class_token" not in explorer.controls
    explorer.controls["mode"].value = "SeqPool weights"
    cct.eval()
    with torch.no_grad():
        weights = cct.pool_weights(images)
    expected = overlay(images[0], weights[0].reshape(16, 16))
    assert np.allclose(_image_data(explorer.figure.axes[1]), expected)
    assert explorer.readout.value == "SeqPool's weight on each token"
