"""Degenerate hyper-parameters are refused when a model is built, naming the parameter
(before: ZeroDivisionError, "mat1 and mat2" at the first batch, or NaN from DropPath)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from going_modular.models import build_model, list_models
from going_modular.models.cct import ViTLite
from going_modular.models.cct_variants import CCT, CVT
from going_modular.models.layers import DropPath
from going_modular.models.registry import _REGISTRY, register_model
from going_modular.models.text_cct import TextCCT
from going_modular.models.tinyvgg import TinyVGG
from going_modular.models.vit import ViT
from going_modular.models.vitbn import ViTBN

SMALL_VIT = dict(
    img_size=32, patch_size=8, depth=1, dim=32, mlp_ratio=2.0, heads=2, num_classes=3
)
SMALL_CCT = dict(img_size=32, dim=32, depth=1, heads=2)
SMALL_VITBN = dict(img_size=28, patch_size=7, dim=16, depth=1, heads=2, head_dim=8)
SMALL_TEXT = dict(vocab_size=50, num_classes=2, seq_len=16, word_embedding_dim=8)


@pytest.mark.parametrize(
    ("changes", "name"),
    [
        ({"heads": 0}, "heads must be a positive integer"),
        ({"patch_size": 0}, "patch_size"),
        ({"img_size": -32}, "img_size"),
        ({"dim": -8}, "dim must be a positive integer"),
        ({"dim": 33}, "dim=33 is not divisible by heads=2"),
        ({"img_size": 30}, "not divisible by patch size"),
        ({"depth": 0}, "depth"),
        ({"mlp_ratio": 0}, "mlp_ratio must be a positive number"),
        ({"mlp_ratio": 0.01}, "mlp_ratio=0.01 gives an MLP of width"),
        ({"num_classes": 0}, "num_classes"),
        ({"in_channels": 0}, "in_channels"),
        ({"patch_size": 2.5}, "patch_size"),
        ({"attn_drop_rate": 1.0}, "attn_drop_rate"),
        ({"drop_rate": -0.1}, "drop_rate"),
        ({"pos_drop_rate": math.nan}, "pos_drop_rate"),
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
        ({"heads": 0}, "heads must be a positive integer"),
        ({"dim": 0}, "dim must be a positive integer"),
        ({"dim": 33}, "dim=33 is not divisible by heads=2"),
        ({"depth": 0}, "depth"),
        ({"num_classes": -1}, "num_classes"),
        ({"img_size": 0}, "img_size"),
        ({"img_size": (32, -32)}, "img_size"),
        ({"in_channels": 0}, "in_channels"),
        ({"mlp_ratio": 0}, "mlp_ratio"),
        ({"mlp_ratio": 0.01}, "mlp_ratio"),
        ({"drop_path_rate": 1.5}, "drop_path_rate"),
        ({"drop_rate": 1.0}, "drop_rate"),
        ({"attn_drop_rate": -0.5}, "attn_drop_rate"),
        ({"pos_drop_rate": 1.0}, "pos_drop_rate"),
        ({"pos_embed": "rotary"}, "pos_embed"),
        ({"pool": "max"}, "pool"),
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
        ({"heads": 0}, "heads"),
        ({"kernel_size": 0}, "kernel_size"),
        ({"pooling_stride": 0}, "pooling_stride"),
        ({"drop_path_rate": 1.0}, "drop_path_rate"),
    ],
)
def test_text_cct(changes, name):
    with pytest.raises(ValueError, match=name):
        TextCCT(**(SMALL_TEXT | changes))


@pytest.mark.parametrize(
    ("changes", "name"),
    [
        ({"heads": 0}, "heads"),
        ({"head_dim": 0}, "head_dim"),
        ({"patch_size": 0}, "patch_size"),
        ({"img_size": -28}, "img_size"),
        ({"depth": 0}, "depth"),
        ({"dim": -1}, "dim"),
        ({"mlp_ratio": 0}, "mlp_ratio"),
        ({"in_channels": 0}, "in_channels"),
        ({"num_classes": 0}, "num_classes"),
        ({"drop_rate": 1.0}, "drop_rate"),
        ({"attn_drop_rate": 1.0}, "attn_drop_rate"),
        ({"pos_drop_rate": 2.0}, "pos_drop_rate"),
    ],
)
def test_vitbn(changes, name):
    with pytest.raises(ValueError, match=name):
        ViTBN(**(SMALL_VITBN | changes))


@pytest.mark.parametrize(
    ("changes", "name"),
    [
        ({"hidden_units": 0}, "hidden_units"),
        ({"input_shape": -3}, "input_shape"),
        ({"output_shape": 0}, "output_shape"),
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
        ("vit_4_16", {"heads": 0}, "heads"),
        ("cct_2_3x2", {"drop_path_rate": 1.5}, "drop_path_rate"),
        ("vitbn", {"heads": 0}, "heads"),
        ("tinyvgg", {"hidden_units": 0}, "hidden_units"),
    ],
)
def test_registered_factories_pass_the_checks_on(name, kwargs, param):
    with pytest.raises(ValueError, match=param):
        build_model(name, **kwargs)


def test_numpy_integers_and_good_values_are_accepted():
    model = ViT(**(SMALL_VIT | {"heads": np.int64(2)}))
    assert model.num_patches == 16
    assert CCT(**SMALL_CCT).grid_size == (16, 16)


def test_factories_are_real_functions_registered_under_their_own_names():
    for name in list_models():
        factory = _REGISTRY[name]
        assert factory.__name__ == name, name
        assert "<locals>" not in factory.__qualname__, name
        assert factory.__doc__ and factory.__module__.startswith(
            ("going_modular.models.", "vitbook.models.")
        )
    with pytest.raises(ValueError, match="'vit_4_16' is registered twice"):

        @register_model
        def vit_4_16():
            pass
