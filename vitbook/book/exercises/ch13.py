"""Chapter 13's exercises: the seed's FLOPs by hand, where attention overtakes the linear
layers, and a ViT that classifies the mean of its patch tokens."""

from __future__ import annotations

import torch
from torch import nn

from going_modular.models.registry import build_model
from vitbook.book.exercises import Exercise, Mistake, reference_source

__all__ = ["MeanPooled", "ex1", "ex2", "ex3"]

# fvcore FLOPs of the seed's forward pass (no head), counted in the chapter.
_COUNTED = {2: 915_674_304, 4: 188_900_544, 8: 47_020_224}

# Exercise 1 ------------------------------------------------------------------------------


def _seed_flops(p, d=192, r=2, depth=9):
    n = (32 // p) ** 2 + 1
    tokenizer = 3 * 32 * 32 * d
    block = (4 + 2 * r) * n * d * d + 2 * n * n * d + 2 * 5 * n * d
    return tokenizer + depth * block + 5 * n * d


def _check_seed_flops(seed_flops) -> str:
    for p, counted in _COUNTED.items():
        got = seed_flops(p)
        if got == counted:
            continue
        n = (32 // p) ** 2 + 1
        d = 192
        if got == 2 * counted:
            raise Mistake(
                f"patch {p}: {got:,} is twice fvcore's count: fvcore counts one "
                "multiply-add as one flop, not two."
            )
        if got == counted - 9 * n * n * d:
            raise Mistake(
                f"patch {p}: {got:,} misses {9 * n * n * d:,}: a block has two attention "
                "matmuls, Q K^T and A V, each N^2 D."
            )
        if got == counted - 5 * n * d:
            raise Mistake(
                f"patch {p}: {got:,} misses the final LayerNorm over N x D numbers "
                "(5 flops per element)."
            )
        if got == _seed_flops_tokens(p, n - 1):
            raise Mistake(
                f"patch {p}: with {n - 1} tokens you forgot the class token: "
                f"N = (32/p)^2 + 1 = {n}."
            )
        raise Mistake(f"patch {p}: {got:,} flops, but fvcore counts {counted:,}.")
    share = 2 * 65 * 65 * 192 / ((8 * 65 * 192 + 2 * 65 * 65 + 10 * 65) * 192)
    return (
        f"every patch size matches fvcore's count; at patch 4 the attention matmuls are "
        f"{share:.1%} of a block."
    )


def _seed_flops_tokens(p, n, d=192, r=2, depth=9):
    block = (4 + 2 * r) * n * d * d + 2 * n * n * d + 10 * n * d
    return 3 * 32 * 32 * d + depth * block + 5 * n * d


ex1 = Exercise(
    title="Predict before you count",
    checker=_check_seed_flops,
    hint_text=(
        "N = (32/p)^2 + 1 tokens. The tokenizer uses every pixel once: 3 * 32 * 32 * D "
        "multiply-adds. A block: (4 + 2r) N D^2 for the linear layers, 2 N^2 D for the two "
        "attention matmuls, 2 * 5 N D for its two LayerNorms. The final LayerNorm: 5 N D."
    ),
    solution_code="""
def seed_flops(p, d=192, r=2, depth=9):
    n = (32 // p) ** 2 + 1  # patches + the class token
    tokenizer = 3 * 32 * 32 * d  # every pixel once, whatever p
    block = (4 + 2 * r) * n * d * d + 2 * n * n * d + 2 * 5 * n * d
    return tokenizer + depth * block + 5 * n * d


n = (32 // 4) ** 2 + 1
block = 8 * n * D * D + 2 * n * n * D + 10 * n * D
print(f"patch 4: {seed_flops(4):,} flops; attention {2 * n * n * D / block:.1%} of a block")
""",
    explanation=(
        "With p = 4 there are 8 x 8 = 64 patches and N = 65 tokens. The tokenizer still "
        "costs 3 * 32^2 * D; each block (4 + 2r) N D^2 + 2 N^2 D + 10 N D; the final norm "
        "5 N D: 188,900,544 in all. The attention share drops from a quarter at patch 2 to "
        "under 8%: at 65 tokens the ratio N / 4D of attention to linear work is about 1/12."
    ),
    reference=lambda: (_seed_flops,),
    mistakes=[
        (lambda: (lambda p: 2 * _seed_flops(p),), "multiply-add as one flop"),
        (
            lambda: (lambda p: _seed_flops(p) - 9 * ((32 // p) ** 2 + 1) ** 2 * 192,),
            "two attention matmuls",
        ),
        (
            lambda: (lambda p: _seed_flops(p) - 5 * ((32 // p) ** 2 + 1) * 192,),
            "final LayerNorm",
        ),
        (lambda: (lambda p: _seed_flops_tokens(p, (32 // p) ** 2),), "class token"),
    ],
)

# Exercise 2 ------------------------------------------------------------------------------


def _check_crossing(crossing, patch) -> str:
    if crossing != 768:
        if crossing == 1536:
            raise Mistake(
                "N = 1536 sets N^2 D equal to the linear work: a block has two attention "
                "matmuls, 2 N^2 D = (4 + 2r) N D^2 gives N = (2 + r) D."
            )
        if crossing == 384:
            raise Mistake(
                "N = 384 counts the linear layers as 4 N D^2 only: the MLP adds 2r N D^2 "
                "(r = 2), so (4 + 2r) N D^2 in all."
            )
        raise Mistake(
            f"N = {crossing}: set 2 N^2 D = (4 + 2r) N D^2 and solve for N (D = 192, r = 2)."
        )
    if patch != 1:
        tokens = (32 // patch) ** 2 + 1 if patch in (2, 4, 8, 16, 32) else None
        if tokens is not None:
            raise Mistake(
                f"patch {patch} gives {tokens} tokens, fewer than 768: only patch 1 "
                "(1024 + 1 tokens) gets past the crossing."
            )
        raise Mistake(f"{patch} is not a divisor of 32 that gets past N = 768.")
    return (
        "N = (2 + r) D = 768; only patch 1 (1025 tokens) gets past it, where attention "
        "costs 1025 / 768 = 1.33 times the linear layers."
    )


ex2 = Exercise(
    title="When does attention dominate?",
    checker=_check_crossing,
    hint_text=(
        "Attention: 2 N^2 D (Q K^T and A V). Linear layers: (4 + 2r) N D^2. Set them equal "
        "and solve for N; then compare with (32/p)^2 + 1 for p = 1, 2, 4, 8."
    ),
    solution_code="""
crossing = (2 + 2) * 192  # 2 N^2 D = (4 + 2r) N D^2  =>  N = (2 + r) D = 768
patch = 1  # patch 2 gives 257 tokens; patch 1 gives 1025
""",
    explanation=(
        "Setting 2 N^2 D = (4 + 2r) N D^2 gives N = (2 + r) D = 4D = 768 tokens. Patch 2 "
        "gives 257, so only patch 1 (one token per pixel, 1024 + 1 tokens) gets past it, "
        "where the attention matmuls cost 1025 / 768 = 1.33 times the linear layers. This "
        "is why ViTs for large images use patches of 14 or 16 pixels, and why models that "
        "need many tokens restrict attention to windows (Swin) or pool tokens between "
        "stages."
    ),
    reference=lambda: (768, 1),
    mistakes=[
        (lambda: (1536, 1), "two attention"),
        (lambda: (768, 2), "257 tokens"),
        (lambda: (384, 1), "MLP adds"),
    ],
)

# Exercise 3 ------------------------------------------------------------------------------


# A ViT that classifies the mean of its patch tokens, without its class token (its
# source is exercise 3's solution, as shown).
class MeanPooled(nn.Module):
    def __init__(self, vit):
        super().__init__()
        self.vit = vit

    def forward(self, images):
        z = self.vit.patch_embed(images) + self.vit.pos_embed[:, 1:]
        return self.vit.head(self.vit.norm(self.vit.blocks(z).mean(dim=1)))


_SMALL = dict(img_size=28, in_channels=1, dim=64, depth=1, heads=4, patch_size=7)


def _small_vit():
    torch.manual_seed(0)
    vit = build_model("vit_cifar_p2", num_classes=10, **_SMALL)
    with torch.no_grad():  # no zero tables: a wrong row or a class token shows
        vit.pos_embed.normal_()
        vit.cls_token.normal_()
    return vit.eval()


def _check_mean_pooled(wrapper, unused) -> str:
    vit = _small_vit()
    images = torch.randn(2, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    got = wrapper(vit)(images)
    expected = MeanPooled(vit)(images)
    if got.shape != expected.shape:
        raise Mistake(
            f"the wrapper returns shape {tuple(got.shape)}, not {tuple(expected.shape)}: "
            "average over the tokens (dim=1) before the norm and the head."
        )
    if not torch.allclose(got, expected, atol=1e-5):
        vit.zero_grad()
        got.sum().backward()
        if vit.cls_token.grad is not None and vit.cls_token.grad.abs().sum() > 0:
            raise Mistake(
                "the class token reaches the output: feed only the patch tokens, without "
                "the class token, through the blocks."
            )
        if vit.pos_embed.grad is None or vit.pos_embed.grad.abs().sum() == 0:
            raise Mistake(
                "the outputs differ and no position embedding is used: add "
                "pos_embed[:, 1:], the rows of the patch tokens."
            )
        if vit.pos_embed.grad[0, 0].abs().sum() > 0:
            raise Mistake(
                "row 0 of the position table is the class token's: the patch tokens' "
                "positions are pos_embed[:, 1:]."
            )
        raise Mistake("the outputs differ from the reference wrapper's.")
    d = vit.cls_token.shape[-1]
    if unused != 2 * d:
        if unused == d:
            raise Mistake(
                f"{unused} counts the class token only: row 0 of the position table "
                f"({d} numbers) is never read either."
            )
        raise Mistake(
            f"{unused}: the wrapper never reads the class token ({d}) nor row 0 of the "
            "position table: count both."
        )
    return f"the wrapper matches the reference, and leaves {2 * d} parameters unused."


ex3 = Exercise(
    title="Mean pooling instead of the class token",
    checker=_check_mean_pooled,
    hint_text=(
        "The position table has one row per token, the class token's first: the patch "
        "tokens' rows are pos_embed[:, 1:]. Run self.vit.blocks on the patch tokens, take "
        ".mean(dim=1), then the norm and the head. Unused: what does the wrapper never "
        "read?"
    ),
    solution_code=reference_source(MeanPooled)
    + "\n\nunused = 64 + 64  # cls_token and row 0 of pos_embed, D = 64 each\n",
    explanation=(
        "The wrapper never reads cls_token or row 0 of the position table, so neither "
        "receives a gradient: 2D parameters, 128 for D = 64. A simple mechanism can favour "
        "the average early in training: it gives every patch token a direct path to the "
        "loss from the first step, while the class token starts as one fixed vector and "
        "must first learn, through attention, what to gather. With full training budgets "
        "average pooling works at least as well: Beyer et al. (2022) use it instead of the "
        "class token in their improved ImageNet baseline, and it removes one special case "
        "from the model."
    ),
    reference=lambda: (MeanPooled, 128),
    mistakes=[
        (lambda: (_WithClassToken, 128), "class token reaches"),
        (lambda: (_FirstRows, 128), "row 0"),
        (lambda: (MeanPooled, 64), "class token only"),
    ],
)


class _WithClassToken(MeanPooled):
    def forward(self, images):
        v = self.vit
        z = v.patch_embed(images)
        z = torch.cat([v.cls_token.expand(len(z), -1, -1), z], dim=1) + v.pos_embed
        return v.head(v.norm(v.blocks(z).mean(dim=1)))


class _FirstRows(MeanPooled):
    def forward(self, images):
        v = self.vit
        z = v.patch_embed(images) + v.pos_embed[:, :-1]
        return v.head(v.norm(v.blocks(z).mean(dim=1)))
