"""Chapter 12's exercises: GroupNorm's statistics, the parameters of a ViT without a norm
in its feed-forward blocks, BatchNorm folded into the Linear before it, and what the
early-return bug leaves untrained."""

from __future__ import annotations

import torch
from torch import nn

from going_modular.models.vitbn import ViTBN
from vitbook.book.exercises import Exercise, Mistake, reference_source
from vitbook.models.complexity import count_params

__all__ = ["ex1", "ex2", "ex3", "ex4"]


# Exercise 1 ------------------------------------------------------------------------------


def _group_norm(z: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    mu = z.mean(dim=(1, 2), keepdim=True)
    var = z.var(dim=(1, 2), keepdim=True, unbiased=False)
    return (z - mu) / torch.sqrt(var + eps)


def _check_group_norm(token_group_norm) -> str:
    torch.manual_seed(0)
    z = torch.randn(4, 5, 6) * torch.arange(1.0, 7.0) + torch.arange(4.0)[:, None, None]
    out = token_group_norm(z, 1e-5)
    if not isinstance(out, torch.Tensor) or out.shape != z.shape:
        raise Mistake(f"return a tensor of the input's shape {tuple(z.shape)}.")
    expected = nn.GroupNorm(1, 6, affine=False)(z.transpose(1, 2)).transpose(1, 2)
    if torch.allclose(out, expected, atol=1e-4):
        return "one mean and variance per image, over its tokens and features: GroupNorm(1, C)."
    if torch.allclose(out, nn.functional.layer_norm(z, (6,)), atol=1e-4):
        raise Mistake(
            "that is LayerNorm: one statistic per token, over its features only. "
            "GroupNorm(1, C) pools all the tokens of an image as well."
        )
    per_feature = (z - z.mean(dim=(0, 1))) / torch.sqrt(
        z.var(dim=(0, 1), unbiased=False) + 1e-5
    )
    if torch.allclose(out, per_feature, atol=1e-4):
        raise Mistake(
            "that is BatchNorm in training: one statistic per feature, over the batch. "
            "GroupNorm never mixes images: average over dims 1 and 2."
        )
    unbiased = (z - z.mean(dim=(1, 2), keepdim=True)) / torch.sqrt(
        z.var(dim=(1, 2), keepdim=True) + 1e-5
    )
    if torch.allclose(out, unbiased, atol=1e-4):
        raise Mistake("use the biased variance (unbiased=False), as norm layers do.")
    raise Mistake("the output differs from nn.GroupNorm(1, C) on the (N, C, T) layout.")


ex1 = Exercise(
    title="GroupNorm instead of BatchNorm",
    checker=_check_group_norm,
    hint_text=(
        "z has shape (images, tokens, features). GroupNorm(1, C) takes one mean and one "
        "variance per image: average over dims 1 and 2, with keepdim=True."
    ),
    solution_code="""
def token_group_norm(z, eps=1e-5):
    mu = z.mean(dim=(1, 2), keepdim=True)
    var = z.var(dim=(1, 2), keepdim=True, unbiased=False)
    return (z - mu) / torch.sqrt(var + eps)
""",
    explanation=(
        "GroupNorm with one group averages over every channel and token of one image: the "
        "statistics are per image, like LayerNorm's but pooled over the tokens. Nothing is "
        "shared across the batch, so an image's output does not depend on the other images "
        "in its batch, in training as in evaluation; BatchNorm in training does depend on "
        "them."
    ),
    reference=lambda: (_group_norm,),
    mistakes=[
        (
            lambda: (
                lambda z, eps: nn.functional.layer_norm(z, z.shape[-1:], eps=eps),
            ),
            "that is LayerNorm",
        ),
        (
            lambda: (
                lambda z, eps: (
                    (z - z.mean(dim=(0, 1)))
                    / torch.sqrt(z.var(dim=(0, 1), unbiased=False) + eps)
                ),
            ),
            "that is BatchNorm",
        ),
    ],
)


# Exercise 2 ------------------------------------------------------------------------------

_VIT, _DIM, _DEPTH = 902_380, 64, 6  # the package's ViT (qkv biases included)


def _check_no_ffn_norm(count) -> str:
    expected = _VIT - _DEPTH * 2 * _DIM
    if count == expected:
        return f"{expected:,}: six LayerNorms of 2D = 128 parameters fewer."
    if count == _VIT - _DEPTH * _DIM:
        raise Mistake(
            "a LayerNorm over D features has two vectors, gamma and beta: 2D parameters."
        )
    if count == _VIT - _DEPTH * 2 * 128:
        raise Mistake(
            "the ViT's feed-forward norm is the LayerNorm before the MLP, over D = 64 "
            "features; 2M = 256 is the BatchNorm models' norm inside the MLP."
        )
    if count == _VIT - 2 * _DIM:
        raise Mistake("there is one feed-forward norm in each of the six blocks.")
    raise Mistake(
        f"{count!r} is not the count: start from the ViT's 902,380 and remove the norms "
        "of the feed-forward blocks."
    )


ex2 = Exercise(
    title="No norm at all in the feed-forward block",
    checker=_check_no_ffn_norm,
    hint_text=(
        "Start from the ViT's total in the table. Which norm does each block lose, over "
        "how many features, with how many parameters per feature?"
    ),
    solution_code="""
answer = 902_380 - 6 * 2 * 64  # six LayerNorms of 2D parameters fewer

class ViTNoFFNorm(ViTLN):
    pre_mlp_norm = False  # no LayerNorm before the MLP; mlp_norm_layer stays None

assert count_params(ViTNoFFNorm(**article)) == answer
""",
    explanation=(
        "Yao et al. (2021) traced the crashes of a ViT whose LayerNorms were all replaced by "
        "BatchNorm to feed-forward blocks without any normalisation. Such a model is the ViT "
        "minus the six LayerNorms before its MLPs, each with a gamma and a beta of D = 64 "
        "features: 902,380 - 6 x 128 = 901,612 parameters."
    ),
    reference=lambda: (_VIT - _DEPTH * 2 * _DIM,),
    mistakes=[
        (lambda: (_VIT - _DEPTH * _DIM,), "two vectors"),
        (lambda: (_VIT - _DEPTH * 2 * 128,), "over D = 64"),
    ],
)


# Exercise 3 ------------------------------------------------------------------------------


def fold(linear: nn.Linear, bn: nn.BatchNorm1d) -> nn.Linear:
    a = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    folded = nn.Linear(linear.in_features, linear.out_features)
    with torch.no_grad():
        folded.weight.copy_(a[:, None] * linear.weight)
        folded.bias.copy_(a * (linear.bias - bn.running_mean) + bn.bias)
    return folded


def _pair(seed: int = 0) -> tuple[nn.Linear, nn.BatchNorm1d]:
    torch.manual_seed(seed)
    linear, bn = nn.Linear(5, 5), nn.BatchNorm1d(5).eval()
    with torch.no_grad():
        bn.weight.uniform_(0.5, 2.0)
        bn.bias.normal_()
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 3.0)
    return linear, bn


def _check_fold(fold) -> str:
    linear, bn = _pair()
    folded = fold(linear, bn)
    if not isinstance(folded, nn.Linear):
        raise Mistake("return one nn.Linear with the folded weight and bias.")
    z = torch.randn(8, 5)
    with torch.no_grad():
        want, got = bn(linear(z)), folded(z)
    if torch.allclose(got, want, atol=1e-5):
        return "the folded Linear equals Linear then BatchNorm in evaluation."
    a = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    with torch.no_grad():
        if torch.allclose(folded.weight, a[:, None] * linear.weight, atol=1e-6):
            raise Mistake(
                "the weight is right, the bias is not: b' = a * (b - running_mean) + beta."
            )
        if torch.allclose(folded.weight, linear.weight * a[None, :], atol=1e-6):
            raise Mistake(
                "scale the rows of W (one per output feature, a[:, None]), not its "
                "columns."
            )
    raise Mistake(
        "the outputs differ: W' = a[:, None] * W with a = gamma / sqrt(running_var + eps)."
    )


def _fold_without_mean(linear, bn):
    folded = fold(linear, bn)
    with torch.no_grad():
        a = bn.weight / torch.sqrt(bn.running_var + bn.eps)
        folded.bias.copy_(a * linear.bias + bn.bias)
    return folded


def _fold_columns(linear, bn):
    a = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    folded = nn.Linear(linear.in_features, linear.out_features)
    with torch.no_grad():
        folded.weight.copy_(a[None, :] * linear.weight)
        folded.bias.copy_(a * (linear.bias - bn.running_mean) + bn.bias)
    return folded


ex3 = Exercise(
    title="BatchNorm is free at inference",
    checker=_check_fold,
    hint_text=(
        "In evaluation BatchNorm computes a * (y - running_mean) + beta with "
        "a = gamma / sqrt(running_var + eps), and y = W x + b. Expand and collect the "
        "terms in x and the constant ones."
    ),
    solution_code=reference_source(fold),
    explanation=(
        "In evaluation BatchNorm uses its running estimates, so it is a fixed per-feature "
        "affine map. Composed with the Linear before it, it is one Linear: each output "
        "feature's row of W is scaled by a, and the bias becomes a * (b - running_mean) + "
        "beta. A LayerNorm cannot be folded: its statistics change with every token."
    ),
    reference=lambda: (fold,),
    mistakes=[
        (lambda: (_fold_without_mean,), "the bias is not"),
        (lambda: (_fold_columns,), "not its columns"),
    ],
)


# Exercise 4 ------------------------------------------------------------------------------


def _idle_share() -> float:
    model = ViTBN()
    idle = sum(count_params(b) for b in model.transformer.blocks[1:])
    return idle / count_params(model)


def _check_idle_share(share) -> str:
    expected = _idle_share()
    share = float(share)
    if abs(share - expected) < 5e-4:
        return f"{expected:.2%} of the parameters never train."
    if abs(share - 5 / 6) < 5e-4:
        raise Mistake(
            "5/6 counts blocks, not parameters: the patch embedding, class token, "
            "positions, final norm and head train too. Count parameters."
        )
    if abs(share - (1 - expected)) < 5e-4:
        raise Mistake("that is the share that trains; the question asks for the rest.")
    raise Mistake(
        "not the share: divide the parameters of blocks 2 to 6 by the model's total."
    )


ex4 = Exercise(
    title="What the bug leaves untrained",
    checker=_check_idle_share,
    hint_text=(
        "Only the first block runs, so only it receives gradients. Sum count_params over "
        "model.transformer.blocks[1:] and divide by count_params(model)."
    ),
    solution_code="""
model = with_early_return(ViTBN(**article))
loss = nn.functional.cross_entropy(model(x_train[:16]), y_train[:16])
loss.backward()
trained = [all(p.grad is not None for p in b.parameters()) for b in model.transformer.blocks]
print(trained)  # [True, False, False, False, False, False]
idle = sum(count_params(b) for b, t in zip(model.transformer.blocks, trained) if not t)
answer = idle / count_params(model)
""",
    explanation=(
        "The early return cuts blocks 2 to 6 out of the forward pass, so no gradient can "
        "reach them, with pool='cls' or 'mean' alike: 748,160 of ViTBN's 903,148 "
        "parameters (about 83%) keep their initial values, although they count in the "
        "model's total."
    ),
    reference=lambda: (_idle_share(),),
    mistakes=[
        (lambda: (5 / 6,), "counts blocks"),
        (lambda: (1 - _idle_share(),), "share that trains"),
    ],
)
