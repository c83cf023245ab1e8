"""Chapter 4's exercises: the block's parameters by hand, the post-norm block, Appendix
B.1's dropout, and the exact GELU against its tanh approximation."""

from __future__ import annotations

import copy
import inspect
import numbers

import torch
import torch.nn.functional as F
from torch import nn

from vitbook.book.built.ch04 import Block, Mlp
from vitbook.book.exercises import Exercise, Mistake
from vitbook.book.reference import randomize_vectors_
from vitbook.models.complexity import count_params
from vitbook.models.convert import TORCH_LAYER_KEYS, load_renamed

__all__ = ["ex1", "ex2", "ex3", "ex4"]


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, atol=1e-5, rtol=1e-4)


def _filled_in(cls: type) -> None:
    """A class whose ``__init__`` still holds a blank: say so before building it."""
    names = set(cls.__init__.__code__.co_names)
    if "____" in names:
        raise Mistake("fill in the blanks (____) first, then run this again.")


# Exercise 1: the parameters of a block, as a formula in D ---------------------------------


def block_params(D):
    attention = (D * 3 * D + 3 * D) + (D * D + D)  # qkv, proj: 4D^2 + 4D
    mlp = (D * 4 * D + 4 * D) + (4 * D * D + D)  # fc1, fc2: 8D^2 + 5D
    norms = 2 * (D + D)  # norm1, norm2: a scale and a shift each
    return attention + mlp + norms  # 12D^2 + 13D


_MISSING = {  # (a, b) of the shortfall a D^2 + b D -> what was left out
    (0, -4): "the two LayerNorms are missing: each has a scale (weight) and a shift "
    "(bias) of D numbers, 4D in all.",
    (
        0,
        -2,
    ): "each LayerNorm has two vectors of D numbers, a scale (weight) and a shift "
    "(bias), not one.",
    (0, -9): "the biases are missing: qkv has 3D, proj D, fc1 4D and fc2 D.",
    (0, -13): "the biases (qkv 3D, proj D, fc1 4D, fc2 D) and the two LayerNorms (2D "
    "each) are missing.",
    (-6, -3): "the MLP's hidden layer has 4D features (3072 for D = 768), not D: fc1 "
    "and fc2 each hold 4D^2 weights.",
    (-2, -2): "qkv maps D to 3D (the queries, keys and values of all heads at once), "
    "so it holds 3D^2 weights and 3D biases.",
}


def _check_block_params(count):
    diffs = {}
    for D in (8, 16, 24):
        truth, got = count_params(Block(D, 2)), count(D)
        if not isinstance(got, numbers.Real) or isinstance(got, bool):
            raise Mistake(
                f"block_params({D}) should return a number, not {type(got).__name__}."
            )
        diffs[D] = got - truth
    if any(diffs.values()):
        a = (diffs[16] / 16 - diffs[8] / 8) / 8  # fit a D^2 + b D to the shortfall
        b = diffs[8] / 8 - 8 * a
        if diffs[24] == 24 * 24 * a + 24 * b and (a, b) in _MISSING:
            raise Mistake(_MISSING[(a, b)])
        D = next(D for D, diff in diffs.items() if diff)
        raise Mistake(
            f"block_params({D}) gives {count(D):,}, but a block with D = {D} has "
            f"{count_params(Block(D, 2)):,} parameters (count_params(Block({D}, 2)))."
        )
    with torch.device("meta"):  # sizes only, no memory
        base = count_params(Block(768, 12))
    if count(768) != base:
        raise Mistake(f"block_params(768) gives {count(768):,}, not {base:,}.")
    return (
        f"block_params(768) = {base:,}, the count torchinfo printed; ViT-Base's "
        f"twelve blocks hold 12 x {base:,} = {12 * base:,} parameters."
    )


ex1 = Exercise(
    title="Count by hand",
    checker=_check_block_params,
    hint_text=(
        "A Linear from m to n features holds m * n weights and n biases. qkv maps D to "
        "3D, proj D to D, fc1 D to 4D and fc2 4D to D. A LayerNorm over D features has "
        "a scale and a shift, D numbers each."
    ),
    solution_code=inspect.getsource(block_params),
    explanation=(
        "Attention holds 4D^2 + 4D (qkv and proj), the MLP 8D^2 + 5D (fc1 and fc2) and "
        "the two LayerNorms 4D: 12D^2 + 13D in all. The D^2 terms dominate, two thirds "
        "of them in the MLP; the block's size does not depend on the number of heads "
        "or on the number of tokens."
    ),
    reference=lambda: (block_params,),
    mistakes=[
        (lambda: (lambda D: 12 * D**2 + 9 * D,), "LayerNorms are missing"),
        (lambda: (lambda D: 12 * D**2 + 4 * D,), "the biases are missing"),
        (lambda: (lambda D: 6 * D**2 + 10 * D,), "4D features"),
    ],
)


# Exercise 2: post-norm -------------------------------------------------------------------


class PostNormBlock(Block):
    # The original Transformer's order: the residual sum first, then the LayerNorm.

    def forward(self, x):
        x = self.norm1(x + self.attn(x))  # Eq. 2 in post-norm order
        x = self.norm2(x + self.mlp(x))  # Eq. 3 in post-norm order
        return x


_SILENCED = {
    "a": "the post-norm block still passes the sums through its two LayerNorms: with "
    "silent branches it returns norm2(norm1(x)), not x.",
    "c": "the other way round: in pre-norm the LayerNorms sit inside the branches, so "
    "silent branches leave x + 0 + 0 = x.",
    "d": "in pre-norm the LayerNorms sit inside the branches, so silent branches leave "
    "x + 0 + 0 = x exactly.",
}


def _wrong_orders(block: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """What typical wrong post-norm blocks return, with ``block``'s weights."""
    n1, n2, attn, mlp = block.norm1, block.norm2, block.attn, block.mlp
    pre = attn(n1(x)) + x
    first = n1(x + attn(x))
    inside = n1(x + attn(n1(x)))
    return {
        "that is the pre-norm order of Block.forward: post-norm adds first and "
        "normalises the sum, norm1(x + attn(x)).": mlp(n2(pre)) + pre,
        "norm1 belongs to the attention's sum, norm2 to the MLP's: they are swapped.": (
            n1(n2(x + attn(x)) + mlp(n2(x + attn(x))))
        ),
        "the second sum needs its LayerNorm too: return norm2(x + mlp(x)).": (
            first + mlp(first)
        ),
        "the first sum needs its LayerNorm: x = norm1(x + attn(x)).": (
            n2(x + attn(x) + mlp(x + attn(x)))
        ),
        "in post-norm the branches see the stream itself: attn(x) and mlp(x), not "
        "attn(norm1(x)) and mlp(norm2(x)).": n2(inside + mlp(n2(inside))),
    }


def _silence(block: nn.Module) -> nn.Module:
    """``block`` with the last layer of both residual branches set to zero."""
    for layer in (block.attn.proj, block.mlp.fc2):
        nn.init.zeros_(layer.weight)
        nn.init.zeros_(layer.bias)
    return block


def _check_post_norm(block_class, silenced):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(
        32,
        4,
        128,
        dropout=0.0,
        activation="gelu",
        batch_first=True,
        norm_first=False,
        layer_norm_eps=1e-6,
    ).eval()
    randomize_vectors_(layer)
    block = block_class(32, 4).eval()
    try:
        load_renamed(block, layer, TORCH_LAYER_KEYS)
    except ValueError as error:
        raise Mistake(
            "subclass Block and change only forward, so the block keeps norm1, attn, "
            f"norm2 and mlp ({error})"
        ) from error
    x = torch.randn(2, 7, 32)
    with torch.no_grad():
        got, want = block(x), layer(x)
        if not _close(got, want):
            for words, wrong in _wrong_orders(block, x).items():
                if _close(got, wrong):
                    raise Mistake(words)
            raise Mistake(
                "your block differs from nn.TransformerEncoderLayer(norm_first=False) "
                f"with the same weights by up to {(got - want).abs().max():.2g}."
            )
        pre = Block(32, 4).eval()
        pre.load_state_dict(block.state_dict())
        gap = (block(x) - pre(x)).abs().max()
        quiet_pre, quiet_post = _silence(pre), _silence(block)
        moved_pre = (quiet_pre(x) - x).abs().max()
        moved_post = (quiet_post(x) - x).abs().max()
    if silenced != "b":
        raise Mistake(_SILENCED.get(silenced, 'answer with one letter, "a" to "d".'))
    return (
        "your block computes what nn.TransformerEncoderLayer(norm_first=False) computes "
        f"and differs from the pre-norm Block with the same weights by up to {gap:.2f}; "
        f"with both branches silenced, the pre-norm block moves x by {moved_pre:.2f}, "
        f"the post-norm block by up to {moved_post:.2f}."
    )


class _NoLastNorm(Block):
    def forward(self, x):
        x = self.norm1(x + self.attn(x))
        return x + self.mlp(x)


ex2 = Exercise(
    title="Post-norm",
    checker=_check_post_norm,
    hint_text=(
        "Post-norm applies each LayerNorm to the residual sum: the attention and the "
        "MLP see the stream itself. For the question, set attn.proj and mlp.fc2 to "
        "zero and read what forward then computes, in each order."
    ),
    solution_code=inspect.getsource(PostNormBlock) + '\n\nsilenced = "b"',
    explanation=(
        "Post-norm passes every residual sum through a LayerNorm, so no path runs "
        "through a deep stack untouched: with both branches silenced, the pre-norm block "
        "returns its input exactly, while the post-norm block still passes it through "
        "its two LayerNorms. Xiong et al. (2020, On Layer Normalization in the "
        "Transformer Architecture) show that at initialisation the gradients of the "
        "parameters near the output are larger with post-norm than with pre-norm, which "
        "is why post-norm needs a careful learning-rate warm-up to train at all, while "
        "pre-norm trains stably without one; the ViT follows pre-norm, as most recent "
        "Transformers do."
    ),
    reference=lambda: (PostNormBlock, "b"),
    mistakes=[
        (lambda: (Block, "b"), "pre-norm order"),
        (lambda: (PostNormBlock, "a"), "norm2(norm1(x))"),
        (lambda: (_NoLastNorm, "b"), "second sum needs its LayerNorm"),
    ],
)


# Exercise 3: Appendix B.1's dropout --------------------------------------------------------


class DropoutBlock(Block):
    # Block with Appendix B.1's dropout: after every dense layer except qkv.

    def __init__(self, dim=768, heads=12, mlp_ratio=4.0, eps=1e-6, drop_rate=0.1):
        super().__init__(dim, heads, mlp_ratio, eps)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), drop_rate)  # after fc1 and fc2
        self.proj_drop = nn.Dropout(drop_rate)  # after the attention's proj

    def forward(self, x):
        x = self.proj_drop(self.attn(self.norm1(x))) + x
        x = self.mlp(self.norm2(x)) + x
        return x


def _dropped_features(block: nn.Module, x: torch.Tensor) -> list[int]:
    """The number of features of each input that an ``nn.Dropout`` of ``block`` drops in
    one training-mode pass."""
    seen = []
    hooks = [
        m.register_forward_hook(lambda m, args, out: seen.append(args[0].shape[-1]))
        for m in block.modules()
        if isinstance(m, nn.Dropout) and m.p > 0
    ]
    try:
        with torch.no_grad():
            block.train()(x)
    finally:
        for hook in hooks:
            hook.remove()
    return sorted(seen)


def _check_dropout_block(block_class):
    _filled_in(block_class)
    torch.manual_seed(0)
    plain = randomize_vectors_(Block(16, 2)).eval()
    block = block_class(16, 2, drop_rate=0.1)
    try:
        block.load_state_dict(plain.state_dict())
    except RuntimeError as error:
        raise Mistake(
            "dropout has no weights, so DropoutBlock must hold exactly Block's: add "
            f"nn.Dropout modules only ({error})"
        ) from error
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        if not _close(block.eval()(x), plain(x)):
            raise Mistake(
                "in evaluation mode (.eval()) dropout must do nothing, so DropoutBlock "
                "must compute Block's function there: use nn.Dropout, which follows "
                ".train() and .eval()."
            )
        features = _dropped_features(block, x)
        if features != [16, 16, 64]:
            raise Mistake(
                "Appendix B.1 puts three dropouts in a block, after proj, fc1 and fc2: "
                "on 16, 64 and 16 features in this check's block (D = 16, MLP 64); "
                f"yours drop inputs of {features} features."
            )
        every = block_class(16, 2, drop_rate=1.0)
        every.load_state_dict(plain.state_dict())
        out = every.train()(x)  # each dropped branch vanishes: the block returns x
        attn_kept = x + plain.attn(plain.norm1(x))
        if not _close(out, x):
            if _close(out, attn_kept):
                raise Mistake(
                    "with drop_rate=1 the attention branch survives: its dropout must "
                    "come after the output projection, proj, the branch's last layer."
                )
            if out.std(dim=1).max() < 1e-4:  # every token the same: x itself was lost
                raise Mistake(
                    "dropout belongs on the branch, before the residual sum: dropping "
                    "the sum drops the residual stream itself."
                )
            raise Mistake(
                "with drop_rate=1 in training mode every branch should be dropped "
                "whole, so the block should return its input; yours does not."
            )
        block.train()
        differ = not torch.equal(block(x), block(x))
        same = torch.equal(block.eval()(x), block(x))
    return (
        f"in training mode two passes of the same input differ: {differ}; in "
        f"evaluation mode they are identical: {same}."
    )


class _OnlyMlpDropout(Block):
    def __init__(self, dim=768, heads=12, mlp_ratio=4.0, eps=1e-6, drop_rate=0.1):
        super().__init__(dim, heads, mlp_ratio, eps)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), drop_rate)


class _DropsTheStream(DropoutBlock):
    def forward(self, x):
        x = self.proj_drop(self.attn(self.norm1(x)) + x)
        x = self.mlp(self.norm2(x)) + x
        return x


class _DropsAlways(DropoutBlock):
    def forward(self, x):
        branch = F.dropout(self.attn(self.norm1(x)), self.proj_drop.p, training=True)
        x = branch + x
        x = self.mlp(self.norm2(x)) + x
        return x


ex3 = Exercise(
    title="Appendix B.1's dropout",
    checker=_check_dropout_block,
    hint_text=(
        "Chapter 4's Mlp already takes a drop_rate (drop1 after fc1 and the GELU, drop2 "
        "after fc2). The attention's only dense layer after qkv is proj, the branch's "
        "last layer: drop its output before it is added to x."
    ),
    solution_code=inspect.getsource(DropoutBlock),
    explanation=(
        "The three dropouts sit where Appendix B.1 puts them, after every dense layer "
        "except the query/key/value projection: after the attention's output "
        "projection, after the MLP's first layer (dense, then GELU) and after its "
        "second. Each acts on a branch before the residual sum, so the stream itself is "
        "never dropped. nn.Dropout zeroes each number with probability p in training "
        "mode and scales the rest by 1 / (1 - p); in evaluation mode it does nothing, "
        "so the trained network computes one fixed function. The paper sets the rate "
        "in its training recipe (Table 3), which is why chapter 4's Block has none."
    ),
    reference=lambda: (DropoutBlock,),
    mistakes=[
        (lambda: (_OnlyMlpDropout,), "three dropouts"),
        (lambda: (_DropsTheStream,), "residual stream itself"),
        (lambda: (_DropsAlways,), "evaluation mode"),
    ],
)


# Exercise 4: the exact GELU or its tanh approximation -------------------------------------


def gelu_gap(block, x):
    tanh_block = copy.deepcopy(block)  # the same weights, block itself untouched
    tanh_block.mlp.act = nn.GELU(approximate="tanh")
    with torch.no_grad():
        return (block(x) - tanh_block(x)).abs().max().item()


def _check_gelu_gap(gap):
    torch.manual_seed(0)
    block = randomize_vectors_(Block(16, 2)).eval()
    x = 2 * torch.randn(2, 5, 16)
    got, want = float(gap(block, x)), gelu_gap(block, x)
    if block.mlp.act.approximate != "none":
        raise Mistake(
            "your function changed the block it was given: its GELU is now the tanh "
            "form. Change a copy (copy.deepcopy(block)) instead."
        )
    if got == 0:
        raise Mistake(
            "the two outputs are identical: both blocks still compute the same GELU; "
            'the second needs nn.GELU(approximate="tanh") as its mlp.act.'
        )
    activations = (F.gelu(x) - F.gelu(x, approximate="tanh")).abs().max().item()
    if abs(got - activations) <= 1e-3 * activations:
        raise Mistake(
            "that is the gap between the two activations on x; compare the outputs of "
            "the two blocks."
        )
    if got > 10 * want:
        raise Mistake(
            f"{got:.2g} is far more than a change of GELU makes: the two blocks must "
            "share every weight (a copy of block, or load_state_dict)."
        )
    if abs(got - want) > 1e-3 * want + 1e-7:
        raise Mistake(
            f"your gap is {got:.3g}, the largest |exact - tanh| over the outputs is "
            f"{want:.3g}: take the largest absolute difference."
        )
    torch.manual_seed(0)
    base = randomize_vectors_(Block()).eval()
    tokens = torch.randn(1, 197, 768)
    with torch.no_grad():
        largest = base(tokens).abs().max()
    return (
        f"for a ViT-Base block on 197 random tokens your function gives "
        f"{gap(base, tokens):.1e}, with outputs up to {largest:.1f}: small, but well "
        "above float32 rounding."
    )


def _changes_its_argument(block, x):
    tanh_block = block
    tanh_block.mlp.act = nn.GELU(approximate="tanh")
    with torch.no_grad():
        return (block(x) - tanh_block(x)).abs().max().item()


def _mean_gap(block, x):
    tanh_block = copy.deepcopy(block)
    tanh_block.mlp.act = nn.GELU(approximate="tanh")
    with torch.no_grad():
        return (block(x) - tanh_block(x)).abs().mean().item()


ex4 = Exercise(
    title="GELU, exact or approximate?",
    checker=_check_gelu_gap,
    hint_text=(
        "copy.deepcopy(block) (after import copy) gives a second block with the same "
        'weights (GELU has none); set its mlp.act to nn.GELU(approximate="tanh"), run '
        "both on x and take the largest absolute difference."
    ),
    solution_code="import copy\n\n\n" + inspect.getsource(gelu_gap),
    explanation=(
        "The two forms differ by less than 1e-3 on any input, and a block's output "
        "changes by a similarly small amount: small, but above float32 rounding. "
        "Swapping the form "
        "in a trained model therefore changes its outputs a little (and the differences "
        "pass through every block), while an exact reproduction, like the chapter's "
        "agreement checks, needs the same form."
    ),
    reference=lambda: (gelu_gap,),
    mistakes=[
        (lambda: (_changes_its_argument,), "changed the block it was given"),
        (
            lambda: (
                lambda b, x: (F.gelu(x) - F.gelu(x, approximate="tanh")).abs().max(),
            ),
            "gap between the two activations",
        ),
        (lambda: (_mean_gap,), "largest absolute difference"),
    ],
)
