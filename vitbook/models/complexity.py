"""What a model costs: parameters (:func:`count_params`), multiply-accumulates from PyTorch's own
FLOP counter split by kind of operation (:func:`count_macs`), and FLOPs in fvcore's convention
(:func:`fvcore_flops`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

__all__ = ["count_macs", "count_params", "fvcore_flops"]


def count_params(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameters of ``model`` (only those with ``requires_grad`` if
    ``trainable_only``); buffers such as a fixed sine position table are not parameters."""
    return sum(
        p.numel() for p in model.parameters() if p.requires_grad or not trainable_only
    )


def _kind(op_name: str) -> str:
    if "conv" in op_name:
        return "conv"
    if op_name in ("mm", "addmm"):
        return "linear"
    if op_name in ("bmm", "baddbmm") or "attention" in op_name:
        return "attention"
    return "other"


def count_macs(
    model: nn.Module, inputs: torch.Tensor | Sequence[int]
) -> dict[str, int]:
    """MACs of one forward pass of ``model`` on ``inputs`` (a tensor, or a shape for zeros).

    Counted by ``torch.utils.flop_counter.FlopCounterMode`` (MACs = FLOPs / 2) and returned as
    ``{"conv", "linear", "attention", "other", "total"}``. "linear" is every ``mm``/``addmm``
    (all ``nn.Linear`` layers); "attention" is every batched matmul, i.e. the ``QK^T`` and
    ``AV`` products of self-attention (plus, in CVT/CCT, SeqPool's small weighted sum, N*D MACs).
    Element-wise work (softmax, norms, activations) is not counted, as usual.

    ``F.scaled_dot_product_attention`` runs with its math backend during the count, because the
    counter does not see inside the fused CPU kernel; the model runs in eval mode (restored
    afterwards) with autograd enabled, which also keeps ``nn.MultiheadAttention`` off its
    uncounted fast path. Use batch size 1 for per-image figures.
    """
    param = next(model.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    if not isinstance(inputs, torch.Tensor):
        inputs = torch.zeros(tuple(inputs), device=device)
    was_training = model.training
    model.eval()
    try:
        with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
            model(inputs)
    finally:
        model.train(was_training)
    macs = dict.fromkeys(("conv", "linear", "attention", "other"), 0)
    for op, flops in counter.get_flop_counts().get("Global", {}).items():
        macs[_kind(op.__name__ if hasattr(op, "__name__") else str(op))] += flops // 2
    macs["total"] = sum(macs.values())
    return macs


def _layer_norm_flops(
    input_shape: Sequence[int],
    normalized_shape: Sequence[int],
    weight: Sequence[int] | None = None,
    *args: object,
    **kwargs: object,
) -> int:
    """fvcore's rough LayerNorm estimate: 5 flops per element with an affine map, else 4."""
    return math.prod(input_shape) * (5 if weight is not None else 4)


def fvcore_flops(
    model: nn.Module, inputs: torch.Tensor | Sequence[int]
) -> dict[str, int]:
    """FLOPs of one forward pass in fvcore's convention, per module, from ``FlopCounterMode``.

    fvcore (``FlopCountAnalysis``, the tool behind many README FLOP tables) counts one
    multiply-add as one flop, includes batched matmuls (self-attention's ``QK^T`` and
    ``AV``), and estimates LayerNorm at 5 flops per element (4 without an affine map);
    element-wise work (softmax, GELU, additions) is not counted. PyTorch's counter counts
    two flops per multiply-add and no LayerNorm, so this halves its matmul and convolution
    counts and adds LayerNorm with fvcore's rule. Other norms and poolings, which fvcore
    also estimates, are not counted. The model runs as in :func:`count_macs` (eval mode,
    ``F.scaled_dot_product_attention`` on its counted math backend).

    Returns ``{"": total, "patch_embedding": ..., "encoder.0": ..., ...}``: every module
    that did any counted work, keyed by its name in ``model.named_modules()``.
    """
    param = next(model.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    if not isinstance(inputs, torch.Tensor):
        inputs = torch.zeros(tuple(inputs), device=device)
    layer_norm = torch.ops.aten.native_layer_norm
    counter = FlopCounterMode(
        display=False, custom_mapping={layer_norm: _layer_norm_flops}
    )
    was_training = model.training
    model.eval()
    try:
        with sdpa_kernel(SDPBackend.MATH), counter:
            model(inputs)
    finally:
        model.train(was_training)
    root = type(model).__name__
    flops = {}
    for name, ops in counter.get_flop_counts().items():
        if name != root and not name.startswith(root + "."):
            continue  # "Global" repeats the root's counts
        total = sum(f if op is layer_norm else f // 2 for op, f in ops.items())
        flops[name[len(root) + 1 :]] = total
    return flops
