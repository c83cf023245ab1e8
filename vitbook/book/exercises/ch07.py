"""Chapter 7's exercises: the class token after every layer, the uniform line of the
attention-distance plot by hand, the AUROC of the maximum probability, and what to ship."""

from __future__ import annotations

import math

import numpy as np
import torch
from sklearn.metrics import roc_auc_score

from vitbook.book.attention_maps import patch_distances
from vitbook.book.exercises import Exercise, Mistake, reference_source
from vitbook.models.fashion_source import source_vit

__all__ = ["ex1", "ex2", "ex3", "ex4"]


# Exercise 1 ------------------------------------------------------------------------------


def class_tokens_per_layer(vit, x):
    """(L, B, D): LN(z_l^0) for every layer l, collected by forward hooks."""
    tokens = []

    def keep(module, args, z):
        tokens.append(z[:, 0])  # this block's class token

    hooks = [block.register_forward_hook(keep) for block in vit.blocks]
    try:
        vit.eval()
        with torch.inference_mode():
            vit(x)
    finally:
        for hook in hooks:
            hook.remove()
    with torch.inference_mode():
        normed = [vit.norm(t) for t in tokens]
    return torch.stack(normed)


def _check_class_tokens(answer) -> str:
    torch.manual_seed(0)
    vit = source_vit(3)
    x = torch.randn(4, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    expected = class_tokens_per_layer(vit, x)
    got = answer(vit, x)
    got = torch.as_tensor(got).detach()
    if got.shape != expected.shape:
        raise Mistake(
            f"the result has shape {tuple(got.shape)}, not (L, B, D) = "
            f"{tuple(expected.shape)}: one class token per layer and image."
        )
    if any(h for block in vit.blocks for h in block._forward_hooks.values()):
        raise Mistake("the hooks are still registered: remove them when done.")
    if torch.allclose(got, expected, atol=1e-5):
        return "the class token after every layer, through the final LayerNorm."
    raw = expected.new_tensor(0)
    with torch.inference_mode():
        tokens = []
        hooks = [
            b.register_forward_hook(lambda m, a, z: tokens.append(z[:, 0]))
            for b in vit.blocks
        ]
        vit.eval()(x)
        for h in hooks:
            h.remove()
        raw = torch.stack(tokens)
    if torch.allclose(got, raw, atol=1e-5):
        raise Mistake(
            "these are the raw class tokens z_l^0: pass each through the backbone's "
            "final LayerNorm (vit.norm), as the probe reads phi(x) = LN(z_L^0)."
        )
    if torch.allclose(got[-1], expected[-1], atol=1e-5):
        raise Mistake(
            "the last layer is right but earlier ones are not: collect the output of "
            "every block (a forward hook on each of vit.blocks)."
        )
    raise Mistake(
        "the tokens differ from LN(z_l^0): take row 0 of each block's output "
        "(z[:, 0]), in eval mode."
    )


def _last_layer_only(vit, x):
    return class_tokens_per_layer(vit, x)[-1:].expand(len(vit.blocks), -1, -1)


def _no_norm(vit, x):
    tokens = []
    hooks = [
        b.register_forward_hook(lambda m, a, z: tokens.append(z[:, 0]))
        for b in vit.blocks
    ]
    vit.eval()
    with torch.inference_mode():
        vit(x)
    for h in hooks:
        h.remove()
    return torch.stack(tokens)


ex1 = Exercise(
    title="The class token after every layer",
    checker=_check_class_tokens,
    hint_text=(
        "block.register_forward_hook(fn) calls fn(module, args, output) after each "
        "block; output[:, 0] is that layer's class token. Remove the hooks afterwards "
        "(try/finally), and pass each token through vit.norm."
    ),
    solution_code=reference_source(class_tokens_per_layer),
    explanation=(
        "The linear probe reads LN(z_L^0), the last block's class token through the "
        "final LayerNorm. Reading LN(z_l^0) after each block l gives a probe per layer: "
        "Yosinski et al. (2014) measured in this way how features turn from general to "
        "specific with depth."
    ),
    reference=lambda: (class_tokens_per_layer,),
    mistakes=[
        (lambda: (_no_norm,), "final LayerNorm"),
        (lambda: (_last_layer_only,), "every block"),
    ],
)


# Exercise 2 ------------------------------------------------------------------------------


def _reference_mean_distance(grid, patch):
    centres = [(patch * r, patch * c) for r in range(grid) for c in range(grid)]
    total = sum(math.dist(p, q) for p in centres for q in centres)
    return total / len(centres) ** 2


def _check_mean_distance(mean_patch_distance, answer) -> str:
    for grid, patch in ((7, 4), (3, 2), (4, 16)):
        expected = patch_distances(grid, patch).mean().item()
        got = float(mean_patch_distance(grid, patch))
        if math.isclose(got, expected, rel_tol=1e-5):
            continue
        n = grid * grid
        if math.isclose(got, expected * n / (n - 1), rel_tol=1e-5):
            raise Mistake(
                f"grid {grid}, patches of {patch}: {got:.4f} is the mean over pairs of "
                "DIFFERENT patches; count every ordered pair, a patch with itself "
                "included (divide by N^2)."
            )
        if math.isclose(got * patch, expected, rel_tol=1e-5):
            raise Mistake(
                f"grid {grid}: {got:.4f} is in patches, not pixels: the centres of "
                "neighbouring patches are patch_size pixels apart."
            )
        raise Mistake(
            f"grid {grid}, patches of {patch}: {got:.4f}, expected {expected:.4f}."
        )
    if answer != "b":
        raise Mistake(
            {
                "a": "trained heads are not uniform, on average or otherwise: the line is "
                "what a head WOULD give if it attended uniformly (see b).",
                "c": "a uniform head does not attend to its own patch only: that "
                "would give a distance of 0.",
            }.get(
                str(answer),
                f"{answer!r} is not one of the choices a, b, c.",
            )
        )
    return "the uniform line, by hand."


ex2 = Exercise(
    title="The uniform line by hand",
    checker=_check_mean_distance,
    hint_text=(
        "The centre of patch (r, c) sits at (patch * r, patch * c) pixels (a shift of "
        "all centres changes no distance). Sum math.dist over all grid^4 ordered pairs "
        "and divide by (grid^2)^2."
    ),
    solution_code=(
        "def mean_patch_distance(grid, patch):\n"
        "    centres = [(patch * r, patch * c) for r in range(grid) for c in range(grid)]\n"
        "    total = sum(math.dist(p, q) for p in centres for q in centres)\n"
        "    return total / len(centres) ** 2\n\n\n"
        'answer = "b"\n'
    ),
    explanation=(
        "A head that attends uniformly gives every key patch the weight 1/N, so each "
        "query's weighted distance is the plain mean of its distances to all N patches; "
        "averaging over the N queries gives the mean over all N^2 ordered pairs."
    ),
    reference=lambda: (_reference_mean_distance, "b"),
    mistakes=[
        (
            lambda: (
                lambda g, p: _reference_mean_distance(g, p) * g**2 / (g**2 - 1),
                "b",
            ),
            "DIFFERENT patches",
        ),
        (lambda: (lambda g, p: _reference_mean_distance(g, 1), "b"), "not pixels"),
        (lambda: (_reference_mean_distance, "c"), "distance of 0"),
    ],
)


# Exercise 3 ------------------------------------------------------------------------------


def _reference_auroc(scores_in, scores_out):
    import pandas as pd

    scores = np.concatenate([np.asarray(scores_in), np.asarray(scores_out)])
    ranks = pd.Series(scores).rank().to_numpy()  # ties get their mean rank
    n_in, n_out = len(scores_in), len(scores_out)
    return (ranks[:n_in].sum() - n_in * (n_in + 1) / 2) / (n_in * n_out)


def _check_auroc(auroc) -> str:
    rng = np.random.default_rng(0)
    # rounded scores, so that ties occur, as they do between probabilities near 1
    scores_in = np.round(rng.beta(5, 1, 300), 2)
    scores_out = np.round(rng.beta(3, 1, 200), 2)
    expected = roc_auc_score(
        np.r_[np.ones(len(scores_in)), np.zeros(len(scores_out))],
        np.r_[scores_in, scores_out],
    )
    got = float(auroc(torch.tensor(scores_in), torch.tensor(scores_out)))
    if math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-12):
        return "the AUROC, with ties counted half."
    if math.isclose(got, 1 - expected, rel_tol=1e-9):
        raise Mistake(
            f"{got:.4f} is 1 - AUROC: you counted how often the OUT image scores "
            "higher; the detector flags low maximum probabilities, so 'in' should score "
            "higher."
        )
    strict = np.mean(scores_in[:, None] > scores_out[None, :])
    if math.isclose(got, strict, rel_tol=1e-9) or abs(got - expected) < 0.02:
        raise Mistake(
            f"{got:.4f}, close to {expected:.4f} but not equal: ties must count half "
            "(average ranks, e.g. pandas' rank(), or 0.5 for each tied pair)."
        )
    raise Mistake(f"{got:.4f}, expected {expected:.4f}.")


ex3 = Exercise(
    title="Is the maximum probability an out-of-distribution detector?",
    checker=_check_auroc,
    hint_text=(
        "Rank all scores together (pandas.Series.rank gives tied scores their mean "
        "rank). The sum of the 'in' ranks minus n_in (n_in + 1) / 2 counts the in/out "
        "pairs where 'in' is higher (ties half); divide by n_in n_out."
    ),
    solution_code=(
        "def auroc(max_in, max_out):\n"
        "    scores = torch.cat([max_in, max_out]).numpy()\n"
        "    ranks = pd.Series(scores).rank().to_numpy()  # ties: their mean rank\n"
        "    n_in, n_out = len(max_in), len(max_out)\n"
        "    return (ranks[:n_in].sum() - n_in * (n_in + 1) / 2) / (n_in * n_out)\n"
    ),
    explanation=(
        "The rank-sum (Mann-Whitney) formula counts, over all in/out pairs, how often "
        "the 'in' image scores higher, ties counting half. 0.5 is a coin toss: the "
        "score does not tell the two sets apart; 1.0 separates them perfectly."
    ),
    reference=lambda: (lambda a, b: _reference_auroc(a.numpy(), b.numpy()),),
    mistakes=[
        (
            lambda: (lambda a, b: 1 - _reference_auroc(a.numpy(), b.numpy()),),
            "1 - AUROC",
        ),
        (
            lambda: (lambda a, b: float((a[:, None] > b[None, :]).double().mean()),),
            "ties must count half",
        ),
    ],
)


# Exercise 4 ------------------------------------------------------------------------------

_SHIP = {
    "a": "always: the head is all a receiver needs",
    "b": "when the receiver already has the exact frozen backbone",
    "c": "after fine-tuning, since only the head was new",
}


def _check_ship(head_parameters, answer) -> str:
    for dim, classes in ((128, 3), (768, 101)):
        got = int(head_parameters(dim, classes))
        expected = dim * classes + classes
        if got == dim * classes:
            raise Mistake(
                f"D = {dim}, K = {classes}: {got:,} counts the weights only; the head "
                "has a bias per class too."
            )
        if got != expected:
            raise Mistake(
                f"D = {dim}, K = {classes}: {got:,} parameters, expected {expected:,} "
                "(a D x K weight and K biases)."
            )
    if answer == "b":
        return "the head alone, on a backbone the receiver already has."
    raise Mistake(
        {
            "a": "without the backbone the head's D inputs mean nothing: the receiver "
            "must have the exact frozen backbone.",
            "c": "fine-tuning changed every weight of the backbone as well: all of it "
            "must be shipped.",
        }.get(str(answer), f"{answer!r} is not one of the choices a, b, c.")
    )


ex4 = Exercise(
    title="What to ship",
    checker=_check_ship,
    hint_text=(
        "nn.Linear(D, K) holds a (K, D) weight and K biases. A head reads the features "
        "of one particular backbone: who has that backbone, and which backbone changed?"
    ),
    solution_code=(
        "def head_parameters(dim, classes):\n"
        "    return dim * classes + classes\n\n\n"
        'answer = "b"\n'
    ),
    explanation=(
        "A linear probe trains D K + K numbers, four bytes each in float32, plus some "
        "bookkeeping in the file. Shipping only the head is enough when the receiver "
        "already has the exact frozen backbone (for ImageNet ViT-B/16, the public "
        "torchvision file): they rebuild it and load the head on top. Fine-tuning "
        "changed every weight, so all of it must be shipped."
    ),
    reference=lambda: (lambda d, k: d * k + k, "b"),
    mistakes=[
        (lambda: (lambda d, k: d * k, "b"), "bias"),
        (lambda: (lambda d, k: d * k + k, "c"), "every weight"),
        (lambda: (lambda d, k: d * k + k, "a"), "exact frozen backbone"),
    ],
)
