"""Chapter 8's exercises: the score scale for other variances, the cost of heads, offsets
as rotations and the gradient of deeper stacks."""

from __future__ import annotations

import math

import torch

from going_modular.models.layers import Attention, sinusoidal_embedding
from vitbook.book.exercises import Exercise, Mistake
from vitbook.models.complexity import count_macs, count_params

__all__ = ["ex1", "ex2", "ex3", "ex4"]


def _defined(code: str, name: str):
    """The function ``name`` that ``code`` (a solution shown to the student) defines, so
    the check tests exactly the code the solution shows."""
    namespace = {"math": math, "torch": torch}
    exec(code, namespace)
    return namespace[name]


def _letter(answer: object) -> str:
    return str(answer).strip().strip("()").lower()


def _choice(answer: object, right: str, wrong: dict[str, str]) -> None:
    """Raise a Mistake with the words for a wrong letter."""
    letter = _letter(answer)
    if letter in wrong:
        raise Mistake(wrong[letter])
    if letter != right:
        letters = ", ".join(sorted([right, *wrong]))
        raise Mistake(f"answer one of the letters {letters}, not {answer!r}.")


# Exercise 1 -------------------------------------------------------------------------

SCALE_SOLUTION = """
def score_scale(d, sigma_q, sigma_k):
    # Var(q . k) = d sigma_q^2 sigma_k^2: divide by its square root
    return sigma_q * sigma_k * math.sqrt(d)


why = "b"
"""
_score_scale = _defined(SCALE_SOLUTION, "score_scale")
SCALE_CASES = [(64, 2.0, 0.5), (64, 3.0, 3.0), (16, 1.0, 1.0), (256, 0.5, 2.0)]


def _measured_variance(scale: float, d: int, sigma_q: float, sigma_k: float) -> float:
    """Var(q . k / scale) over 20,000 pairs with N(0, sigma^2) entries (fixed seed)."""
    gen = torch.Generator().manual_seed(0)
    q = sigma_q * torch.randn(20_000, d, generator=gen, dtype=torch.float64)
    k = sigma_k * torch.randn(20_000, d, generator=gen, dtype=torch.float64)
    return ((q * k).sum(1) / scale).var().item()


def _check_scale(score_scale, why) -> str:
    for d, sigma_q, sigma_k in SCALE_CASES:
        got = float(score_scale(d, sigma_q, sigma_k))
        if math.isclose(got, _score_scale(d, sigma_q, sigma_k), rel_tol=1e-6):
            continue
        where = f"d = {d}, sigma_q = {sigma_q}, sigma_k = {sigma_k}"
        if math.isclose(got, math.sqrt(d), rel_tol=1e-6):
            raise Mistake(
                f"your scale is sqrt(d) and ignores sigma_q and sigma_k: with {where} "
                f"the scores keep variance {_measured_variance(got, d, sigma_q, sigma_k):.1f}."
            )
        if math.isclose(got, sigma_q**2 * sigma_k**2 * math.sqrt(d), rel_tol=1e-6):
            raise Mistake(
                "you divided by the variances sigma_q^2 sigma_k^2; the scores' standard "
                "deviation holds the standard deviations sigma_q sigma_k."
            )
        if math.isclose(got, d * sigma_q * sigma_k, rel_tol=1e-6):
            raise Mistake(
                "the scores' standard deviation grows like sqrt(d), not d: your scale "
                f"makes their variance {_measured_variance(got, d, sigma_q, sigma_k):.3f} "
                f"at {where}."
            )
        raise Mistake(
            f"with {where}, q . k / score_scale has variance "
            f"{_measured_variance(got, d, sigma_q, sigma_k):.2f}, not 1."
        )
    _choice(
        why,
        "b",
        {
            "a": "nothing keeps them at variance 1: W_Q and W_K are learned, and their "
            "size changes in training.",
            "c": "the softmax ignores a shift of the scores (adding the same number), "
            "not a scale: multiplying them by a number changes its temperature.",
        },
    )
    measured = ", ".join(
        f"{_measured_variance(score_scale(*case), *case):.2f}"
        for case in SCALE_CASES[:2]
    )
    return (
        "the formula is right; measured over 20,000 pairs, q . k / score_scale has "
        f"variance {measured} for (sigma_q, sigma_k) = (2, 0.5) and (3, 3) at d = 64."
    )


ex1 = Exercise(
    title="Scaling for other variances",
    checker=_check_scale,
    hint_text=(
        "Each product q_i k_i has mean 0 and variance E[q_i^2] E[k_i^2]; the d products "
        "are independent, so their variances add. The scale is the square root of the "
        "sum.\n\nFor the question: which of the three statements is about the scale of "
        "the tokens and of W_Q, W_K, and does the softmax ignore multiplying all scores "
        "by a number, or adding one?"
    ),
    solution_code=SCALE_SOLUTION,
    explanation=(
        "The d products q_i k_i are independent with mean 0 and variance "
        "sigma_q^2 sigma_k^2, so Var(q . k) = d sigma_q^2 sigma_k^2: dividing the scores "
        "by sigma_q sigma_k sqrt(d) brings the variance back to 1. With sigma_q = 2 and "
        "sigma_k = 0.5 the product of the standard deviations is 1, so sqrt(d) alone "
        "happens to be right; sigma_q = sigma_k = 3 gives variance 81 without the "
        "sigmas.\n\n(b): in a trained model q = W_Q LN(x) and k = W_K LN(x). LayerNorm "
        "fixes the scale of the tokens and the scale of W_Q and W_K is learned, so "
        "1/sqrt(d) only makes the starting point well behaved; from there the model "
        "sets its own temperature through the size of W_Q and W_K."
    ),
    reference=lambda: (_score_scale, "b"),
    mistakes=[
        (lambda: (lambda d, sq, sk: math.sqrt(d), "b"), "ignores sigma_q and sigma_k"),
        (lambda: (lambda d, sq, sk: sq**2 * sk**2 * math.sqrt(d), "b"), "variances"),
        (lambda: (lambda d, sq, sk: d * sq * sk, "b"), "sqrt(d), not d"),
        (lambda: (_score_scale, "c"), "not a scale"),
    ],
)


# Exercise 2 -------------------------------------------------------------------------

COST_SOLUTION = """
def attention_cost(N, D, H):
    parameters = 3 * D * D + D * D + D  # qkv (no bias), then proj with its bias
    macs_linear = N * D * 3 * D + N * D * D  # qkv, then proj: 4 N D^2
    # H heads, each QK^T (N x d_h times d_h x N) and AV (N x N times N x d_h),
    # d_h = D / H: 2 H N^2 (D / H) = 2 N^2 D, whatever H is
    macs_attention = 2 * N * N * D
    return parameters, macs_linear, macs_attention
"""
_attention_cost = _defined(COST_SOLUTION, "attention_cost")
COST_CASES = [(64, 256, 1), (64, 256, 4), (64, 256, 16), (10, 48, 3)]


def _package_cost(N: int, D: int, H: int) -> tuple[int, int, int]:
    """What the package's Attention(D, H, qkv_bias=False) has and does on N tokens."""
    attention = Attention(D, H, qkv_bias=False)
    macs = count_macs(attention, (1, N, D))
    return count_params(attention), macs["linear"], macs["attention"]


def _check_cost(attention_cost) -> str:
    for N, D, H in COST_CASES:
        params, linear, products = (int(v) for v in attention_cost(N, D, H))
        want_params, want_linear, want_products = _package_cost(N, D, H)
        where = f"N = {N}, D = {D}, H = {H}"
        if params != want_params:
            if params == 4 * D * D + 4 * D:
                raise Mistake(
                    "with qkv_bias=False the qkv Linear has no bias: only the output "
                    "projection has one."
                )
            if params == 4 * D * D:
                raise Mistake("you left out the output projection's bias (D numbers).")
            raise Mistake(
                f"parameters at {where}: yours {params:,}, the package's "
                f"{want_params:,}."
            )
        if linear != want_linear:
            if linear == 3 * N * D * D:
                raise Mistake(
                    "the linear layers are the qkv projection and the output projection: "
                    "you left out the output projection's N D^2."
                )
            raise Mistake(
                f"linear MACs at {where}: yours {linear:,}, the package's "
                f"{want_linear:,}."
            )
        if products != want_products:
            if H > 1 and products * H == want_products:
                raise Mistake(
                    "you counted one head of size D / H; there are H of them, so the "
                    "head size cancels."
                )
            if 2 * products == want_products:
                raise Mistake(
                    "QK^T is half of it: AV (N x N weights times N x d_h values) costs "
                    "as much again."
                )
            raise Mistake(
                f"QK^T and AV MACs at {where}: yours {products:,}, the "
                f"package's {want_products:,}."
            )
    return "all three agree with count_params and count_macs, and none depends on H."


ex2 = Exercise(
    title="Heads are free",
    checker=_check_cost,
    hint_text=(
        "The qkv layer is a Linear(D, 3D) without bias, the output projection a "
        "Linear(D, D) with one. A Linear(a, b) on N tokens costs N a b MACs. Head h "
        "multiplies an N x d_h matrix by a d_h x N one (QK^T), then an N x N one by an "
        "N x d_h one (AV), with d_h = D / H; count all H heads."
    ),
    solution_code=COST_SOLUTION,
    explanation=(
        "Parameters: 3D^2 for qkv and D^2 + D for the projection, 4D^2 + D whatever H "
        "(the heads only split the D columns). MACs: the projections cost "
        "N D 3D + N D D = 4 N D^2; each head's QK^T costs N^2 d_h and its AV the same, "
        "so H heads cost 2 H N^2 d_h = 2 N^2 D: for N = 64 and D = 256 that is "
        "2,097,152 for every H. Splitting into heads changes what attention can express, "
        "not what it costs."
    ),
    reference=lambda: (_attention_cost,),
    mistakes=[
        (
            lambda: (
                lambda N, D, H: (4 * D * D + 4 * D, 4 * N * D * D, 2 * N * N * D),
            ),
            "no bias",
        ),
        (
            lambda: (
                lambda N, D, H: (4 * D * D + D, 4 * N * D * D, 2 * N * N * D // H),
            ),
            "one head",
        ),
        (lambda: (lambda N, D, H: (4 * D * D + D, 4 * N * D * D, N * N * D),), "AV"),
        (
            lambda: (lambda N, D, H: (4 * D * D + D, 3 * N * D * D, 2 * N * N * D),),
            "output projection",
        ),
    ],
)


# Exercise 3 -------------------------------------------------------------------------

ROTATION_SOLUTION = """
def rotation(k, dim):
    omega = torch.exp(
        -torch.arange(0, dim, 2, dtype=torch.float64) * math.log(10000.0) / dim
    )
    # columns (2i, 2i + 1) hold (sin p omega_i, cos p omega_i): one 2 x 2 block each
    blocks = [
        torch.tensor(
            [[math.cos(k * w), math.sin(k * w)], [-math.sin(k * w), math.cos(k * w)]]
        )
        for w in omega.tolist()
    ]
    return torch.block_diag(*blocks)


why = "b"
"""
_rotation = _defined(ROTATION_SOLUTION, "rotation")
ROTATION_CASES = [(3, 64), (7, 16), (1, 8)]


def _check_rotation(rotation, why) -> str:
    for k, dim in ROTATION_CASES:
        R = torch.as_tensor(rotation(k, dim), dtype=torch.float64)
        if R.shape != (dim, dim):
            raise Mistake(
                f"rotation({k}, {dim}) has shape {tuple(R.shape)}; R_k maps a "
                f"{dim}-dimensional PE(p) to PE(p + k), so it is ({dim}, {dim})."
            )
        pe = sinusoidal_embedding(101 + k, dim)[0].double()
        gap = (pe[:101] @ R.T - pe[k:]).abs().max().item()
        if gap < 1e-4:
            continue
        if torch.allclose(R, _rotation(k, dim).double().T, atol=1e-6):
            raise Mistake(
                "your matrix rotates by -k: it maps PE(p) to PE(p - k) (or you built it "
                "for row vectors, PE(p) R). Swap the signs of the two sines in each block."
            )
        raise Mistake(
            f"R_k PE(p) differs from PE(p + k) by up to {gap:.2g} (k = {k}, D = {dim}). "
            "Each 2 x 2 block acts on columns 2i and 2i + 1, (sin p omega_i, "
            "cos p omega_i), with omega_i = 10000^(-2i / D)."
        )
    _choice(
        why,
        "b",
        {
            "a": "keeping lengths only says |PE(p + k)| = |PE(p)|, not what angle lies "
            "between PE(p) and PE(p + k): for a rotation of another kind, x . Rx "
            "changes with x.",
            "c": "R_k is not symmetric: its transpose is R_(-k), which turns the other "
            "way.",
        },
    )
    return "PE(p + k) = R_k PE(p) for p = 0..100 at (k, D) = (3, 64), (7, 16), (1, 8)."


ex3 = Exercise(
    title="Offsets are rotations",
    checker=_check_rotation,
    hint_text=(
        "Write sin((p + k) omega) and cos((p + k) omega) with the angle-addition "
        "formulas: each is a combination of sin(p omega) and cos(p omega) with "
        "coefficients that depend on k omega only. torch.block_diag puts the 2 x 2 "
        "blocks on the diagonal.\n\nFor the question: what is the dot product of a unit "
        "vector in the plane with the same vector turned by an angle theta?"
    ),
    solution_code=ROTATION_SOLUTION,
    explanation=(
        "The angle-addition formulas give sin((p + k) omega) = cos(k omega) sin(p omega) "
        "+ sin(k omega) cos(p omega) and cos((p + k) omega) = -sin(k omega) sin(p omega) "
        "+ cos(k omega) cos(p omega). So R_k is block diagonal, one block "
        "[[cos k omega, sin k omega], [-sin k omega, cos k omega]] per frequency, and "
        "none of it depends on p.\n\n(b): block i turns the pair (sin p omega_i, "
        "cos p omega_i), a unit vector, by the angle k omega_i, and a unit vector's dot "
        "product with itself turned by theta is cos(theta). So each pair contributes "
        "cos(k omega_i) whatever p, and PE(p) . PE(p + k) = sum_i cos(k omega_i). That "
        "a rotation keeps lengths is true but not the reason: it says nothing about the "
        "angle between PE(p) and PE(p + k)."
    ),
    reference=lambda: (_rotation, "b"),
    mistakes=[
        (lambda: (lambda k, dim: _rotation(k, dim).T, "b"), "rotates by -k"),
        (lambda: (lambda k, dim: _rotation(k, dim // 2), "b"), "has shape"),
        (lambda: (lambda k, dim: _rotation(2 * k, dim), "b"), "differs from PE(p + k)"),
        (lambda: (_rotation, "a"), "keeping lengths"),
        (lambda: (_rotation, "c"), "not symmetric"),
    ],
)


# Exercise 4 -------------------------------------------------------------------------

QUARTERS_SOLUTION = """
def quarter_means(grads):
    quarter = len(grads) // 4
    lowest = sum(grads[:quarter]) / quarter
    highest = sum(grads[-quarter:]) / quarter
    return lowest, highest
"""
_quarter_means = _defined(QUARTERS_SOLUTION, "quarter_means")
QUARTER_CASES = [
    [8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0],
    [6.0, 1.0, 1.0, 1.0, 1.0, 2.0],
    [float(v) for v in range(12, 0, -1)],
]


def _check_quarters(quarter_means) -> str:
    for grads in QUARTER_CASES:
        got = tuple(float(v) for v in quarter_means(list(grads)))
        want = _quarter_means(grads)
        if len(got) != 2:
            raise Mistake(
                f"return two numbers, (lowest, highest); yours gave {len(got)}."
            )
        if all(math.isclose(g, w) for g, w in zip(got, want)):
            continue
        quarter, depth = len(grads) // 4, len(grads)
        if all(math.isclose(g, w) for g, w in zip(got, want[::-1])):
            raise Mistake("the order is (lowest quarter, highest quarter): swap them.")
        if got == (grads[0], grads[-1]):
            raise Mistake(
                f"you took the first and last layer only; a quarter of {depth} layers "
                f"is {quarter} layers."
            )
        half = depth // 2
        if math.isclose(got[0], sum(grads[:half]) / half):
            raise Mistake(
                f"you averaged halves of the stack; a quarter of {depth} "
                f"layers is depth // 4 = {quarter}."
            )
        if math.isclose(got[0], sum(grads[:quarter])):
            raise Mistake("those are sums, not means: divide by the number of layers.")
        raise Mistake(f"for the gradients {grads} the quarters' means are not {got}.")
    return "the means of the lowest and the highest depth // 4 layers."


ex4 = Exercise(
    title="Deeper stacks",
    checker=_check_quarters,
    hint_text=(
        "grads[0] is the lowest layer's gradient norm and grads[-1] the highest's. A "
        "quarter of the stack is len(grads) // 4 layers: slice that many from each end."
    ),
    solution_code=QUARTERS_SOLUTION,
    explanation=(
        "The lowest quarter is grads[:depth // 4], the highest grads[-(depth // 4):]; "
        "their means give one initialisation's ratio lowest / highest. The cells below "
        "take its logarithm for every seed, so that a ratio of 2 and one of 1/2 weigh "
        "the same, and compare the lowest with the highest quarter with a paired t-test "
        "over the seeds: the same networks on both sides."
    ),
    reference=lambda: (_quarter_means,),
    mistakes=[
        (lambda: (lambda g: (g[0], g[-1]),), "first and last layer only"),
        (lambda: (lambda g: _quarter_means(g)[::-1],), "swap them"),
        (lambda: (lambda g: (sum(g[: len(g) // 2]) / (len(g) // 2), g[-1]),), "halves"),
        (
            lambda: (lambda g: (sum(g[: len(g) // 4]), sum(g[-(len(g) // 4) :])),),
            "sums, not means",
        ),
    ],
)
