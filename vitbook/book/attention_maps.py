"""What a trained ViT attends to: class-token maps, attention rollout, attention distance.

All functions take a ViT's per-layer attention tensors: a list with one
``(B, heads, N + 1, N + 1)`` tensor per block, token 0 being the class token and tokens
``1..N`` the patches in row-major order on a ``grid x grid`` lattice. They come from
``model.get_attention_maps(images)``, or from
:func:`going_modular.models.layers.record_attention` around any forward pass of a model built
from the package's layers (torchvision's weights load into its ViT with
``load_torchvision_weights``).

* :func:`class_token_attention`: row 0 of each map, how the class token attends to the
  patches (the paper's Figure 6 shows such maps, through rollout).
* :func:`attention_rollout`: Abnar & Zuidema (2020), "Quantifying Attention Flow in
  Transformers": average the heads, add the identity for the residual connection,
  renormalise the rows and multiply the layers' matrices.
* :func:`mean_attention_distance`: the attention-weighted distance in pixels between a
  query patch and the patches it attends to, per layer and head (the paper's Figure 7,
  right).
* :func:`position_embedding_similarity`: cosine similarity between the position embeddings
  of every pair of patches (the paper's Figure 7, centre).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F

__all__ = [
    "attention_rollout",
    "class_token_attention",
    "mean_attention_distance",
    "overlay",
    "patch_distances",
    "plot_attention_distance",
    "plot_position_similarity",
    "position_embedding_similarity",
    "rollout_class_map",
    "similarity_mosaic",
]


def _grid_size(num_patches: int) -> int:
    grid = math.isqrt(num_patches)
    if grid * grid != num_patches:
        raise ValueError(
            f"{num_patches} patch tokens do not form a square grid: these helpers expect "
            "square images (N = grid * grid patches plus one class token)."
        )
    return grid


def _check_maps(maps: Sequence[torch.Tensor]) -> None:
    if len(maps) == 0:
        raise ValueError(
            "Got no attention maps: pass model.get_attention_maps(images) (or the list "
            "that going_modular.models.layers.record_attention fills)."
        )
    for layer, weights in enumerate(maps):
        if weights.ndim != 4 or weights.shape[-1] != weights.shape[-2]:
            raise ValueError(
                f"Layer {layer}: expected a (B, heads, N + 1, N + 1) tensor, got shape "
                f"{tuple(weights.shape)}; use the output of ViT.get_attention_maps."
            )


def class_token_attention(maps: Sequence[torch.Tensor]) -> torch.Tensor:
    """``(layers, B, heads, grid, grid)``: how the class token attends to each patch."""
    _check_maps(maps)
    rows = torch.stack([weights[:, :, 0, 1:] for weights in maps])
    grid = _grid_size(rows.shape[-1])
    return rows.reshape(*rows.shape[:-1], grid, grid)


def attention_rollout(
    maps: Sequence[torch.Tensor], residual_weight: float = 0.5
) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema, 2020): ``(B, N + 1, N + 1)`` flow of attention.

    Per layer, ``A = residual_weight * I + (1 - residual_weight) * mean_heads(attention)``
    (the identity stands for the residual connection; rows still sum to one); then the
    rollout is ``A_L @ ... @ A_1``. Row 0, columns 1..N, is the class token's map.
    """
    _check_maps(maps)
    if not 0.0 <= residual_weight < 1.0:
        raise ValueError(f"residual_weight must be in [0, 1), got {residual_weight}.")
    tokens = maps[0].shape[-1]
    identity = torch.eye(tokens, dtype=maps[0].dtype, device=maps[0].device)
    rollout = identity.expand(maps[0].shape[0], -1, -1)
    for weights in maps:
        mixed = residual_weight * identity + (1 - residual_weight) * weights.mean(dim=1)
        rollout = mixed @ rollout
    return rollout


def rollout_class_map(maps: Sequence[torch.Tensor], **kwargs) -> torch.Tensor:
    """``(B, grid, grid)``: the class token's row of :func:`attention_rollout`."""
    row = attention_rollout(maps, **kwargs)[:, 0, 1:]
    grid = _grid_size(row.shape[-1])
    return row.reshape(-1, grid, grid)


def patch_distances(grid: int, patch_size: int) -> torch.Tensor:
    """``(N, N)`` Euclidean distances in pixels between the centres of a grid's patches."""
    rows, cols = torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij")
    centres = torch.stack([rows.flatten(), cols.flatten()], dim=1).float() * patch_size
    return torch.cdist(centres, centres)


def mean_attention_distance(
    maps: Sequence[torch.Tensor], patch_size: int
) -> torch.Tensor:
    """``(layers, heads)``: mean distance in pixels over which each head attends.

    For every query patch the attention over the *patches* (the class token left out and
    the remaining weights renormalised to sum to one) weights the distances to the key
    patches; the result is averaged over queries and images, as in the paper's Figure 7.
    """
    _check_maps(maps)
    grid = _grid_size(maps[0].shape[-1] - 1)
    distances = patch_distances(grid, patch_size).to(maps[0])
    per_layer = []
    for weights in maps:
        patches = weights[:, :, 1:, 1:]
        patches = patches / patches.sum(dim=-1, keepdim=True)
        per_layer.append((patches * distances).sum(dim=-1).mean(dim=(0, 2)))
    return torch.stack(per_layer)


def position_embedding_similarity(pos_embed: torch.Tensor) -> torch.Tensor:
    """``(grid, grid, grid, grid)``: cosine similarity of patch (i, j)'s position embedding
    with patch (k, l)'s, at ``[i, j, k, l]``.

    ``pos_embed`` is a ViT's ``(1, N + 1, D)`` parameter ``model.pos_embed``; row 0 (the
    class token's) is left out.
    """
    if pos_embed.ndim != 3 or pos_embed.shape[0] != 1:
        raise ValueError(
            "Expected the (1, N + 1, D) position embedding of a ViT, got shape "
            f"{tuple(pos_embed.shape)}."
        )
    patches = F.normalize(pos_embed[0, 1:].detach().float(), dim=-1)
    grid = _grid_size(patches.shape[0])
    return (patches @ patches.T).reshape(grid, grid, grid, grid)


def similarity_mosaic(similarity: torch.Tensor, gap: int = 1) -> np.ndarray:
    """Tile the ``grid x grid`` similarity maps into one picture, NaN-filled gaps between."""
    grid = similarity.shape[0]
    size = grid * grid + (grid - 1) * gap
    mosaic = np.full((size, size), np.nan)
    step = grid + gap
    for i in range(grid):
        for j in range(grid):
            tile = similarity[i, j].cpu().numpy()
            mosaic[i * step : i * step + grid, j * step : j * step + grid] = tile
    return mosaic


def plot_position_similarity(
    similarity: torch.Tensor, title: str | None = None, ax: plt.Axes | None = None
) -> plt.Axes:
    """The paper's Figure 7 (centre): one small map per patch, at that patch's place."""
    ax = ax or plt.subplots(figsize=(5.5, 5))[1]
    image = ax.imshow(similarity_mosaic(similarity), cmap="viridis", vmin=-1, vmax=1)
    ax.set(xticks=[], yticks=[], xlabel="input patch column", ylabel="input patch row")
    plt.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="cosine similarity")
    if title:
        ax.set_title(title, fontsize=10)
    return ax


def plot_attention_distance(
    distances: dict[str, torch.Tensor], image_size: int, ax: plt.Axes | None = None
) -> plt.Axes:
    """The paper's Figure 7 (right): one dot per head, layers along x, for each model."""
    ax = ax or plt.subplots(figsize=(6, 4))[1]
    markers = "os^D"
    for k, (name, dist) in enumerate(distances.items()):
        layers, heads = dist.shape
        offset = (k - (len(distances) - 1) / 2) * 0.15
        x = torch.arange(1, layers + 1).repeat_interleave(heads) + offset
        ax.scatter(x, dist.flatten(), marker=markers[k % 4], alpha=0.8, label=name)
    ax.set(
        xlabel="encoder layer",
        ylabel="mean attention distance (pixels)",
        xticks=range(1, layers + 1),
        ylim=(0, image_size / 1.5),
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9)
    return ax


def overlay(image: torch.Tensor, attention: torch.Tensor) -> np.ndarray:
    """A ``(grid, grid)`` map upsampled (bilinear) to the ``(H, W)`` image, scaled to [0, 1]."""
    height, width = image.shape[-2:]
    up = F.interpolate(
        attention[None, None].float(), size=(height, width), mode="bilinear"
    )[0, 0]
    up = up - up.min()
    return (up / (up.max() + 1e-12)).cpu().numpy()
