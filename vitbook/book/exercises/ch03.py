"""Chapter 3's exercises: why the logits are divided by sqrt(d_k), the parameters of
multi-head attention, a causal mask, and attention's indifference to token order."""

from __future__ import annotations

import math

import torch
from torch import nn

from going_modular.models.layers import Attention as PackageAttention
from vitbook.book.built.ch03 import Attention
from vitbook.book.exercises import (
    Exercise,
    Mistake,
    check_letter,
    reference_source,
)

__all__ = ["ex1", "ex2", "ex3", "ex4"]


def _close(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    return torch.allclose(actual, expected, rtol=1e-4, atol=1e-4)


# Exercise 1: why sqrt(d_k)?

HEAD_SIZES = (4, 16, 64, 256, 1024)


def scaled_logits(q, k):
    # q, k: (..., N, d_k) -> the logits q k^T / sqrt(d_k): (..., N, N)
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def _peak(logits: torch.Tensor) -> float:
    """A softmax row's largest weight, averaged over the rows."""
    return logits.softmax(-1).amax(-1).mean().item()


def _check_scaled_logits(function, answer) -> str:
    generator = torch.Generator().manual_seed(0)
    found = []
    for d_k in HEAD_SIZES:
        q, k = (torch.randn(4, 197, d_k, generator=generator) for _ in range(2))
        logits, raw = function(q, k), q @ k.transpose(-2, -1)
        if not isinstance(logits, torch.Tensor) or logits.shape != raw.shape:
            raise Mistake(
                f"for q and k of shape {tuple(q.shape)} return the logits, a tensor of "
                f"shape {tuple(raw.shape)}: one row of scores per query."
            )
        if not _close(logits, raw / math.sqrt(d_k)):
            raise Mistake(_what_is_wrong(logits, raw, d_k))
        found.append((d_k, logits.var().item(), _peak(logits), _peak(raw)))
    check_letter(
        answer,
        "b",
        {
            "a": "Nearly uniform is what too large a divisor gives. Unscaled, the "
            "logits have variance d_k, so they spread ever wider as d_k grows.",
            "c": "A softmax ignores a constant added to its inputs, not a factor: "
            "multiplying the logits by c > 1 sharpens it, c < 1 flattens it.",
        },
    )
    (_, var_last, peak_last, raw_last) = found[-1]
    return (
        f"the variance of your logits stays near 1 (between "
        f"{min(f[1] for f in found):.2f} and {max(f[1] for f in found):.2f}) for d_k "
        f"from {HEAD_SIZES[0]} to {HEAD_SIZES[-1]}, where the unscaled q k^T has "
        f"variance d_k. A row's largest softmax weight averages {found[2][2]:.3f} scaled "
        f"and {found[2][3]:.3f} unscaled at d_k = 64, {peak_last:.3f} and {raw_last:.3f} "
        f"at d_k = {HEAD_SIZES[-1]} (uniform: {1 / 197:.3f})."
    )


def _what_is_wrong(logits: torch.Tensor, raw: torch.Tensor, d_k: int) -> str:
    """Words for the typical wrong logits at head size ``d_k``."""
    if _close(logits, raw):
        return (
            "these are the unscaled logits q k^T: their variance is d_k, so the softmax "
            "gets ever more peaked as heads get wider. Divide by sqrt(d_k)."
        )
    if _close(logits, raw / d_k):
        return (
            "you divided by d_k, not sqrt(d_k): the variance falls to 1/d_k and the "
            "softmax flattens toward uniform."
        )
    if _close(logits, raw / math.sqrt(raw.shape[-1])):
        return (
            "you divided by the square root of the number of tokens (q.shape[-2]); d_k "
            "is the size of a query, the last dimension, q.shape[-1]."
        )
    if _close(logits, (raw / math.sqrt(d_k)).transpose(-2, -1)):
        return (
            "your logits are transposed: row i must hold query i's scores against every "
            "key, q @ k.transpose(-2, -1)."
        )
    return (
        f"at d_k = {d_k} your logits differ from q k^T / sqrt(d_k) by up to "
        f"{(logits - raw / math.sqrt(d_k)).abs().max():.3g}."
    )


ex1 = Exercise(
    title="Why sqrt(d_k)?",
    checker=_check_scaled_logits,
    hint_text=(
        "The queries have shape (..., N, d_k): d_k is q.shape[-1], and the scores of "
        "every query against every key are q @ k.transpose(-2, -1). For the question, "
        "think of what a softmax does with inputs that spread over a range of 30 or more."
    ),
    solution_code=reference_source(scaled_logits, "b"),
    explanation=(
        "A dot product of two vectors with d_k independent entries of mean 0 and "
        "variance 1 is a sum of d_k products of variance 1, so its variance is d_k. "
        "Unscaled, the logits of a 64-wide head spread over about +-8 and those of a "
        "1024-wide head over about +-32: the largest logit of a row dominates the "
        "softmax, which becomes nearly one-hot, and its gradient with respect to the "
        "other logits nearly vanishes. Dividing by sqrt(d_k) brings the variance back to "
        "1 for every head size, so the softmax behaves the same whatever d_k."
    ),
    reference=lambda: (scaled_logits, "b"),
    mistakes=[
        (lambda: (lambda q, k: q @ k.transpose(-2, -1), "b"), "unscaled logits"),
        (
            lambda: (lambda q, k: q @ k.transpose(-2, -1) / q.shape[-1], "b"),
            "not sqrt(d_k)",
        ),
        (
            lambda: (lambda q, k: q @ k.transpose(-2, -1) / q.shape[-2] ** 0.5, "b"),
            "number of tokens",
        ),
        (lambda: (scaled_logits, "a"), "Nearly uniform"),
        (lambda: (scaled_logits, "c"), "not a factor"),
    ],
)


# Exercise 2: count the parameters by hand


def attention_params(dim, heads):
    # qkv: a (3 dim, dim) weight and 3 dim biases; proj: (dim, dim) and dim biases
    return 4 * dim**2 + 4 * dim


def _count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _check_attention_params(function) -> str:
    sizes = [(8, 1), (8, 2), (8, 4), (64, 1), (64, 8), (768, 12), (768, 16)]
    counted = {(dim, heads): _count(Attention(dim, heads)) for dim, heads in sizes}
    given = {size: function(*size) for size in sizes}
    for dim in {dim for dim, _ in sizes}:
        by_heads = {given[size] for size in sizes if size[0] == dim}
        if len(by_heads) > 1:
            raise Mistake(
                f"your count changes with the number of heads (dim = {dim}: "
                f"{sorted(by_heads)}). The heads only split the 3 * dim outputs of qkv "
                "among them: how many there are does not depend on it."
            )
    for (dim, heads), count in counted.items():
        if given[dim, heads] == 4 * dim**2:
            raise Mistake(
                "you left out the biases: qkv has 3 * dim of them and proj dim."
            )
        if given[dim, heads] == 3 * dim**2 + 3 * dim:
            raise Mistake(
                "that is qkv alone: the output projection proj (U_msa) adds a "
                "(dim, dim) weight and dim biases."
            )
        if given[dim, heads] != count:
            raise Mistake(
                f"Attention({dim}, {heads}) has {count:,} parameters; your formula "
                f"gives {given[dim, heads]}."
            )
    return (
        f"for D = 768 and 12 heads: {given[768, 12]:,}; counted, this chapter's "
        f"Attention has {counted[768, 12]:,}, nn.MultiheadAttention "
        f"{_count(nn.MultiheadAttention(768, 12)):,} and the package's Attention "
        f"{_count(PackageAttention(768, 12)):,}, whatever the number of heads."
    )


ex2 = Exercise(
    title="Count the parameters by hand",
    checker=_check_attention_params,
    hint_text=(
        "Attention has two Linear layers, qkv and proj. A Linear(n_in, n_out) holds an "
        "(n_out, n_in) weight and n_out biases. Which of those sizes depend on heads?"
    ),
    solution_code=reference_source(attention_params),
    explanation=(
        "qkv holds a (3D, D) weight and 3D biases, proj a (D, D) weight and D biases: "
        "3D^2 + 3D + D^2 + D = 4D^2 + 4D. The number of heads only decides how the 3D "
        "outputs of qkv are cut into per-head queries, keys and values (D_h = D / H "
        "each), not how many there are: one head of width D and twelve of width D / 12 "
        "cost the same."
    ),
    reference=lambda: (attention_params,),
    mistakes=[
        (lambda: (lambda dim, heads: 4 * dim**2,), "left out the biases"),
        (lambda: (lambda dim, heads: 3 * dim**2 + 3 * dim,), "qkv alone"),
        (
            lambda: (lambda dim, heads: 4 * dim**2 + 4 * dim * heads,),
            "changes with the number of heads",
        ),
    ],
)


# Exercise 3: a causal mask


def causal_mask(n):
    # (n, n) booleans, True where query i may attend to key j: j <= i
    return torch.ones(n, n, dtype=torch.bool).tril()


def _check_causal_mask(function, answer) -> str:
    for n in (5, 197):
        mask, expected = function(n), causal_mask(n)
        if not isinstance(mask, torch.Tensor) or mask.shape != (n, n):
            raise Mistake(f"causal_mask({n}) should be an ({n}, {n}) tensor.")
        if mask.dtype != torch.bool:
            raise Mistake(
                f"give booleans (dtype torch.bool), not {mask.dtype}: the attention "
                "keeps the True entries and fills the others (~mask) with -inf."
            )
        if torch.equal(mask, expected.T):
            raise Mistake(
                "your mask lets token i see the tokens after it (j > i) and hides those "
                "before: a causal mask is lower-triangular, True where j <= i."
            )
        if torch.equal(mask, ~expected):
            raise Mistake(
                "your mask is True where a token must NOT look; the attention keeps the "
                "True entries (as F.scaled_dot_product_attention's attn_mask does)."
            )
        if torch.equal(mask, expected.tril(-1)):
            raise Mistake(
                "a token may attend to itself: keep the diagonal (tril(), not "
                "tril(-1)). Without it row 0 has no key left and its softmax is NaN."
            )
        if not torch.equal(mask, expected):
            raise Mistake(
                f"causal_mask({n}) differs from the lower-triangular mask in "
                f"{(mask != expected).sum().item()} places."
            )
    check_letter(
        answer,
        "b",
        {
            "a": "A mask costs almost nothing, one masked_fill (fused kernels even skip "
            "the masked half). The reason is in what the ViT predicts.",
            "c": "The position embedding tells a token where it is; it hides nothing "
            "from it (exercise 4: attention itself ignores the order of its tokens).",
        },
    )
    return (
        "your mask is the one F.scaled_dot_product_attention(..., is_causal=True) "
        "applies, and a ViT has no future to hide: it classifies a whole image."
    )


ex3 = Exercise(
    title="A causal mask",
    checker=_check_causal_mask,
    hint_text=(
        "Start from torch.ones(n, n, dtype=torch.bool): torch.tril keeps the entries "
        "on and below the diagonal, j <= i. For the question: what would the class "
        "token, at position 0, see under such a mask?"
    ),
    solution_code=reference_source(causal_mask, "b"),
    explanation=(
        "A language model predicts token i + 1 from tokens 0 to i, so in training "
        "token i must not see the future it is asked to predict. The ViT predicts "
        "nothing token by token: it classifies the whole image, which is given at "
        "once, and its class token has to gather information from every patch. Under "
        "a causal mask the class token, at position 0, could attend only to itself."
    ),
    reference=lambda: (causal_mask, "b"),
    mistakes=[
        (
            lambda: (lambda n: torch.ones(n, n, dtype=torch.bool).triu(), "b"),
            "lower-triangular",
        ),
        (
            lambda: (lambda n: torch.ones(n, n, dtype=torch.bool).tril(-1), "b"),
            "keep the diagonal",
        ),
        (
            lambda: (lambda n: torch.ones(n, n, dtype=torch.bool).triu(1), "b"),
            "must NOT look",
        ),
        (lambda: (lambda n: torch.ones(n, n).tril(), "b"), "give booleans"),
        (lambda: (causal_mask, "a"), "costs almost nothing"),
        (lambda: (causal_mask, "c"), "hides nothing"),
    ],
)


# Exercise 4: attention does not know where tokens are


def shuffle_and_restore(block, x, perm):
    # x: (B, N, D) tokens; perm: a permutation of the N token positions
    shuffled_out = block(x[:, perm])  # the block's output on the shuffled tokens
    return shuffled_out[:, perm.argsort()]  # put back in the original order


def _check_shuffle_and_restore(function, answer) -> str:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        block = nn.Sequential(nn.LayerNorm(16, eps=1e-6), Attention(16, 2)).eval()
    x = torch.randn(2, 7, 16, generator=torch.Generator().manual_seed(0))
    perm = torch.tensor([2, 0, 1, 5, 6, 3, 4])  # its own inverse is another order
    with torch.no_grad():
        out, shuffled_out = block(x), block(x[:, perm])
        restored = function(block, x, perm)
    if not isinstance(restored, torch.Tensor) or restored.shape != out.shape:
        raise Mistake(f"return the block's output, of shape {tuple(out.shape)}.")
    if _close(restored, shuffled_out) and not _close(restored, out):
        raise Mistake(
            "this is the output in the shuffled order: put its tokens back with the "
            "inverse permutation, shuffled_out[:, perm.argsort()]."
        )
    if _close(restored, shuffled_out[:, perm]):
        raise Mistake(
            "you applied perm a second time; undo it with its inverse, perm.argsort()."
        )
    if not _close(restored, out):
        raise Mistake(
            "your restored output differs from block(x) by up to "
            f"{(restored - out).abs().max():.3g}: shuffle the tokens (dimension 1) "
            "with x[:, perm], then undo it on the output."
        )
    check_letter(
        answer,
        "b",
        {
            "a": "Your own check says otherwise: shuffled tokens give the same "
            "outputs, shuffled. A patch's content says what it shows, not where it is.",
            "c": "Attention is permutation-equivariant without it, as you just "
            "checked; E_pos is what breaks the symmetry.",
        },
    )
    return (
        "shuffling the tokens only shuffles the outputs: attention alone sees the "
        "image as a bag of patches."
    )


ex4 = Exercise(
    title="Attention does not know where tokens are",
    checker=_check_shuffle_and_restore,
    hint_text=(
        "x[:, perm] reorders the tokens of every image of the batch. The permutation "
        "that undoes perm is perm.argsort(): position perm[i] goes back to i."
    ),
    solution_code=reference_source(shuffle_and_restore, "b"),
    explanation=(
        "Attention is permutation-equivariant: every token is compared with every "
        "other one by the same projections, and the softmax and the weighted sum do "
        "not care in what order the keys come. Shuffling the inputs only shuffles the "
        "outputs. Without the position embedding the ViT would treat an image as a bag "
        "of patches. Adding E_pos is what tells attention where a patch came from: "
        "shuffle the patches before it is added, so that each arrives with another "
        "place's embedding, and the restored output is no longer the same."
    ),
    reference=lambda: (shuffle_and_restore, "b"),
    mistakes=[
        (lambda: (lambda block, x, perm: block(x[:, perm]), "b"), "shuffled order"),
        (
            lambda: (lambda block, x, perm: block(x[:, perm])[:, perm], "b"),
            "a second time",
        ),
        (lambda: (shuffle_and_restore, "a"), "says otherwise"),
        (lambda: (shuffle_and_restore, "c"), "breaks the symmetry"),
    ],
)
