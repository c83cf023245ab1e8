"""Degenerate hyper-parameters are refused when a model is built, naming the parameter
(before: ZeroDivisionError, "mat1 and mat2" at the first batch, or NaN from DropPath)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from going_modular.models import build_model
from going_modular.models.cct import CCT, CVT, DropPath, TextCCT, ViTLite
from going_modular.models.tinyvgg import TinyVGG
from going_modular.models.vit import ViT
from going_modular.models.vitbn import ViTBN

SMALL_VIT = dict(
    img_size=32,
    patch_size=8,
    num_transformer_layers=1,
    embedding_dim=32,
    mlp_size=64,
    num_heads=2,
    num_classes=3,
)
SMALL_CCT = dict(img_size=32, embedding_dim=32, num_layers=1, num_heads=2)
SMALL_VITBN = dict(image_size=28, patch_size=7, dim=16, depth=1, heads=2, dim_head=8)
SMALL_TEXT = dict(vocab_size=50, num_classes=2, seq_len=16, word_embedding_dim=8)


@pytest.mark.parametrize(
    ("changes", "name"),
    [
        ({"num_heads": 0}, "num_heads"),
        ({"patch_size": 0}, "patch_size"),
        ({"img_size": -32}, "img_size"),
        ({"embedding_dim": -8}, "embedding_dim"),
        ({"embedding_dim": 33}, "not divisible by num_heads"),
        ({"img_size": 30}, "not divisible by patch size"),
        ({"num_transformer_layers": 0}, "num_transformer_layers"),
        ({"mlp_size": 0}, "mlp_size"),
        ({"num_classes": 0}, "num_classes"),
        ({"in_channels": 0}, "in_channels"),
        ({"patch_size": 2.5}, "patch_size"),
        ({"attn_dropout": 1.0}, "attn_dropout"),
        ({"mlp_dropout": -0.1}, "mlp_dropout"),
        ({"embedding_dropout": math.nan}, "embedding_dropout"),
        ({"layer_norm_eps": 0}, "layer_norm_eps"),
    ],
)
def test_vit(changes, name):
    with pytest.raises(ValueError, match=name):
        ViT(**(SMALL_VIT | changes))


@pytest.mark.parametrize("cls", [CCT, ViTLite, CVT])
@pytest.mark.parametrize(
    ("changes", "name"),
    [
        ({"num_heads": 0}, "num_heads"),
        ({"embedding_dim": 0}, "embedding_dim"),
        ({"embedding_dim": 33}, "not divisible by num_heads"),
        ({"num_layers": 0}, "num_layers"),
        ({"num_classes": -1}, "num_classes"),
        ({"img_size": 0}, "img_size"),
        ({"img_size": (32, -32)}, "img_size"),
        ({"in_channels": 0}, "in_channels"),
        ({"mlp_ratio": 0}, "mlp_ratio"),
        ({"mlp_ratio": 0.01}, "mlp_ratio"),
        ({"stochastic_depth": 1.5}, "stochastic_depth"),
        ({"dropout": 1.0}, "dropout"),
        ({"attention_dropout": -0.5}, "attention_dropout"),
    ],
)
def test_compact_transformers(cls, changes, name):
    with pytest.raises(ValueError, match=name):
        cls(**(SMALL_CCT | changes))


@pytest.mark.parametrize(
    ("cls", "changes", "name"),
    [
        (CCT, {"kernel_size": 0}, "kernel_size"),
        (CCT, {"n_conv_layers": 0}, "n_conv_layers"),
        (CCT, {"stride": 0}, "stride"),
        (CCT, {"padding": -1}, "padding must be an integer >= 0"),
        (ViTLite, {"patch_size": 0}, "patch_size"),
        (CVT, {"patch_size": -4}, "patch_size"),
        (CVT, {"patch_size": 5}, "not divisible by patch size"),
    ],
)
def test_tokenizers(cls, changes, name):
    with pytest.raises(ValueError, match=name):
        cls(**(SMALL_CCT | changes))


@pytest.mark.parametrize(
    ("changes", "name"),
    [
        ({"vocab_size": 0}, "vocab_size"),
        ({"num_classes": 0}, "num_classes"),
        ({"seq_len": 0}, "seq_len"),
        ({"seq_len": 1, "kernel_size": 4, "padding": 0}, "seq_len=1 leaves no tokens"),
        ({"word_embedding_dim": -3}, "word_embedding_dim"),
        ({"num_heads": 0}, "num_heads"),
        ({"kernel_size": 0}, "kernel_size"),
        ({"pooling_stride": 0}, "pooling_stride"),
        ({"stochastic_depth": 1.0}, "stochastic_depth"),
    ],
)
def test_text_cct(changes, name):
    with pytest.raises(ValueError, match=name):
        TextCCT(**(SMALL_TEXT | changes))


@pytest.mark.parametrize(
    ("changes", "name"),
    [
        ({"heads": 0}, "heads"),
        ({"dim_head": 0}, "dim_head"),
        ({"patch_size": 0}, "patch_size"),
        ({"image_size": -28}, "image_size"),
        ({"depth": 0}, "depth"),
        ({"dim": -1}, "dim"),
        ({"mlp_dim": 0}, "mlp_dim"),
        ({"channels": 0}, "channels"),
        ({"num_classes": 0}, "num_classes"),
        ({"dropout": 1.0}, "dropout"),
        ({"emb_dropout": 2.0}, "emb_dropout"),
    ],
)
def test_vitbn(changes, name):
    with pytest.raises(ValueError, match=name):
        ViTBN(**(SMALL_VITBN | changes))


@pytest.mark.parametrize(
    ("changes", "name"),
    [
        ({"hidden_units": 0}, "hidden_units"),
        ({"in_channels": -3}, "in_channels"),
        ({"num_classes": 0}, "num_classes"),
        ({"img_size": 2}, "at least 4x4"),
    ],
)
def test_tinyvgg(changes, name):
    with pytest.raises(ValueError, match=name):
        TinyVGG(**({"img_size": 16} | changes))


def test_drop_path_of_one_is_refused():
    with pytest.raises(ValueError, match="p must be at least 0 and below 1"):
        DropPath(1.0)


@pytest.mark.parametrize(
    ("name", "kwargs", "param"),
    [
        ("vit_tiny", {"num_heads": 0}, "num_heads"),
        ("cct_2_3x2", {"stochastic_depth": 1.5}, "stochastic_depth"),
        ("vitbn", {"heads": 0}, "heads"),
        ("tinyvgg", {"hidden_units": 0}, "hidden_units"),
    ],
)
def test_registered_factories_pass_the_checks_on(name, kwargs, param):
    with pytest.raises(ValueError, match=param):
        build_model(name, **kwargs)


def test_numpy_integers_and_good_values_are_accepted():
    model = ViT(**(SMALL_VIT | {"num_heads": np.int64(2)}))
    assert model.num_patches == 16
    assert CCT(**SMALL_CCT).grid_size == (16, 16)
