"""Chapter 9's exercises: CCT-2/3x2 with a class token instead of SeqPool, a CCT for
64 x 64 images, and ViT-Lite with 8 x 8 patches."""

from __future__ import annotations

from going_modular.models.cct import CompactTransformer, Tokenizer, ViTLite
from going_modular.models.registry import build_model
from vitbook.book.exercises import Exercise, Mistake
from vitbook.models.complexity import count_params

__all__ = ["ex1", "ex2", "ex3"]


# Exercise 1 ------------------------------------------------------------------------------


def _class_token_cct(pool: str = "cls") -> CompactTransformer:
    tokenizer = Tokenizer(1, 128, kernel_size=3, stride=1, padding=1, n_conv_layers=2)
    return CompactTransformer(
        tokenizer,
        img_size=32,
        pool=pool,
        num_classes=10,
        dim=128,
        depth=2,
        heads=2,
        mlp_ratio=1.0,
    )


def _check_class_token(make_model, extra_parameters) -> str:
    model = make_model()
    seqpool = build_model("cct_2_3x2", num_classes=10, img_size=32, in_channels=1)
    if getattr(model, "cls_token", None) is None:
        raise Mistake(
            "your model has no class token (model.cls_token is None): it still pools "
            'with SeqPool or a mean; build it with pool="cls".'
        )
    ours, reference = count_params(model), count_params(_class_token_cct())
    if ours != reference:
        raise Mistake(
            f"your model has {ours:,} parameters, CCT-2/3x2 with a class token "
            f"{reference:,}: keep cct_2_3x2's tokenizer and transformer (width 128, 2 "
            "layers, 2 heads, MLP ratio 1) for one-channel 32 x 32 images."
        )
    difference = ours - count_params(seqpool)
    if extra_parameters != difference:
        if extra_parameters == 2 * 128:
            raise Mistake(
                f"{extra_parameters} counts the class token and its position (2d) but "
                "forgets what the class token replaces: SeqPool's g, d + 1 parameters."
            )
        raise Mistake(
            f"extra_parameters = {extra_parameters}, but the models differ by "
            f"{difference}: count the class token and its row of the position "
            "embedding, less SeqPool's weight vector and bias."
        )
    return f"the class token version has {difference} parameters more: 2d - (d + 1)."


ex1 = Exercise(
    title="SeqPool or class token?",
    checker=_check_class_token,
    hint_text=(
        "CompactTransformer takes pool='seq' (SeqPool, CCT's) or pool='cls' (a class "
        "token, ViT-Lite's). For the count: a class token is d numbers and it needs a "
        "position, another d; SeqPool's g is a Linear(d, 1)."
    ),
    solution_code="""
def cct_2_3x2_class_token():
    tokenizer = Tokenizer(1, 128, kernel_size=3, stride=1, padding=1, n_conv_layers=2)
    return CompactTransformer(
        tokenizer, img_size=32, pool="cls", num_classes=10,
        dim=128, depth=2, heads=2, mlp_ratio=1.0,
    )


extra_parameters = 2 * 128 - (128 + 1)  # token + its position - SeqPool's g
ex1.check(cct_2_3x2_class_token, extra_parameters)
""",
    explanation=(
        "The class token version has 2 x 128 - (128 + 1) = 127 parameters more: its token "
        "and its position (2d) against g's weight and bias (d + 1). At initialisation the "
        "class token is the same vector for every image and collects image content only "
        "through attention, whose output starts small, so what reaches the head barely "
        "differs between images; SeqPool's average carries the tokenizer's features from "
        "the first step. The cell after the exercise measures that spread."
    ),
    reference=lambda: (_class_token_cct, 127),
    mistakes=(
        (lambda: (lambda: _class_token_cct("seq"), 127), "no class token"),
        (lambda: (_class_token_cct, 256), "forgets what the class token replaces"),
        (lambda: (_class_token_cct, 128), "but the models differ by 127"),
    ),
)


# Exercise 2 ------------------------------------------------------------------------------


def _check_64(tokens_3x1, tokens_3x2, attention_growth) -> str:
    expected = {}
    for name in ("cct_7_3x1", "cct_7_3x2"):
        model = build_model(name, img_size=64)
        expected[name] = model.grid_size[0] * model.grid_size[1]
    if (tokens_3x1, tokens_3x2) != (expected["cct_7_3x1"], expected["cct_7_3x2"]):
        if (tokens_3x1, tokens_3x2) == (16 * 16, 8 * 8):
            raise Mistake(
                "those are the token counts at 32 x 32: at 64 x 64 each side is twice as "
                "long before the tokenizer's poolings halve it."
            )
        raise Mistake(
            f"({tokens_3x1}, {tokens_3x2}) tokens is not right: the 3 x 3 stride-1 "
            "convolution keeps the size, each stride-2 max-pool halves it; count the "
            "tokens as side x side."
        )
    if attention_growth != 16:
        raise Mistake(
            f"attention's work grows {attention_growth}-fold? It compares every pair of "
            "tokens: 4 times the tokens give 4 x 4 times the pairs."
        )
    return (
        "1024 and 256 tokens; attention's work grows 16-fold with 4 times the tokens."
    )


ex2 = Exercise(
    title="A CCT for 64 x 64 images",
    checker=_check_64,
    hint_text=(
        "Follow the side length: H_out = floor((H + 2p - k) / s) + 1 for the convolution "
        "(k=3, s=1, p=1) and the max-pool (k=3, s=2, p=1), once for 3x1, twice for 3x2. "
        "Then build_model(name, img_size=64).grid_size checks you. Attention's QK^T and "
        "AV cost 2 N^2 D each layer."
    ),
    solution_code="""
tokens_3x1 = 32 * 32  # 64 -> conv 64 -> pool 32
tokens_3x2 = 16 * 16  # 64 -> 32 -> 16
attention_growth = 4**2  # N^2: 4 times the tokens
ex2.check(tokens_3x1, tokens_3x2, attention_growth)
for name in ("cct_7_3x1", "cct_7_3x2"):
    small, large = build_model(name, img_size=32), build_model(name, img_size=64)
    print(name, large.grid_size, count_params(large) - count_params(small),
          count_macs(large, (1, 3, 64, 64))["attention"]
          / count_macs(small, (1, 3, 32, 32))["attention"])
""",
    explanation=(
        "One block leaves 64 -> 32, so 32 x 32 = 1024 tokens; two blocks leave 16 x 16 = "
        "256. Only the position embedding grows with the image (one row per token); four "
        "times the tokens give four times the linear work and sixteen times the "
        "attention products (slightly under 16 counted by count_macs, whose attention "
        "line also holds SeqPool's weighted sum, which grows 4-fold). So CCT-7/3x1 at 64 "
        "pixels spends about half of its work in attention, and a second convolution "
        "block brings it back to 256 tokens. A model built for 32 x 32 refuses a "
        "64 x 64 image with a ValueError that says what to do."
    ),
    reference=lambda: (1024, 256, 16),
    mistakes=(
        (lambda: (256, 64, 16), "the token counts at 32 x 32"),
        (lambda: (1024, 256, 4), "4 x 4 times the pairs"),
        (lambda: (512, 128, 16), "is not right"),
    ),
)


# Exercise 3 ------------------------------------------------------------------------------


def _vit_lite_7(patch_size: int) -> ViTLite:
    return ViTLite(
        img_size=32, patch_size=patch_size, depth=7, dim=256, heads=4, mlp_ratio=2.0
    )


def _check_bigger_patches(make_model, extra_parameters) -> str:
    model = make_model()
    if tuple(model.grid_size) != (4, 4):
        raise Mistake(
            f"your model has a {model.grid_size} grid of patches: 8 x 8 patches of a "
            "32 x 32 image make a 4 x 4 grid (patch_size=8)."
        )
    ours, reference = count_params(model), count_params(_vit_lite_7(8))
    if ours != reference:
        raise Mistake(
            f"your model has {ours:,} parameters, ViT-Lite-7/8 {reference:,}: only the "
            "patch size changes from ViT-Lite-7/4 (7 layers, width 256, 4 heads, MLP "
            "ratio 2)."
        )
    difference = reference - count_params(_vit_lite_7(4))
    if extra_parameters != difference:
        if extra_parameters == 8 * 8 * 3 * 256 - 4 * 4 * 3 * 256:
            raise Mistake(
                f"{extra_parameters:,} is the larger patch projection alone: the "
                "position embedding loses 48 rows of 256 (17 positions instead of 65)."
            )
        raise Mistake(
            f"extra_parameters = {extra_parameters:,}, but ViT-Lite-7/8 has "
            f"{difference:+,} parameters over ViT-Lite-7/4: add what the patch "
            "projection gains and what the position embedding loses."
        )
    return (
        f"{difference:+,} parameters: +36,864 in the patch projection, -12,288 in the "
        "position embedding."
    )


ex3 = Exercise(
    title="Bigger patches",
    checker=_check_bigger_patches,
    hint_text=(
        "ViTLite(img_size=32, patch_size=..., depth=7, dim=256, heads=4, mlp_ratio=2.0). "
        "Two parts depend on the patch size: the projection of one patch (p x p x 3 "
        "numbers to 256, plus a bias that does not change) and the position embedding "
        "(one row of 256 per token, class token included)."
    ),
    solution_code="""
def vit_lite_7_8():
    return ViTLite(img_size=32, patch_size=8, depth=7, dim=256, heads=4, mlp_ratio=2.0)


# projection 8*8*3*256 - 4*4*3*256, positions (17 - 65) * 256
extra_parameters = (8 * 8 - 4 * 4) * 3 * 256 + (17 - 65) * 256
ex3.check(vit_lite_7_8, extra_parameters)
macs_8 = count_macs(vit_lite_7_8(), (1, 3, 32, 32))
macs_4 = count_macs(build_model("vit_lite_7_4"), (1, 3, 32, 32))
print({k: macs_4[k] / macs_8[k] for k in ("linear", "attention")})
""",
    explanation=(
        "16 tokens instead of 64: the projection of a patch has four times the weights "
        "(+36,864), the position embedding 48 rows fewer (-12,288), and the transformer "
        "is unchanged: +24,576 in all. With the class token the sequence shrinks from 65 "
        "to 17 tokens, so the linear work drops about 65/17 = 3.8-fold and attention "
        "about (65/17)^2 = 14.6-fold, but each token now summarises an 8 x 8 patch, a "
        "quarter of the image's width: far less detail for attention to relate."
    ),
    reference=lambda: (lambda: _vit_lite_7(8), 24_576),
    mistakes=(
        (lambda: (lambda: _vit_lite_7(4), 24_576), "4 x 4 grid"),
        (lambda: (lambda: _vit_lite_7(8), 36_864), "the larger patch projection alone"),
        (lambda: (lambda: _vit_lite_7(8), -24_576), "add what the patch"),
    ),
)
