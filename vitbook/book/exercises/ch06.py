"""Chapter 6's exercises: the warmup-and-cosine schedule by hand, the rule that spares
parameters from weight decay, and TinyVGG's multiply-accumulates counted by hand."""

from __future__ import annotations

import math

import torch
from torch import nn

from going_modular.models.registry import build_model
from vitbook.book.exercises import Exercise, Mistake
from vitbook.models.complexity import count_macs
from vitbook.training.optim import param_groups_weight_decay, warmup_cosine_schedule

__all__ = ["ex1", "ex2", "ex3"]

# The chapter's ViT for 28 x 28 grey images, smaller (2 layers): the same kinds of tensors.
_VIT = dict(
    img_size=28, in_channels=1, patch_size=7, dim=32, heads=2, mlp_ratio=2.0, depth=2
)

# Exercise 1 ------------------------------------------------------------------------------


def _schedule(t: int, warmup: int, total: int) -> float:
    if t < warmup:
        return (t + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * (t - warmup) / (total - warmup)))


def _schedule_from_zero(t: int, warmup: int, total: int) -> float:
    if t < warmup:
        return t / warmup
    return _schedule(t, warmup, total)


def _schedule_whole_run(t: int, warmup: int, total: int) -> float:
    if t < warmup:
        return (t + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * t / total))


def _package_factors(warmup: int, total: int) -> list[float]:
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    factor = warmup_cosine_schedule(optimizer, warmup, total).lr_lambdas[0]
    return [factor(t) for t in range(total)]


def _check_schedule(f) -> str:
    for warmup, total in ((10, 100), (3, 17)):
        package = _package_factors(warmup, total)
        for t, expected in enumerate(package):
            got = float(f(t, warmup, total))
            if abs(got - expected) > 1e-9:
                part = "warmup" if t < warmup else "cosine decay"
                if t < warmup:
                    why = (
                        "step t of the warmup uses (t + 1) / T_w, so step 0 already "
                        "takes a small step and step T_w - 1 reaches the peak"
                    )
                else:
                    why = (
                        "the cosine's progress p_t = (t - T_w) / (T - T_w) counts from "
                        "the end of the warmup, so the decay starts at its top, 1"
                    )
                raise Mistake(
                    f"with T_w = {warmup} and T = {total}, step {t} (in the {part}) "
                    f"gives {got:.4f}, the package {expected:.4f}: {why}."
                )
    return (
        "your f equals warmup_cosine_schedule at every step: the peak is at step "
        "T_w - 1, and the last step T - 1 still takes a tiny step."
    )


ex1 = Exercise(
    title="The schedule by hand",
    checker=_check_schedule,
    hint_text=(
        "Two cases. During the warmup (t < T_w) the factor grows linearly and reaches 1 "
        "at the last warmup step, t = T_w - 1. After it, p_t = (t - T_w) / (T - T_w) "
        "runs from 0 to 1, and the factor is (1 + cos(pi p_t)) / 2."
    ),
    solution_code="""
def f(t, warmup, total):
    if t < warmup:
        return (t + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * (t - warmup) / (total - warmup)))
""",
    explanation=(
        "The factor reaches 1 at step T_w - 1, the last warmup step, and is 1 again at "
        "t = T_w, where the cosine starts at its top. The last step, t = T - 1, still "
        "takes a tiny step: the schedule reaches exactly 0 only at t = T, a step that is "
        "never taken. Starting the warmup at t / T_w would waste step 0 on a learning "
        "rate of 0."
    ),
    reference=lambda: (_schedule,),
    mistakes=[
        (lambda: (_schedule_from_zero,), "(t + 1) / T_w"),
        (lambda: (_schedule_whole_run,), "counts from the end of the warmup"),
    ],
)

# Exercise 2 ------------------------------------------------------------------------------


def _spared(name: str, param: torch.Tensor) -> bool:
    return param.ndim <= 1


def _spared_biases_only(name: str, param: torch.Tensor) -> bool:
    return name.endswith(".bias")


def _spared_like_timm(name: str, param: torch.Tensor) -> bool:
    return param.ndim <= 1 or name in ("pos_embed", "cls_token")


def _check_spared(spared) -> str:
    torch.manual_seed(0)
    model = build_model("vit_4_16", num_classes=10, **_VIT)
    _, no_decay = param_groups_weight_decay(model, 0.1)
    package = {id(p) for p in no_decay["params"]}
    norms = {
        f"{module_name}.{param_name}"
        for module_name, module in model.named_modules()
        if isinstance(module, nn.LayerNorm)
        for param_name, _ in module.named_parameters(recurse=False)
    }
    for name, param in model.named_parameters():
        yours, theirs = bool(spared(name, param)), id(param) in package
        if yours == theirs:
            continue
        if theirs and name in norms:
            raise Mistake(
                f"{name} (shape {tuple(param.shape)}) is a LayerNorm scale or shift: the "
                "package spares it too, since it is a 1-D tensor, not only the biases."
            )
        if theirs:
            raise Mistake(f"the package spares {name} (a 1-D tensor); yours decays it.")
        if name in ("pos_embed", "cls_token"):
            raise Mistake(
                f"{name} has shape {tuple(param.shape)}, a 3-D tensor: the package's rule "
                "decays it (timm's optimizer factory spares it, by name; the package does "
                "not)."
            )
        raise Mistake(
            f"your rule spares {name} (shape {tuple(param.shape)}), which the package "
            "decays: only 1-D tensors escape."
        )
    share = sum(p.numel() for p in no_decay["params"]) / sum(
        p.numel() for p in model.parameters()
    )
    return (
        f"your rule picks exactly the package's {len(no_decay['params'])} tensors in this "
        f"2-layer ViT ({share:.1%} of its parameters): every bias and every LayerNorm "
        "scale and shift."
    )


ex2 = Exercise(
    title="Who escapes weight decay?",
    checker=_check_spared,
    hint_text=(
        "Look at the shapes: print name and param.shape for model.named_parameters(). "
        "Which tensors are 1-D, and which are the class token and position embedding?"
    ),
    solution_code="""
def spared(name, param):
    return param.ndim <= 1  # biases, LayerNorm scales and shifts


model = make_model("ViT")
print([name for name, p in model.named_parameters() if spared(name, p)][:4])
""",
    explanation=(
        "param_groups_weight_decay puts every 1-D tensor in the group without decay: "
        "in this ViT, exactly the biases and the LayerNorm scales and shifts, a few "
        "percent of the parameters. They set the scale of every LayerNorm's output, and "
        "decaying them pulls those scales towards zero. The class token and the position "
        "embedding are 3-D tensors of shape (1, 1, D) and (1, N + 1, D), so the rule "
        "decays them; timm spares them by name as well (its VisionTransformer's "
        "no_weight_decay())."
    ),
    reference=lambda: (_spared,),
    mistakes=[
        (lambda: (_spared_biases_only,), "LayerNorm scale or shift"),
        (lambda: (_spared_like_timm,), "3-D tensor"),
    ],
)

# Exercise 3 ------------------------------------------------------------------------------


def _tinyvgg_macs(hidden: int) -> int:
    def conv(size, c_in, c_out):
        return size * size * c_out * c_in * 9

    return (
        conv(28, 1, hidden)
        + conv(28, hidden, hidden)
        + 2 * conv(14, hidden, hidden)
        + hidden * 7 * 7 * 10
    )


def _tinyvgg_macs_no_kernel(hidden: int) -> int:
    return (
        28 * 28 * hidden
        + 28 * 28 * hidden * hidden
        + 2 * 14 * 14 * hidden * hidden
        + hidden * 7 * 7 * 10
    )


def _tinyvgg_macs_no_pooling(hidden: int) -> int:
    return 9 * 28 * 28 * (hidden + 3 * hidden * hidden) + hidden * 28 * 28 * 10


def _check_tinyvgg_macs(tinyvgg_macs) -> str:
    for hidden in (16, 8):
        model = build_model(
            "tinyvgg", num_classes=10, img_size=28, in_channels=1, hidden_units=hidden
        )
        counted = count_macs(model, (1, 1, 28, 28))
        yours = int(tinyvgg_macs(hidden))
        if yours == counted["total"]:
            continue
        if (
            yours * 9 - 9 * hidden * 7 * 7 * 10 + hidden * 7 * 7 * 10
            == counted["total"]
        ):
            raise Mistake(
                f"with {hidden} channels you count {yours:,} MACs, count_macs "
                f"{counted['total']:,}: each output of a 3 x 3 convolution takes 9 "
                "multiply-accumulates per input channel, not 1."
            )
        raise Mistake(
            f"with {hidden} channels you count {yours:,} MACs, count_macs "
            f"{counted['total']:,}: each block ends with a 2 x 2 max-pool, so the second "
            "block runs on 14 x 14 pixels and the head sees 7 x 7."
        )
    return "your count equals count_macs for 16 and for 8 channels."


ex3 = Exercise(
    title="Counting the CNN's MACs by hand",
    checker=_check_tinyvgg_macs,
    hint_text=(
        "A 3 x 3 convolution with padding 1 keeps the image size; each block's max-pool "
        "halves it (28 -> 14 -> 7). Four convolutions: 1 -> hidden and hidden -> hidden "
        "at 28 x 28, then hidden -> hidden twice at 14 x 14; the head maps hidden * 7 * 7 "
        "numbers to 10 classes."
    ),
    solution_code="""
def conv_macs(size, c_in, c_out):
    return size * size * c_out * c_in * 9


def tinyvgg_macs(hidden):
    return (
        conv_macs(28, 1, hidden)  # block 1, conv 1
        + conv_macs(28, hidden, hidden)  # block 1, conv 2: the largest
        + 2 * conv_macs(14, hidden, hidden)  # block 2, after the first max-pool
        + hidden * 7 * 7 * 10  # the head, after the second max-pool
    )


print(f"{tinyvgg_macs(16):,}")
""",
    explanation=(
        "The second convolution of the first block does most of the work, more than half "
        "of the total: it runs at full resolution with hidden channels in and out. The "
        "first convolution has a single input channel, the second block runs on a quarter "
        "of the pixels, and the head is a small linear layer."
    ),
    reference=lambda: (_tinyvgg_macs,),
    mistakes=[
        (lambda: (_tinyvgg_macs_no_kernel,), "9 multiply-accumulates"),
        (lambda: (_tinyvgg_macs_no_pooling,), "max-pool"),
    ],
)
