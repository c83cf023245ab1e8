"""Tests for vitbook.book.attention_maps: shapes, known values and hand-computed cases."""

from __future__ import annotations

import math

import pytest
import torch

from going_modular.models import build_model
from vitbook.book.attention_maps import (
    attention_rollout,
    class_token_attention,
    mean_attention_distance,
    overlay,
    patch_distances,
    position_embedding_similarity,
    rollout_class_map,
    similarity_mosaic,
)


def random_maps(layers=3, batch=2, heads=4, grid=3, seed=0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    tokens = grid * grid + 1
    return [
        torch.randn(batch, heads, tokens, tokens, generator=generator).softmax(-1)
        for _ in range(layers)
    ]


def uniform_maps(layers=2, batch=1, heads=2, grid=3) -> list[torch.Tensor]:
    tokens = grid * grid + 1
    return [torch.full((batch, heads, tokens, tokens), 1 / tokens)] * layers


def test_class_token_attention_is_row_zero_on_the_grid():
    maps = random_maps()
    cls = class_token_attention(maps)
    assert cls.shape == (3, 2, 4, 3, 3)
    torch.testing.assert_close(cls[1, 0, 2].flatten(), maps[1][0, 2, 0, 1:])
    # the class token also attends to itself, so its patch weights sum to less than one
    assert torch.all(cls.sum(dim=(-1, -2)) < 1)


def test_rollout_of_one_layer_mixes_attention_with_the_identity():
    maps = random_maps(layers=1)
    expected = 0.5 * torch.eye(10) + 0.5 * maps[0].mean(dim=1)
    torch.testing.assert_close(attention_rollout(maps), expected)


def test_rollout_multiplies_layers_in_order_and_keeps_rows_stochastic():
    maps = random_maps(layers=3)
    mixed = [0.5 * torch.eye(10) + 0.5 * w.mean(dim=1) for w in maps]
    rollout = attention_rollout(maps)
    torch.testing.assert_close(rollout, mixed[2] @ mixed[1] @ mixed[0])
    torch.testing.assert_close(rollout.sum(-1), torch.ones(2, 10))
    assert rollout_class_map(maps).shape == (2, 3, 3)
    torch.testing.assert_close(rollout_class_map(maps)[1].flatten(), rollout[1, 0, 1:])


def test_rollout_rejects_a_residual_weight_of_one():
    with pytest.raises(ValueError, match="residual_weight"):
        attention_rollout(random_maps(), residual_weight=1.0)


def test_patch_distances_on_a_two_by_two_grid():
    d = patch_distances(grid=2, patch_size=4)
    side, diagonal = 4.0, 4 * math.sqrt(2)
    expected = torch.tensor(
        [
            [0, side, side, diagonal],
            [side, 0, diagonal, side],
            [side, diagonal, 0, side],
            [diagonal, side, side, 0],
        ]
    )
    torch.testing.assert_close(d, expected)


def test_uniform_attention_has_the_mean_pairwise_distance():
    # Uniform attention over the patches: every head attends at the grid's mean distance.
    dist = mean_attention_distance(uniform_maps(grid=3), patch_size=4)
    assert dist.shape == (2, 2)
    torch.testing.assert_close(dist, torch.full((2, 2), patch_distances(3, 4).mean()))


def test_attention_to_oneself_has_distance_zero_and_the_class_token_is_ignored():
    tokens = 10
    weights = torch.zeros(1, 1, tokens, tokens)
    weights[0, 0, :, 0] = 0.5  # half on the class token: left out and renormalised
    weights[0, 0, 1:, 1:] += 0.5 * torch.eye(tokens - 1)
    weights[0, 0, 0, 1:] = 0.5 / (tokens - 1)
    assert mean_attention_distance([weights], patch_size=4).item() == 0.0


def test_position_similarity_of_a_vit_has_ones_on_the_diagonal():
    model = build_model("vit_4_16", num_classes=3, img_size=16, patch_size=4)
    sim = position_embedding_similarity(model.pos_embed)
    assert sim.shape == (4, 4, 4, 4)
    for i in range(4):
        for j in range(4):
            assert sim[i, j, i, j].item() == pytest.approx(1.0, abs=1e-6)
    torch.testing.assert_close(sim, sim.permute(2, 3, 0, 1))
    mosaic = similarity_mosaic(sim, gap=1)
    assert mosaic.shape == (19, 19)
    assert math.isnan(mosaic[4, 0]) and mosaic[0, 0] == pytest.approx(1.0, abs=1e-6)


def test_maps_of_a_real_vit_work_end_to_end():
    model = build_model(
        "vit_4_16", num_classes=3, img_size=16, in_channels=1, patch_size=4
    )
    maps = model.get_attention_maps(torch.randn(2, 1, 16, 16))
    assert class_token_attention(maps).shape == (4, 2, 3, 4, 4)
    dist = mean_attention_distance(maps, patch_size=4)
    assert dist.shape == (4, 3)
    assert torch.all(dist > 0) and torch.all(dist <= patch_distances(4, 4).max())
    picture = overlay(torch.zeros(1, 16, 16), rollout_class_map(maps)[0])
    assert picture.shape == (16, 16) and picture.min() == 0.0
    assert picture.max() == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize(
    "bad, message",
    [
        ([], "no attention maps"),
        ([torch.ones(2, 10, 10)], "expected a"),
        ([torch.ones(1, 1, 9, 9) / 9], "square grid"),
    ],
)
def test_bad_input_gets_a_clear_error(bad, message):
    with pytest.raises(ValueError, match=message):
        mean_attention_distance(bad, patch_size=4)


def test_position_similarity_rejects_a_wrong_shape():
    with pytest.raises(ValueError, match=r"\(1, N \+ 1, D\)"):
        position_embedding_similarity(torch.zeros(10, 8))
