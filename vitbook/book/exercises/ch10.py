"""Chapter 10's exercises: what "magnitude 9" means in timm and in torchvision, the mean
confidence that label smoothing is meant to curb, and how often MixUp and CutMix leave a
batch nearly unmixed."""

from __future__ import annotations

import math

import torch
from scipy import stats

from vitbook.book.exercises import Exercise, Mistake

__all__ = ["ex1", "ex2", "ex3"]


# Exercise 1 ------------------------------------------------------------------------------


def _rotation_degrees(m: int) -> tuple[float, float]:
    from timm.data.auto_augment import LEVEL_TO_ARG

    timm_degrees = abs(LEVEL_TO_ARG["Rotate"](m, {})[0])
    torchvision_degrees = torch.linspace(0, 30, 31)[m].item()
    return timm_degrees, torchvision_degrees


def _check_rotation(rotation_degrees) -> str:
    for m in (0, 3, 9, 10):
        got = tuple(float(v) for v in rotation_degrees(m))
        want = _rotation_degrees(m)
        if len(got) != 2:
            raise Mistake(
                "return two numbers: (timm's degrees, torchvision's degrees)."
            )
        if not math.isclose(got[0], want[0], abs_tol=1e-4):
            raise Mistake(
                f"at magnitude {m} timm rotates by {want[0]:g} degrees, you said "
                f"{got[0]:g}: timm's levels run from 0 to 10 (_LEVEL_DENOM), so level m "
                "is 30 * m / 10 degrees."
            )
        if not math.isclose(got[1], want[1], abs_tol=1e-4):
            raise Mistake(
                f"at magnitude {m} torchvision rotates by {want[1]:g} degrees, you said "
                f"{got[1]:g}: torchvision's magnitude is an index into "
                "torch.linspace(0, 30, 31), 31 bins of one degree."
            )
    return "timm's magnitude 9 rotates by 27 degrees, torchvision's by 9."


ex1 = Exercise(
    title='What does "magnitude 9" mean?',
    checker=_check_rotation,
    hint_text=(
        'LEVEL_TO_ARG["Rotate"](m, {}) returns a tuple whose first entry is the angle, '
        "with a random sign (take abs). torchvision's RandAugment builds its rotation "
        "magnitudes as torch.linspace(0.0, 30.0, num_bins) with num_bins = 31 and picks "
        "entry m."
    ),
    solution_code="""
def rotation_degrees(m):
    timm_degrees = abs(LEVEL_TO_ARG["Rotate"](m, {})[0])  # level m of 10, sign dropped
    torchvision_degrees = torch.linspace(0, 30, 31)[m].item()  # bin m of 31
    return timm_degrees, torchvision_degrees


print(rotation_degrees(9))
""",
    explanation=(
        "timm's levels run from 0 to 10 and a rotation at level M is 30 M / 10 degrees: "
        "27 degrees at M = 9. torchvision's RandAugment splits the same 30 degrees into 31 "
        "bins, so magnitude 9 is 9 degrees, a third as strong. Every operation scales the "
        "same way, so 'RandAugment, magnitude 9' means different things in the two "
        "libraries; the reference's is timm's (which also draws the magnitude around 9 "
        "with standard deviation 0.5 and picks the rotation's sign at random)."
    ),
    reference=lambda: (_rotation_degrees,),
    mistakes=(
        (lambda: (lambda m: (float(m), float(m)),), "levels run from 0 to 10"),
        (lambda: (lambda m: (3.0 * m, 3.0 * m),), "31 bins of one degree"),
        (lambda: (lambda m: (3.0 * m, 30.0 * m / 31),), "31 bins of one degree"),
    ),
)


# Exercise 2 ------------------------------------------------------------------------------


def _mean_confidence(logits: torch.Tensor) -> float:
    return logits.float().softmax(dim=1).max(dim=1).values.mean().item()


def _check_confidence(mean_confidence) -> str:
    torch.manual_seed(0)
    for scale in (0.5, 3.0):
        logits = scale * torch.randn(64, 10)
        got, want = float(mean_confidence(logits)), _mean_confidence(logits)
        if math.isclose(got, 0.1, abs_tol=1e-6):
            raise Mistake(
                "you averaged every probability (each row sums to 1, so that is always "
                "1/K = 0.1): take the largest probability of each row, then the mean."
            )
        if math.isclose(got, logits.max(dim=1).values.mean().item(), rel_tol=1e-5):
            raise Mistake(
                "that is the mean of the largest logit: apply a softmax over the classes "
                "(dim=1) first, so that each row is a probability distribution."
            )
        if not math.isclose(got, want, rel_tol=1e-4):
            raise Mistake(
                f"for these logits the mean confidence is {want:.4f}, you said {got:.4f}: "
                "softmax over dim=1, the largest value of each row, then the mean over "
                "the rows."
            )
    return "the mean of the largest softmax probability: the model's mean confidence."


ex2 = Exercise(
    title="Turn off label smoothing",
    checker=_check_confidence,
    hint_text=(
        "logits.softmax(dim=1) turns each row into probabilities; .max(dim=1).values is "
        "each image's largest one, the probability of the predicted class."
    ),
    solution_code="""
def mean_confidence(logits):
    return logits.float().softmax(dim=1).max(dim=1).values.mean().item()
""",
    explanation=(
        "A model's confidence on an image is the probability it gives its predicted "
        "class, the largest softmax probability; its mean over the test images, set "
        "against the test accuracy, says whether the model is over-confident (mean "
        "confidence above accuracy) or under-confident. With label smoothing 0.1 the best "
        "the loss can ask for is 0.91 on the true class, so smoothing pulls the confidence "
        "down. The cell after the exercise compares the ablation's runs with and without "
        "smoothing, seed by seed, with this function."
    ),
    reference=lambda: (_mean_confidence,),
    mistakes=(
        (lambda: (lambda z: z.softmax(dim=1).mean().item(),), "1/K = 0.1"),
        (lambda: (lambda z: z.max(dim=1).values.mean().item(),), "largest logit"),
        (
            lambda: (lambda z: z.softmax(dim=0).max(dim=1).values.mean().item(),),
            "softmax over dim=1",
        ),
    ),
)


# Exercise 3 ------------------------------------------------------------------------------


def _nearly_unmixed(alpha: float, threshold: float = 0.1) -> float:
    return 2 * stats.beta(alpha, alpha).cdf(threshold)


def _check_unmixed(nearly_unmixed) -> str:
    for alpha in (0.8, 1.0, 2.0):
        got, want = float(nearly_unmixed(alpha)), _nearly_unmixed(alpha)
        if math.isclose(got, want / 2, rel_tol=1e-4):
            raise Mistake(
                f"for alpha = {alpha} you found {got:.4f}, half of {want:.4f}: "
                "min(lambda, 1 - lambda) < 0.1 holds near 0 and near 1, both tails of "
                "the symmetric Beta(alpha, alpha)."
            )
        if math.isclose(got, 1 - want / 2, rel_tol=1e-4):
            raise Mistake(
                "that is the probability of lambda above 0.1: 'nearly unmixed' is "
                "lambda below 0.1 or above 0.9."
            )
        if not math.isclose(got, want, rel_tol=1e-3):
            raise Mistake(
                f"for alpha = {alpha} the fraction is {want:.4f}, you said {got:.4f}."
            )
    return "MixUp's Beta(0.8, 0.8) leaves more batches nearly unmixed than CutMix's."


ex3 = Exercise(
    title="How mixed is a mixed batch?",
    checker=_check_unmixed,
    hint_text=(
        "stats.beta(a, b).cdf(x) is P(lambda < x). Beta(alpha, alpha) is symmetric "
        "about 1/2, so P(lambda > 0.9) = P(lambda < 0.1)."
    ),
    solution_code="""
def nearly_unmixed(alpha, threshold=0.1):
    return 2 * stats.beta(alpha, alpha).cdf(threshold)  # both tails


rng = np.random.default_rng(0)
for name, alpha in (("MixUp", 0.8), ("CutMix", 1.0)):
    lam = rng.beta(alpha, alpha, size=100_000)
    drawn = np.mean(np.minimum(lam, 1 - lam) < 0.1)
    print(f"{name}: {nearly_unmixed(alpha):.3f} exact, {drawn:.3f} drawn")
""",
    explanation=(
        "Beta(1, 1) is uniform, so CutMix's boxes leave 10% or less of one image in 20% "
        "of batches. Beta(0.8, 0.8) puts more weight near 0 and 1, so MixUp's batches are "
        "nearly unmixed somewhat more often (about 26%); most batches are a real blend "
        "of two images either way. (For CutMix timm then corrects lambda to the area "
        "actually pasted after the box is clipped at the border, so its final lambda is a "
        "little closer to 1.)"
    ),
    reference=lambda: (_nearly_unmixed,),
    mistakes=(
        (lambda: (lambda a, t=0.1: stats.beta(a, a).cdf(t),), "both tails"),
        (lambda: (lambda a, t=0.1: 1 - stats.beta(a, a).cdf(t),), "above 0.1"),
    ),
)
