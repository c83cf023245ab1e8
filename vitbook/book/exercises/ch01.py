"""Chapter 1's exercises: sequence lengths at the paper's resolutions, Table 3's recipe
against 225 images, what Table 5 says about pre-training data, and a ViT's parameters
counted by hand."""

from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd
import torch

from going_modular.models.vit import ViT
from vitbook.book.exercises import Exercise, Mistake
from vitbook.models.complexity import count_params

__all__ = ["ex1", "ex2", "ex3", "ex4"]


def _letters(answer) -> set[str]:
    """A multiple-choice answer ("b", "a, b", {"a", "b"}, ["A"]) as a set of letters."""
    if isinstance(answer, str):
        answer = answer.replace(",", " ").split() if len(answer) > 1 else [answer]
    return {str(letter).strip().lower() for letter in answer}


# Exercise 1 ------------------------------------------------------------------------------


def _sequence_length(size, patch):
    if size % patch:  # the patches do not tile the image
        return None
    return (size // patch) ** 2 + 1


def _check_sequence_length(sequence_length, h14_resolution) -> str:
    for size, patch in ((224, 16), (384, 16), (224, 14), (32, 4), (518, 14)):
        n, got = (size // patch) ** 2, sequence_length(size, patch)
        where = f"sequence_length({size}, {patch}) = {got}"
        if got == n:
            raise Mistake(
                f"{where} counts the {n} patches only: the class token is one more "
                "token, N + 1."
            )
        if got == size // patch + 1:
            raise Mistake(
                f"{where}: the patches form a {size // patch} x {size // patch} grid, "
                "so N = (size / patch)^2."
            )
        if got != n + 1:
            raise Mistake(f"{where}, expected N + 1 = {n + 1}.")
    got = sequence_length(384, 14)
    if got is not None:
        raise Mistake(
            f"sequence_length(384, 14) = {got}, but 384 / 14 = {384 / 14:.2f} patches "
            "per side: the patches do not tile the image, so return None."
        )
    if h14_resolution == 384:
        raise Mistake(
            "h14_resolution: 384 is the one that does not work with 14-pixel patches; "
            "section 4.1 gives the resolution used for ViT-H/14 instead."
        )
    if h14_resolution % 14:
        raise Mistake(
            f"h14_resolution: {h14_resolution} is not a multiple of 14, so ViT-H/14's "
            "patches would not tile it."
        )
    if h14_resolution != 518:
        raise Mistake(
            f"h14_resolution: {h14_resolution} is a multiple of 14, but not the "
            "resolution section 4.1 gives for ViT-H/14."
        )
    return "ViT-H/14 fine-tuned at 518 = 37 x 14 pixels reads 37^2 + 1 = 1,370 tokens."


ex1 = Exercise(
    title="Sequence lengths",
    checker=_check_sequence_length,
    hint_text=(
        "N = HW / P^2 holds only when P divides the image's side: test size % patch "
        "first. The encoder's sequence is N + 1 long (the class token). Section 4.1 "
        "gives the fine-tuning resolutions of ViT-L/16 and ViT-H/14 for Table 2."
    ),
    solution_code="""
def sequence_length(size, patch):
    if size % patch:  # the patches do not tile the image
        return None
    return (size // patch) ** 2 + 1


h14_resolution = 518  # section 4.1: 512 for ViT-L/16, 518 = 37 x 14 for ViT-H/14

for name, patch in [("ViT-L/16", 16), ("ViT-H/14", 14)]:
    for size in (224, 384):
        print(f"{name} at {size} px: sequence length {sequence_length(size, patch)}")

from going_modular.models.vit import PatchEmbedding

try:  # the package refuses, instead of silently dropping pixels
    PatchEmbedding(patch_size=14, dim=1280)(torch.zeros(1, 3, 384, 384))
except ValueError as e:
    print(f"ValueError: {e}")
""",
    explanation=(
        "ViT-L/16 reads 197 tokens at 224 px and 577 at 384 px; ViT-H/14 reads 257 at "
        "224 px, but 384 is not a multiple of 14. A plain strided convolution would "
        "silently ignore the last 384 - 27 x 14 = 6 rows and columns of pixels; the "
        "package raises an error instead. For its best ImageNet result (Table 2) the "
        "paper fine-tuned ViT-H/14 at 518 pixels, a multiple of 14: 1,370 tokens. Note "
        "how fast the sequence grows: 577 tokens at 384 px with 16-pixel patches, almost "
        "three times the 197 at 224 px, and attention's cost grows with its square."
    ),
    reference=lambda: (_sequence_length, 518),
    mistakes=[
        (lambda: (lambda size, patch: (size // patch) ** 2, 518), "class token"),
        (lambda: (lambda size, patch: (size // patch) ** 2 + 1, 518), "return None"),
        (lambda: (_sequence_length, 384), "does not work"),
        (lambda: (_sequence_length, 512), "not a multiple of 14"),
    ],
)


# Exercise 2 ------------------------------------------------------------------------------


def _warmup_epochs(train_images, batch_size, warmup_steps=10_000):
    steps_per_epoch = math.ceil(train_images / batch_size)
    return warmup_steps / steps_per_epoch


# Table 3's settings a training set of 225 images cannot use as written: letter -> why.
_CANNOT = {
    "a": "a batch of 4096 is larger than the whole training set of 225 images",
    "b": "10k warmup steps would last 1,250 epochs of 225 images in batches of 32 "
    "(your warmup_epochs(225, 32))",
}
_CAN = {
    "c": "Adam's betas average the gradients over the last steps, whatever the size "
    "of the dataset",
    "d": "the resolution is a property of each image: this chapter loads its images "
    "at 224 px",
    "e": "clipping bounds each step's gradient norm, whatever the size of the dataset",
}


def _check_recipe(warmup_epochs, cannot_use) -> str:
    for images, batch, steps in ((225, 32, 10_000), (1000, 100, 10_000), (50, 8, 70)):
        expected = _warmup_epochs(images, batch, steps)
        got = warmup_epochs(images, batch, steps)
        if math.isclose(got, expected):
            continue
        where = f"warmup_epochs({images}, {batch}, {steps}) = {got:,.4g}"
        if math.isclose(got, steps / (images // batch)):
            raise Mistake(
                f"{where}: the last, partial batch is a step too, so an epoch has "
                "ceil(images / batch_size) steps."
            )
        if math.isclose(got, steps / images):
            raise Mistake(
                f"{where}: a step is one batch of batch_size images, not one image."
            )
        raise Mistake(f"{where}, expected {expected:,.4g} epochs.")
    letters = _letters(cannot_use)
    unknown = letters - _CANNOT.keys() - _CAN.keys()
    if unknown:
        raise Mistake(f"cannot_use: choose among the letters a to e, not {unknown}.")
    carries_over = sorted(_CAN.keys() & letters)
    if carries_over:
        letter = carries_over[0]
        raise Mistake(f"cannot_use has {letter}, which carries over: {_CAN[letter]}.")
    missing = sorted(_CANNOT.keys() - letters)
    if missing:
        raise Mistake(f"cannot_use lacks {missing[0]}: {_CANNOT[missing[0]]}.")
    return (
        "with 225 images in batches of 32 an epoch is 8 steps, so the warmup alone "
        "would last 1,250 epochs; and one batch of 4096 would hold the training set "
        "18 times over."
    )


ex2 = Exercise(
    title="A recipe for 225 images?",
    checker=_check_recipe,
    hint_text=(
        "An epoch has one step per batch, and the last batch may be partial. Then, for "
        "each setting, ask whether its value depends on how many images there are."
    ),
    solution_code="""
import math


def warmup_epochs(train_images, batch_size, warmup_steps=10_000):
    steps_per_epoch = math.ceil(train_images / batch_size)  # the last batch counts
    return warmup_steps / steps_per_epoch


cannot_use = {"a", "b"}  # a batch larger than the data; a warmup of 1,250 epochs

print(f"{warmup_epochs(225, 32):,.0f} epochs of warmup with batches of 32")
""",
    explanation=(
        "The batch size of 4096 is larger than the dataset (and the base learning "
        "rates were tuned for it), and 10k warmup steps are 1,250 epochs of 8 steps. "
        "Adam's betas, the resolution of 224 and clipping at global norm 1 do not "
        "depend on the dataset's size and carry over; a warmup followed by cosine decay "
        "carries over too, measured in our own steps. The epoch counts and the JFT "
        "rows' dropout of 0.0 were chosen for millions of images, so they are starting "
        "points at best. The weight decay of 0.3 carries over only in the decoupled "
        "form (AdamW, biases and LayerNorms spared): written as the course writes it, "
        "Adam(weight_decay=0.3), it is a coupled L2 penalty, a different thing, which "
        "chapter 6 compares with it (The recipe, one factor at a time). Pre-training "
        "itself, the point of Table 3, needs a large dataset we do not have."
    ),
    reference=lambda: (_warmup_epochs, {"a", "b"}),
    mistakes=[
        (lambda: (lambda n, b, s=10_000: s / (n // b), {"a", "b"}), "partial batch"),
        (lambda: (lambda n, b, s=10_000: s / n, {"a", "b"}), "not one image"),
        (lambda: (_warmup_epochs, {"a", "b", "e"}), "has e"),
        (lambda: (_warmup_epochs, "a"), "lacks b"),
    ],
)


# Exercise 3 ------------------------------------------------------------------------------

# Table 5 of the paper (appendix C): ImageNet top-1 accuracy (%) after fine-tuning at
# 384 px, by pre-training dataset.
_TABLE_5 = pd.DataFrame(
    {
        "ViT-B/32": [73.38, 81.28, 80.73],
        "ViT-B/16": [77.91, 83.97, 84.15],
        "ViT-L/32": [71.16, 80.99, 84.37],
        "ViT-L/16": [76.53, 85.15, 87.12],
    },
    index=pd.Index(["ImageNet", "ImageNet-21k", "JFT-300M"], name="pre-trained on"),
)

# Why ViT needs large pre-training data: letter -> what is wrong with it ("b" is right).
_REASONS = {
    "a": "the batch size is not what Table 5 varies: along a column the model and its "
    "recipe stay the same, only the pre-training data change",
    "c": "nothing is lost: the projection E sees every pixel of its patch, and the "
    "position embeddings tell where each patch was",
    "d": "all are pre-trained at 224 px and fine-tuned at 384 px: along a column only "
    "the number of images changes",
}


def _large_minus_base(table5, patch):
    return table5[f"ViT-L/{patch}"] - table5[f"ViT-B/{patch}"]


def _check_table_5(large_minus_base, reason) -> str:
    for patch in (16, 32):
        expected = _large_minus_base(_TABLE_5, patch)
        got = large_minus_base(_TABLE_5.copy(), patch)
        if not isinstance(got, pd.Series):
            raise Mistake(
                f"return a pandas Series (one number per pre-training dataset), not a "
                f"{type(got).__name__}."
            )
        if list(got.index) != list(expected.index):
            raise Mistake("keep Table 5's rows: one number per pre-training dataset.")
        if got.round(2).equals(-expected.round(2)):
            raise Mistake(
                f"patch={patch}: the wrong way round; the large model minus the base "
                "one is positive where the large model is better."
            )
        if patch == 32 and got.round(2).equals(
            _large_minus_base(_TABLE_5, 16).round(2)
        ):
            raise Mistake(
                "patch=32 gives the /16 columns: build the column names from patch, "
                'f"ViT-L/{patch}".'
            )
        if not got.round(2).equals(expected.round(2)):
            raise Mistake(f"patch={patch}: got {got.round(2).to_dict()}.")
    letters = _letters(reason)
    if letters == {"b"}:
        return (
            "pre-trained on ImageNet, ViT-L/16 is 1.4 points below ViT-B/16; on "
            "JFT-300M it is 3.0 points above."
        )
    if len(letters) != 1 or not letters <= {"a", "b", "c", "d"}:
        raise Mistake("reason: one letter, a, b, c or d.")
    (letter,) = letters
    raise Mistake(f"reason {letter}: {_REASONS[letter]}.")


ex3 = Exercise(
    title="Why pre-training data matters",
    checker=_check_table_5,
    hint_text=(
        "Select the two columns by name (they differ only in B or L) and subtract. For "
        "the reason, read section 3.1's paragraph on inductive bias."
    ),
    solution_code="""
def large_minus_base(table5, patch):
    return table5[f"ViT-L/{patch}"] - table5[f"ViT-B/{patch}"]


reason = "b"

print(large_minus_base(table5, 16).round(2).to_dict())
print(large_minus_base(table5, 32).round(2).to_dict())
""",
    explanation=(
        "A convolution builds in two assumptions about images: nearby pixels belong "
        "together (locality) and a pattern means the same thing wherever it appears "
        "(translation equivariance). ViT builds in almost none: only the cutting into "
        "patches, and its position embeddings start out knowing nothing about 2-D "
        "position (section 3.1, Inductive bias). It has to learn those regularities "
        "from data. Pre-trained on ImageNet's 1.3M images, the large ViT is worse than "
        "the base one (76.5% against 77.9% for /16) and both are below the BiT ResNets "
        "(Figure 3's shaded region); with ImageNet-21k the sizes draw level (the /16 "
        "large model 1.2 points ahead, the /32 one 0.3 behind), and only with JFT-300M "
        "does the larger model pay off (87.1% against 84.2%) and ViT overtake the "
        "ResNets. The paper's subset experiment says the same: ViT-B/32 is much worse "
        "than a ResNet50 on 9M JFT images but better on 90M and more; in the paper's "
        'words, "large scale training trumps inductive bias".\n\n'
        "For us this means a ViT trained from scratch on 225 images, more than five "
        "thousand times fewer than ImageNet, should be expected to do poorly; that is "
        "not a bug in our code. The ways out, both in this book, are to borrow "
        "pre-trained weights (transfer learning) or to put some convolutional inductive "
        "bias back into the model (Compact Transformers)."
    ),
    reference=lambda: (_large_minus_base, "b"),
    mistakes=[
        (lambda: (lambda t, p: t[f"ViT-B/{p}"] - t[f"ViT-L/{p}"], "b"), "wrong way"),
        (lambda: (lambda t, p: t["ViT-L/16"] - t["ViT-B/16"], "b"), 'f"ViT-L/{patch}"'),
        (lambda: (_large_minus_base, "a"), "reason a"),
        (lambda: (_large_minus_base, "c"), "nothing is lost"),
    ],
)


# Exercise 4 ------------------------------------------------------------------------------


def _vit_params(P, C, N, D, L, mlp, K):
    patch = P * P * C * D + D  # E as a Conv2d: weight and bias
    tokens = D + (N + 1) * D  # x_class and E_pos
    layer = (
        2 * D  # LayerNorm before MSA: scale and shift
        + D * 3 * D
        + 3 * D  # q, k, v projections
        + D * D
        + D  # output projection of the heads
        + 2 * D  # LayerNorm before the MLP
        + D * mlp
        + mlp
        + mlp * D
        + D  # the MLP's two Linear layers
    )
    head = 2 * D + D * K + K  # final LayerNorm (Equation 4) and the linear head
    return patch + tokens + L * layer + head


# (P, C, image side, D, L, MLP ratio, K): ViT-B/16 with 3 classes and two small ViTs
_CONFIGS = [
    (16, 3, 224, 768, 12, 4, 3),
    (8, 1, 32, 24, 2, 3, 5),
    (4, 3, 48, 16, 3, 2, 7),
]

# What a count may leave out: (P, C, N, D, L, mlp, K) -> parameters, and the words.
_PARTS: list[tuple[Callable[..., int], str]] = [
    (
        lambda P, C, N, D, L, mlp, K: D + L * (3 * D + D + mlp + D) + K,
        "the biases are missing: the patch projection and every Linear add one per "
        "output",
    ),
    (
        lambda P, C, N, D, L, mlp, K: L * 4 * D + 2 * D,
        "the LayerNorms are missing: each has a scale and a shift of D numbers, two in "
        "every layer and the final one of Equation 4",
    ),
    (
        lambda P, C, N, D, L, mlp, K: 2 * D,
        "the final LayerNorm of Equation 4 is missing (a scale and a shift of D)",
    ),
    (
        lambda P, C, N, D, L, mlp, K: D,
        "one D-vector short: the class token x_class is one, and E_pos has N + 1 rows, "
        "one for the class token too",
    ),
    (
        lambda P, C, N, D, L, mlp, K: L * (2 * D * D + 2 * D),
        "q, k and v are three projections of D x D (with biases), not one",
    ),
    (
        lambda P, C, N, D, L, mlp, K: D * K + K,
        "the linear head (D x K weights and K biases) is missing",
    ),
    (
        lambda P, C, N, D, L, mlp, K: L * (mlp * D + D),
        "the MLP has two Linear layers, D -> mlp and mlp -> D",
    ),
]


def _check_vit_params(vit_params) -> str:
    for P, C, side, D, L, ratio, K in _CONFIGS:
        with torch.device("meta"):  # sizes only, no memory
            model = ViT(
                img_size=side,
                patch_size=P,
                in_channels=C,
                num_classes=K,
                dim=D,
                depth=L,
                heads=2,
                mlp_ratio=ratio,
            )
        sizes = (P, C, (side // P) ** 2, D, L, ratio * D, K)
        expected, got = count_params(model), vit_params(*sizes)
        if got == expected:
            continue
        for part, words in _PARTS:
            if expected - got == part(*sizes):
                raise Mistake(f"vit_params{sizes}: {words}.")
        raise Mistake(
            f"vit_params{sizes} = {got:,}, but the package's model has {expected:,} "
            f"({expected - got:+,}): count each part of the equations in turn."
        )
    return "every weight and bias, as count_params counts them."


def _without(part: int) -> Callable[..., int]:
    """The reference count, minus one of :data:`_PARTS`."""
    return lambda *sizes: _vit_params(*sizes) - _PARTS[part][0](*sizes)


ex4 = Exercise(
    title="Parameters by hand",
    checker=_check_vit_params,
    hint_text=(
        "Go through the equations: the patch projection E (a Linear from P^2 C to D, "
        "with a bias), x_class and E_pos ((N + 1) x D), then per layer two LayerNorms, "
        "the q, k, v and output projections of attention and the MLP's two Linears, "
        "and at the end the final LayerNorm and the head. Every Linear has a bias; a "
        "LayerNorm has a scale and a shift."
    ),
    solution_code="""
def vit_params(P, C, N, D, L, mlp, K):
    patch = P * P * C * D + D  # E as a Conv2d/Linear: weight and bias
    tokens = D + (N + 1) * D  # x_class and E_pos
    layer = (
        2 * D  # LayerNorm before MSA: scale and shift
        + D * 3 * D + 3 * D  # q, k, v projections
        + D * D + D  # output projection of the heads
        + 2 * D  # LayerNorm before the MLP
        + D * mlp + mlp + mlp * D + D  # the MLP's two Linear layers
    )
    head = 2 * D + D * K + K  # final LayerNorm (Equation 4) and the linear head
    return patch + tokens + L * layer + head


for name, (P, D, L, mlp) in {
    "vit_b_16": (16, 768, 12, 3072),
    "vit_l_16": (16, 1024, 24, 4096),
    "vit_h_14": (14, 1280, 32, 5120),
}.items():
    with torch.device("meta"):
        model = build_model(name, num_classes=1000)
    by_hand = vit_params(P, 3, (224 // P) ** 2, D, L, mlp, 1000)
    print(f"{name}: by hand {by_hand:,} | package {count_params(model):,}")
""",
    explanation=(
        "Almost all parameters sit in the encoder layers, 12 D^2 + 13 D per layer with "
        "an MLP of 4 D; the patch projection, the class token and the position "
        "embeddings together are under 1% of ViT-B/16. With 3 classes ViT-B/16 has "
        "85,800,963 parameters; with 1,000 classes, 86,567,656."
    ),
    reference=lambda: (_vit_params,),
    mistakes=[
        (lambda: (_without(0),), "biases are missing"),
        (lambda: (_without(1),), "LayerNorms are missing"),
        (lambda: (_without(3),), "N + 1 rows"),
    ],
)
