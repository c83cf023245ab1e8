"""The explorers' and self-checks' Python side: the data they carry equals the package's
numbers, the HTML needs no network and stays small. The script's formulas are checked
with Node when it is installed (and always in Chromium, tests/book/test_explorers_browser.py)."""

from __future__ import annotations

import base64
import io
import json
import math
import re
import shutil
import subprocess
from importlib.resources import files

import numpy as np
import pytest
import skimage
import torch
from PIL import Image

from going_modular.models.cct_variants import cct_7_3x1
from going_modular.models.layers import collect_attention, sinusoidal_embedding
from going_modular.models.registry import build_model
from going_modular.models.vit import vit_4_16
from vitbook.book.attention_maps import (
    attention_rollout,
)
from vitbook.book.explorers import (
    PAPER_PRESETS,
    POSITION_KINDS,
    Explorer,
    attention_explorer,
    model_config,
    patch_explorer,
    position_similarity,
    position_table,
    schedule_explorer,
    size_calculator,
)
from vitbook.book.self_check import self_check
from vitbook.models.complexity import count_macs, count_params
from vitbook.training.optim import warmup_cosine_schedule


def _bytes(b64: str, *shape: int) -> np.ndarray:
    return np.frombuffer(base64.b64decode(b64), dtype=np.uint8).reshape(shape)


def _quantised(values: torch.Tensor) -> np.ndarray:
    """Rows scaled to a maximum of one, as bytes (what the explorer stores)."""
    rows = values / values.amax(dim=-1, keepdim=True)
    return (rows * 255).round().to(torch.uint8).numpy()


@pytest.fixture(scope="module")
def vit():
    torch.manual_seed(0)
    return vit_4_16(img_size=32, patch_size=8, num_classes=3)


def test_html_is_offline_and_small(vit):
    explorers = [
        size_calculator(),
        schedule_explorer(),
        patch_explorer(torch.rand(3, 32, 32), (8, 16), dim=192),
        attention_explorer(vit, torch.rand(1, 3, 32, 32)),
    ]
    script = files("vitbook.book").joinpath("explorers.js").read_text()
    assert len(script.encode()) < 24_000  # the script each explorer inlines
    assert not re.search(
        r"https?:|fetch\(|XMLHttpRequest|import\(|\.src = (?!src)", script
    )
    for explorer in explorers:
        page = explorer._repr_html_()
        assert not re.search(r"https?:|(src|href)=", page), explorer
        for uri in re.findall(r'"(?:src|image)":"([^"]*)"', page):
            assert uri.startswith(("data:image/png;base64,", "data:image/jpeg;base64,"))
        assert "VitExplorers.mount(" in page and script in page
        assert len(page.encode()) < 200_000, (explorer.kind, len(page))
    # a "</script>" inside the data cannot close the script early
    tricky = Explorer("size", {"presets": {"</script>": {}}}).html
    assert tricky.count("</script>") == 1


def test_embedded_json_hides_markup_from_the_html_parser(vit):
    # "<!--<script>" in a script would swallow every later script on the page
    names = ["<!--<script>", "a & b", "</script>"]
    explorer = attention_explorer(vit, torch.rand(3, 3, 32, 32), class_names=names)
    page = explorer.html
    payload = re.search(r"getElementById\('vx-\w+'\), (.*)\);</script>$", page)[1]
    assert not re.search("[<>&]", payload)
    assert json.loads(payload) == explorer.data  # the same data for the script


@pytest.mark.parametrize("label", list(PAPER_PRESETS))
def test_calculator_presets_describe_the_registered_models(label):
    config = size_calculator().data["presets"][label]
    with torch.device("meta"):
        model = build_model(PAPER_PRESETS[label])
    assert config == model_config(model)
    assert config["dim"] * config["mlp_ratio"] == model.blocks[0].mlp.fc1.out_features
    assert config["depth"] == len(model.blocks) and config["classes"] == (
        1000 if config["kind"] == "vit" else 10
    )
    if config["kind"] == "cct":
        assert model.tokenizer.sequence_length(3, config["img"], config["img"]) > 0


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_script_formulas_equal_the_package_in_node():
    configs = size_calculator().data["presets"]
    settings = [(0, 10, 0.0), (3.5, 20, 0.1), (100, 1000, 0.01)]
    script = files("vitbook.book").joinpath("explorers.js").read_text()
    program = (
        f"window = {{}};\n{script}\nconst X = window.VitExplorers;\n"
        f"const sizes = Object.fromEntries(Object.entries({json.dumps(configs)})"
        ".map(([k, c]) => [k, X.modelSize(c)]));\n"
        f"const factors = {json.dumps(settings)}.map(([w, t, m]) => "
        "[...Array(t + 3).keys()].map(s => X.scheduleFactor(s, w, t, m)));\n"
        "const sine = X.positionTable('sinusoidal', 49, 64);\n"
        "const random = X.positionTable('random', 196, 768);\n"
        "const similarity = {sine: X.positionSimilarity(sine, 64, 17),\n"
        "  random: X.positionSimilarity(random, 768, 100)};\n"
        "console.log(JSON.stringify({sizes, factors, similarity}));"
    )
    result = json.loads(
        subprocess.run(
            ["node", "-e", program], capture_output=True, text=True, check=True
        ).stdout
    )
    for label, name in PAPER_PRESETS.items():
        with torch.device("meta"):
            model = build_model(name)
        side = configs[label]["img"]
        assert result["sizes"][label]["params"] == count_params(model), label
        macs = count_macs(model, (1, 3, side, side))["total"]
        assert result["sizes"][label]["macs"] == macs, label
    for (warmup, total, min_factor), script_factors in zip(
        settings, result["factors"], strict=True
    ):
        optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
        factor = warmup_cosine_schedule(
            optimizer, warmup, total, min_factor
        ).lr_lambdas[0]
        for step, value in enumerate(script_factors):
            assert math.isclose(value, factor(step), rel_tol=1e-12, abs_tol=1e-15)
    # The page's position embeddings: the sinusoidal ones are the package's (float32), and
    # its random draws are similar only to themselves, as the package's are.
    sine = position_similarity(position_table("sinusoidal", 49, 64), 17)
    assert np.allclose(result["similarity"]["sine"], sine.numpy(), atol=1e-5)
    random = np.array(result["similarity"]["random"])
    assert random[100] == pytest.approx(1.0)
    others = np.delete(random, 100)  # cosines of independent draws: std 1 / sqrt(768)
    assert abs(others.mean()) < 0.01 and others.std() == pytest.approx(
        768**-0.5, rel=0.15
    )


def test_schedule_explorer_checks_its_settings():
    data = schedule_explorer(100, 1000, 3e-4, 1e-5, 0.1, 37).data
    assert data["initial"] == {"warmup": 100, "total": 1000, "peak": 3e-4,
                               "final": 1e-5, "smoothing": 0.1}  # fmt: skip
    assert data["classes"] == 37
    with pytest.raises(ValueError):
        schedule_explorer(warmup_steps=2000, total_steps=1000)


def test_patch_explorer_describes_every_grids_positions():
    data = patch_explorer(torch.rand(3, 32, 32), (4, 8), dim=192).data
    assert data["size"] == 32 and data["patch_sizes"] == [4, 8] and data["dim"] == 192
    assert data["kinds"] == POSITION_KINDS  # the page makes each grid's tables itself
    assert data["image"].startswith("data:image/jpeg;base64,")  # a photograph: JPEG
    # A 224-pixel photograph and every grid's positions, in the script and a few kB
    photo = torch.from_numpy(skimage.data.chelsea()).permute(2, 0, 1).float() / 255
    photo = torch.nn.functional.interpolate(photo[None, :, :, 75:375], size=224)[0]
    assert len(patch_explorer(photo, (4, 8, 16)).html) < 50_000
    assert torch.equal(
        position_table("sinusoidal", 49, 64), sinusoidal_embedding(49, 64)[0]
    )
    learned = position_table("random", 49, 64, seed=3)
    assert torch.equal(learned, position_table("random", 49, 64, seed=3))
    assert learned.std().item() == pytest.approx(0.02, rel=0.1)  # the package's init
    similarity = position_similarity(learned, 5)
    assert (
        similarity[5] == pytest.approx(1.0) and similarity.abs().sort().values[-2] < 0.6
    )
    with pytest.raises(ValueError, match="Unknown kind"):
        position_table("learned", 4, 8)
    with pytest.raises(ValueError, match="do not divide"):
        patch_explorer(torch.rand(3, 32, 32), (5,))
    wide = torch.zeros(3, 32, 48)
    wide[:, :, 8:40] = 1  # the centred square is white, the sides black
    data = patch_explorer(wide, (8,)).data
    assert data["size"] == 32
    jpeg = base64.b64decode(data["image"].removeprefix("data:image/jpeg;base64,"))
    assert (
        np.asarray(Image.open(io.BytesIO(jpeg))).min() >= 250
    )  # white, as JPEG keeps it


def test_attention_explorer_stores_the_models_maps(vit):
    images = torch.rand(2, 3, 32, 32)
    data = attention_explorer(vit, images, class_names=["a", "b", "c"]).data
    maps = torch.stack(collect_attention(vit, images))  # (4, 2, 3, 17, 17)
    assert (data["grid"], data["layers"], data["heads"]) == (4, 4, 3)
    assert data["keys"] == 17  # 16 patches and the class token
    assert data["queries"] == [-1, *range(16)]  # all of a small grid fit the budget
    raw = _bytes(data["images"][1]["raw"], 4, 3, 17, 16)
    expected = _quantised(maps[:, 1, :, :, 1:])  # every query, the patch keys
    assert np.abs(raw.astype(int) - expected.astype(int)).max() <= 1
    # Each row's largest weight is stored, so bytes / 255 x it are the weights themselves.
    largest = np.array(data["images"][1]["raw_max"]).reshape(4, 3, 17, 1)
    weights = raw.astype(float) / 255 * largest
    assert np.abs(weights - maps[:, 1, :, :, 1:].numpy()).max() <= 0.5 / 255 + 1e-3
    rollout = _bytes(data["images"][1]["rollout"], 17, 16)
    rolled = attention_rollout(list(maps))[1, :, 1:]
    assert np.abs(rollout.astype(int) - _quantised(rolled).astype(int)).max() <= 1
    largest = np.array(data["images"][1]["rollout_max"])
    assert np.allclose(largest, rolled.amax(-1).numpy(), rtol=1e-3)
    assert data["images"][0]["pool"] is None
    assert data["images"][0]["label"].startswith("image 1 (predicted: ")
    assert data["images"][0]["label"][-2] in "abc"


def test_attention_explorer_subsamples_queries_and_keeps_seqpool():
    torch.manual_seed(0)
    cct = cct_7_3x1(num_classes=10)  # 16x16 tokens, no class token
    images = torch.rand(1, 3, 32, 32)
    data = attention_explorer(cct, images, max_bytes=30_000).data
    # 7 layers x 4 heads x 256 keys = 7168 bytes per query: 4 queries, a 2x2 subgrid
    assert data["queries"] == [3 * 16 + 3, 3 * 16 + 11, 11 * 16 + 3, 11 * 16 + 11]
    cct.eval()
    with torch.no_grad():
        weights = cct.pool_weights(images)
    pool = _bytes(data["images"][0]["pool"], 256).astype(float) / 255
    expected = (weights[0] / weights[0].max()).numpy()
    assert np.abs(pool - expected).max() <= 0.5 / 255 + 1e-6


def test_self_check_folds_answers_and_escapes():
    check = self_check([("Tokens of a <224> image?", 197, "196 patches + 1 class.")])
    page = check._repr_html_()
    assert page.count("<details") == 1 and "<summary>" in page
    assert "&lt;224&gt;" in page and "<b>197</b>" in page
    assert "Q1. Tokens" in repr(check) and "197" not in repr(check)
    with pytest.raises(ValueError):
        self_check([("Only a question", "", "")])
    with pytest.raises(ValueError):
        self_check([])


def test_attention_explorer_says_how_many_class_names_the_model_needs(vit):
    """One name for a 3-class model raised a bare IndexError."""
    with pytest.raises(ValueError, match="has 3 classes, so class_names needs 3 names"):
        attention_explorer(vit, torch.rand(2, 3, 32, 32), class_names=["a"])


def test_patch_explorer_refuses_an_image_in_0_to_255(vit):
    """An image of 0..255 values was clamped to white without a word."""
    image = torch.randint(0, 256, (3, 32, 32)).float()
    with pytest.raises(ValueError, match="from 0 to 255: divide a 0..255 image by 255"):
        patch_explorer(image, (8,))
