"""Multiply-accumulate (MAC) counts from PyTorch's own FLOP counter, split by kind of operation."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode


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
