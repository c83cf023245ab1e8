"""The explorers and self-checks in headless Chromium, offline.

Each explorer's HTML (as a notebook output carries it) goes into a page in tmp_path, opened
from disk with every non-file request aborted. The test moves a slider, clicks a patch or
changes a select and checks that what is shown changed; the size calculator's numbers must
equal ``count_params``/``count_macs`` for the ViT and CCT papers' models, and the schedule's
script must give the same factors as ``warmup_cosine_schedule``. No console error, and
nothing wider than the window at 1400 or 400 px. Skips without Chromium or Playwright,
except under CI=true, where it fails (as tests/test_browser.py).
"""

from __future__ import annotations

import math

import pytest
import torch
from test_browser import _chromium, _missing, offline_chromium

from going_modular.models.cct_variants import cct_7_3x1
from going_modular.models.registry import build_model
from going_modular.models.vit import vit_4_16
from vitbook.book.explorers import (
    PAPER_PRESETS,
    attention_explorer,
    explorer_page,
    model_config,
    patch_explorer,
    schedule_explorer,
    size_calculator,
)
from vitbook.book.self_check import self_check
from vitbook.models.complexity import count_macs, count_params
from vitbook.training.optim import warmup_cosine_schedule


@pytest.fixture(scope="module")
def page_file(tmp_path_factory):
    torch.manual_seed(0)
    vit = vit_4_16(img_size=32, patch_size=8, num_classes=3)
    cct = cct_7_3x1(img_size=16, num_classes=3)
    images = torch.rand(2, 3, 32, 32)
    questions = [("How many patches?", 16, "32 * 32 / 8^2."), ("Why?", "x", "y.")]
    page = (
        explorer_page(
            size_calculator(),
            schedule_explorer(),
            patch_explorer(images[0], (4, 8, 16), dim=192),
            attention_explorer(vit, images, class_names=["a", "b", "c"]),
            attention_explorer(cct, images[:, :, :16, :16]),
        )
        + self_check(questions)._repr_html_()
    )
    path = tmp_path_factory.mktemp("explorers") / "explorers.html"
    path.write_text(page, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    executable = _chromium()
    if executable is None:
        _missing("chromium is not installed: apt-get install chromium")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _missing("the playwright package is not installed")
    with offline_chromium(tmp_path_factory, executable) as context:
        yield context


@pytest.fixture(params=[1400, 400])
def page(request, browser, page_file):
    page = browser.new_page()
    page.set_viewport_size({"width": request.param, "height": 900})
    errors, requests = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(page_file.as_uri())
    page.wait_for_load_state("load")
    yield page
    assert not errors, errors
    assert all(url.startswith(("file:", "data:")) for url in requests), requests
    # Nothing sticks out of the window: not the page, not an explorer
    widths = page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth,"
        " ...[...document.querySelectorAll('.vx')].map(e => e.scrollWidth - e.clientWidth)]"
    )
    assert widths[0] <= widths[1] + 1 and max(widths[2:]) <= 1, widths
    page.close()


def _pixels(page, selector: str) -> str:
    return page.locator(selector).evaluate("c => c.toDataURL()")


def _slide(slider, value: str) -> None:
    """Move a range input as a drag would: set its value, fire "input"."""
    slider.evaluate(
        "(e, v) => { e.value = v; e.dispatchEvent(new Event('input')); }", value
    )


def _explorer(page, n: int):
    return page.locator(".vx").nth(n)


def test_size_calculator_equals_the_package(page):
    calculator = _explorer(page, 0)
    preset = calculator.get_by_label("preset", exact=True)
    for label, name in PAPER_PRESETS.items():
        preset.select_option(label)
        with torch.device("meta"):
            model = build_model(name)
        side = model_config(model)["img"]
        assert (
            calculator.locator(".vx-params").inner_text() == f"{count_params(model):,}"
        )
        macs = count_macs(model, (1, 3, side, side))["total"]
        assert calculator.locator(".vx-macs").inner_text() == f"{macs:,}", label
    preset.select_option("CCT-7/3x1")
    patch = calculator.get_by_label("patch size", exact=True)
    assert patch.is_hidden()  # a CCT: convolutions instead
    calculator.get_by_label("kernel", exact=True).fill("7")  # stride 2, padding 3
    with torch.device("meta"):
        model = build_model("cct_7_3x1", kernel_size=7)
    assert calculator.locator(".vx-params").inner_text() == f"{count_params(model):,}"
    macs = count_macs(model, (1, 3, 32, 32))["total"]
    assert calculator.locator(".vx-macs").inner_text() == f"{macs:,}"
    calculator.get_by_label("heads", exact=True).fill("5")
    assert "not divisible by 5 heads" in calculator.inner_text()
    preset.select_option("ViT-B/16")
    assert calculator.get_by_label("kernel", exact=True).is_hidden()
    patch.fill("32")
    assert calculator.locator(".vx-tokens").inner_text() == "50"  # (224 / 32)^2 + 1


def test_schedule_script_equals_warmup_cosine_schedule(page):
    settings = [(0, 10, 0.0), (3.5, 20, 0.1), (5, 7, 0.0), (100, 1000, 0.01)]
    for warmup, total, min_factor in settings:
        optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
        factor = warmup_cosine_schedule(
            optimizer, warmup, total, min_factor
        ).lr_lambdas[0]
        steps = sorted({0, 1, total - 1, total, total + 5, *range(0, total, 7)})
        script = page.evaluate(
            "([s, w, t, m]) => s.map(x => VitExplorers.scheduleFactor(x, w, t, m))",
            [steps, warmup, total, min_factor],
        )
        for step, value in zip(steps, script, strict=True):
            assert math.isclose(value, factor(step), rel_tol=1e-12, abs_tol=1e-15), step
    explorer = _explorer(page, 1)
    before, text = (
        _pixels(page, ".vx >> nth=1 >> canvas >> nth=0"),
        explorer.inner_text(),
    )
    _slide(explorer.get_by_label("warmup steps", exact=True), "2000")
    assert _pixels(page, ".vx >> nth=1 >> canvas >> nth=0") != before
    _slide(explorer.get_by_label("label smoothing", exact=True), "0.3")
    assert explorer.inner_text() != text and "others 0.030" in explorer.inner_text()


def test_patch_explorer_slider_and_positions(page):
    explorer = _explorer(page, 2)
    info = explorer.locator(".vx-out").nth(0)
    assert "= 64 tokens" in info.inner_text()  # 32 * 32 / 4^2
    assert "the 8x8 grid of P = 4" in explorer.inner_text()  # the positions' panel too
    similarity = explorer.locator("canvas").nth(1)
    similarity.click(position={"x": 200, "y": 200})  # 240 px: cell (6, 6) of 8 x 8
    assert "position (6, 6)" in explorer.inner_text()
    _slide(explorer.get_by_label("patch size", exact=True), "2")  # the third size: 16
    assert "= 4 tokens" in info.inner_text()
    # The panel follows the slider: a 2 x 2 grid now, at the same place, (1, 1).
    assert (
        "position (1, 1) to every other (the 2x2 grid of P = 16"
        in explorer.inner_text()
    )
    before, text = (
        _pixels(page, ".vx >> nth=2 >> canvas >> nth=1"),
        explorer.inner_text(),
    )
    similarity.click(position={"x": 50, "y": 200})
    assert _pixels(page, ".vx >> nth=2 >> canvas >> nth=1") != before
    assert "position (1, 0)" in explorer.inner_text() and explorer.inner_text() != text
    similarity.press("ArrowUp")  # the keyboard moves the chosen position too
    assert "position (0, 0)" in explorer.inner_text()
    explorer.get_by_label("position embedding", exact=True).select_option("sinusoidal")
    assert "sinusoidal:" in explorer.inner_text()


def test_attention_explorer_clicks_and_selects(page):
    vit, cct = _explorer(page, 3), _explorer(page, 4)
    canvas = ".vx >> nth=3 >> canvas"
    assert "query the class token" in vit.inner_text()
    before = _pixels(page, canvas)
    vit.locator("canvas").click(position={"x": 300, "y": 10})
    assert "query patch (0, 3)" in vit.inner_text() and _pixels(page, canvas) != before
    assert "nearest" not in vit.inner_text()  # every patch of a 4x4 grid is stored
    # The query patch (0, 3), x from 240 to 320 on the 320-pixel canvas, is outlined:
    # black, white, black from its left edge inwards.
    edge = page.locator(canvas).evaluate(
        "c => Array.from({length: 3}, (_, i) => "
        "Array.from(c.getContext('2d').getImageData(240 + i, 40, 1, 1).data))"
    )
    assert edge == [[0, 0, 0, 255], [255, 255, 255, 255], [0, 0, 0, 255]]
    # The colour scale gives the largest weight and what even attention would give.
    assert "spread evenly over its 17 keys, each would get 0.059" in vit.inner_text()
    for label, value in [("layer", "1"), ("head", "2"), ("show", "rollout")]:
        before = _pixels(page, canvas)
        vit.get_by_label(label, exact=True).select_option(value)
        assert _pixels(page, canvas) != before, label
    vit.get_by_label("image", exact=True).select_option(index=1)
    assert "image 2 (predicted:" in vit.inner_text()
    assert "SeqPool" not in vit.inner_text()
    cct.get_by_label("show", exact=True).select_option("pool")
    assert "SeqPool weights" in cct.inner_text()


def test_self_check_answers_open_on_click(page):
    first = page.locator(".vx-check details").nth(0)
    assert not first.evaluate("d => d.open")
    first.locator("summary").click()
    assert first.evaluate("d => d.open") and "16" in first.inner_text()
