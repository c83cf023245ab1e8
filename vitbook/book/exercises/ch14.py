"""Chapter 14's exercises: the bytes a ring all-reduce sends, the padding of a
``DistributedSampler``, the linear-scaling rule, and where the identity of data parallelism
ends (BatchNorm)."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.utils.data.distributed import DistributedSampler

from vitbook.book.exercises import (
    Exercise,
    Mistake,
    check_letter,
    reference_source,
)

__all__ = ["ex1", "ex2", "ex3", "ex4"]


# Exercise 1: bytes on the wire

VIT_B_16_PARAMS = 86_567_656  # count_params(build_model("vit_b_16"))
LINKS = {"NVLink 150 GB/s": 150e9, "PCIe 12 GB/s": 12e9, "Ethernet 10 Gbit/s": 1.25e9}
# A step's compute: 512 images per GPU at 17.6 GMACs each (forward), training = 3 x
# forward, 1 MAC = 2 FLOP, on a GPU that sustains 100 TFLOP/s.
COMPUTE_S = 512 * 3 * 17.6e9 * 2 / 100e12


def ring_bytes(params, ranks):
    # bytes each rank sends per step: a ring all-reduce of `params` float32 gradients
    return 2 * (ranks - 1) / ranks * 4 * params


def _ring_mistake(sent: float, params: int, ranks: int) -> str:
    """Words for the typical wrong byte counts."""
    right = ring_bytes(params, ranks)
    if math.isclose(sent, right / 4):
        return (
            "you counted gradient values, not bytes: each float32 gradient is 4 bytes."
        )
    if math.isclose(sent, right / 2):
        return (
            "that is half the traffic of a ring all-reduce: it is a reduce-scatter "
            "(each rank ends with the sum of one chunk) followed by an all-gather (each "
            "rank sends its summed chunk round the ring), and each phase sends (N-1)/N "
            "of the gradients. Count both."
        )
    if math.isclose(sent, 2 * 4 * params):
        return (
            f"on {ranks} ranks that is too much: in each phase a rank sends N-1 "
            "chunks of 1/N of the gradients, (N-1)/N of them, not all of them."
        )
    if math.isclose(sent, 2 * (ranks - 1) * 4 * params):
        return (
            "you sent the whole gradient at each of the N-1 steps of a phase; a ring "
            "sends one chunk, 1/N of the gradients, per step."
        )
    return f"for {params:,} gradients on {ranks} ranks, {sent:,.0f} bytes is not it."


def _check_ring_bytes(function) -> str:
    for params, ranks in [(10**6, 4), (1_000, 2), (VIT_B_16_PARAMS, 8), (3, 64)]:
        sent = float(function(params, ranks))
        if not math.isclose(sent, ring_bytes(params, ranks), rel_tol=1e-9):
            raise Mistake(_ring_mistake(sent, params, ranks))
    sent = ring_bytes(VIT_B_16_PARAMS, 8)
    times = ", ".join(
        f"{1e3 * sent / rate:.0f} ms over {name}" for name, rate in LINKS.items()
    )
    return (
        f"ViT-B/16's {VIT_B_16_PARAMS:,} float32 gradients on 8 GPUs: each sends "
        f"{sent / 1e6:.0f} MB a step: {times}, against {1e3 * COMPUTE_S:.0f} ms of "
        "compute."
    )


ex1 = Exercise(
    title="Bytes on the wire",
    checker=_check_ring_bytes,
    hint_text=(
        "A ring all-reduce of N ranks cuts the gradients into N chunks. In the "
        "reduce-scatter phase each rank sends one chunk per step for N-1 steps; the "
        "all-gather phase does the same again. A float32 value is 4 bytes."
    ),
    solution_code=reference_source(ring_bytes),
    explanation=(
        "Each phase sends (N-1)/N of the gradients' bytes, and there are two phases, so "
        "2 (N-1)/N x 4P bytes: for ViT-B/16 (86.6 M gradients) on 8 GPUs about 606 MB "
        "a step. Over NVLink that takes a few milliseconds against about half a second "
        "of compute; over PCIe about 50 ms, still hidden behind the backward pass; "
        "over 10 Gbit/s Ethernet about half a second, as long as the compute. That is "
        "why training across machines wants fast interconnects, and why larger "
        "per-GPU batches (more compute per byte sent) help. The factor 2 (N-1)/N "
        "approaches 2 as N grows, so the bytes per GPU barely grow with N."
    ),
    reference=lambda: (ring_bytes,),
    mistakes=[
        (lambda: (lambda p, n: 2 * (n - 1) / n * p,), "not bytes"),
        (lambda: (lambda p, n: (n - 1) / n * 4 * p,), "half the traffic"),
        (lambda: (lambda p, n: 2 * 4 * p,), "too much"),
        (lambda: (lambda p, n: 2 * (n - 1) * 4 * p,), "one chunk"),
    ],
)


# Exercise 2: the sampler's padding


def sampler_padding(n_images, ranks):
    # (images each rank gets, images evaluated twice) for
    # DistributedSampler(..., num_replicas=ranks, shuffle=False)
    per_rank = -(-n_images // ranks)  # rounded up
    return per_rank, per_rank * ranks - n_images


def _sampler_truth(n_images: int, ranks: int) -> tuple[int, int]:
    """What PyTorch's sampler does: its shard size and how many indices it repeats."""
    shards = [
        list(DistributedSampler(range(n_images), ranks, rank, shuffle=False))
        for rank in range(ranks)
    ]
    seen = [i for shard in shards for i in shard]
    return len(shards[0]), len(seen) - len(set(seen))


def _check_sampler_padding(function) -> str:
    for n_images, ranks in [(10_001, 8), (1_000, 64), (10_000, 8), (5, 8)]:
        per_rank, repeated = (int(v) for v in function(n_images, ranks))
        true_rank, true_repeated = _sampler_truth(n_images, ranks)
        where = f"for {n_images:,} images on {ranks} ranks"
        if per_rank != true_rank:
            rounding = "down" if per_rank == n_images // ranks else "wrongly"
            raise Mistake(
                f"{where} each rank gets {true_rank}, not {per_rank}: you rounded "
                f"{rounding}. The sampler (drop_last=False) rounds up, so every rank "
                "has as many images, and pads with repeats."
            )
        if repeated != true_repeated:
            remainder = " (that is n % ranks, the images left over)" * (
                repeated == n_images % ranks
            )
            raise Mistake(
                f"{where} the sampler repeats {true_repeated} images, not "
                f"{repeated}{remainder}: it fills ranks x per-rank places with "
                "n images, so the repeats are the places beyond n."
            )
    indices = sorted(i for r in range(8) for i in range(r, 10_001, 8))
    covered = indices == list(range(10_001))
    return (
        f"10,001 images on 8 ranks: 1,251 each, 7 repeated, so an accuracy moves by at "
        f"most {100 * 7 / 10_008:.3f} points; 1,000 images on 64 GPUs: 24 repeated "
        f"({100 * 24 / 1_024:.1f} points). The package's split i % N covers every "
        f"image once: {covered}."
    )


ex2 = Exercise(
    title="The sampler's padding",
    checker=_check_sampler_padding,
    hint_text=(
        "Without drop_last the sampler gives every rank ceil(n / N) indices: it "
        "repeats indices from the start until there are N x ceil(n / N) of them. In "
        "Python, ceil(a / b) for integers is -(-a // b)."
    ),
    solution_code=reference_source(sampler_padding),
    explanation=(
        "Each rank gets ceil(10001 / 8) = 1251 images, 10,008 in all, so the first 7 "
        "are evaluated twice: an accuracy off by at most 0.07 points here, but with a "
        "small test set or many ranks (1,000 images on 64 GPUs: 24 repeats, up to 2.3 "
        "points) it shows. Right for training (every rank must take as many steps), "
        "wrong for evaluation. Splitting without padding (rank r takes r, r + N, ...) "
        "and adding the counts across ranks counts every image once."
    ),
    reference=lambda: (sampler_padding,),
    mistakes=[
        (lambda: (lambda n, r: (n // r, r - n % r),), "rounded down"),
        (lambda: (lambda n, r: (-(-n // r), n % r),), "images left over"),
    ],
)


# Exercise 3: the linear-scaling rule


def scaled_lr(lr, batch, global_batch):
    # the learning rate for `global_batch` images a step, from `lr` tuned at `batch`
    return lr * global_batch / batch


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(20, 32), nn.Tanh(), nn.Linear(32, 4))


def _sgd_steps(batches, lr: float, start: dict) -> torch.Tensor:
    """The weights after plain SGD on ``batches`` from ``start``, flattened."""
    model = _mlp()
    model.load_state_dict(start)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y in batches:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def scaling_gaps(k: int = 4, batch: int = 16) -> dict[float, float]:
    """For plain SGD: ``k`` steps of ``batch`` at rate lr against one step of ``k *
    batch`` at ``k * lr``, from the same weights; their difference relative to the
    update, by lr."""
    torch.manual_seed(0)
    start = _mlp().state_dict()
    before = torch.cat([v.flatten() for v in start.values()])
    x, y = torch.randn(k * batch, 20), torch.randint(0, 4, (k * batch,))
    small = [(x[i : i + batch], y[i : i + batch]) for i in range(0, k * batch, batch)]
    gaps = {}
    for lr in (0.001, 0.01, 0.1):
        k_steps, one_step = (
            _sgd_steps(small, lr, start),
            _sgd_steps([(x, y)], k * lr, start),
        )
        gaps[lr] = ((k_steps - one_step).norm() / (one_step - before).norm()).item()
    return gaps


def _check_scaled_lr(function, answer) -> str:
    cases = [(5.5e-4, 128, 1024), (5.5e-4, 128, 2048), (1e-3, 32, 64), (0.1, 256, 128)]
    for lr, batch, global_batch in cases:
        got, right = (
            float(function(lr, batch, global_batch)),
            scaled_lr(lr, batch, global_batch),
        )
        if math.isclose(got, right, rel_tol=1e-9):
            continue
        where = f"tuned at {lr:g} for {batch} images, a batch of {global_batch} gets {right:g}"
        if math.isclose(got, lr):
            raise Mistake(f"{where}, not the rate as given: the rule scales it.")
        if math.isclose(got, lr * math.sqrt(global_batch / batch)):
            raise Mistake(
                f"{where}: you used the square root of the batch ratio, another rule "
                "(some use it with Adam). Goyal et al.'s rule is linear."
            )
        if math.isclose(got, lr * batch / global_batch):
            raise Mistake(
                f"{where}: you inverted the ratio; a larger batch gets a larger rate."
            )
        raise Mistake(f"{where}, not {got:g}.")
    check_letter(
        answer,
        "b",
        {
            "a": "The difference is not the same at every rate: run scaling_gaps() and "
            "compare the three rates.",
            "c": "It is the other way round: at a small rate the gradient barely changes "
            "over the k small steps, so they agree with the one big step.",
        },
    )
    gaps = scaling_gaps()
    said = ", ".join(f"{gap:.1e} at lr {lr:g}" for lr, gap in gaps.items())
    return (
        f"the recipe's 5.5e-4 at 128 images becomes {scaled_lr(5.5e-4, 128, 1024):.2g} at "
        f"1024 and {scaled_lr(5.5e-4, 128, 2048):.2g} at 2048. Four small steps against "
        f"one big one differ by {said} of the update: in proportion to the rate."
    )


ex3 = Exercise(
    title="The linear-scaling rule",
    checker=_check_scaled_lr,
    hint_text=(
        "k times the batch, k times the rate: k = global_batch / batch. For the "
        "question, call scaling_gaps() and look at how the gap changes when the rate "
        "is multiplied by 10."
    ),
    solution_code=reference_source(scaled_lr, "b"),
    explanation=(
        "One step of k b examples at rate k eta moves the weights by k eta times the "
        "mean gradient at the start; k steps of b examples at rate eta move them by eta "
        "times k gradients, each taken where the previous steps left the weights. The "
        "two agree to first order in eta, so their difference relative to the update "
        "grows in proportion to eta. The rule holds while the rate is small enough that "
        "the gradient barely changes over k steps, which is why it fails for the "
        "largest batches and comes with a warmup (the first steps, where the gradient "
        "changes fastest, at a lower rate). It was derived for SGD; with AdamW it is a "
        "starting point to check, not a guarantee. The CLI does not apply it: it uses "
        "the rate as given and prints the one the rule would give."
    ),
    reference=lambda: (scaled_lr, "b"),
    mistakes=[
        (lambda: (lambda lr, b, g: lr, "b"), "not the rate as given"),
        (lambda: (lambda lr, b, g: lr * (g / b) ** 0.5, "b"), "square root"),
        (lambda: (lambda lr, b, g: lr * b / g, "b"), "inverted"),
        (lambda: (scaled_lr, "a"), "not the same at every rate"),
        (lambda: (scaled_lr, "c"), "other way round"),
    ],
)


# Exercise 4: where the equality ends


def two_rank_gradient(model, x, y):
    # the gradient two ranks holding x[:half] and x[half:] agree on (DDP's average)
    model.zero_grad()
    half = len(x) // 2
    for xs, ys in ((x[:half], y[:half]), (x[half:], y[half:])):
        loss = torch.nn.functional.cross_entropy(model(xs), ys) / 2
        loss.backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def small_model(batchnorm: bool) -> nn.Module:
    """A small classifier of 20 features into 4 classes, with or without BatchNorm."""
    torch.manual_seed(0)
    norm = nn.BatchNorm1d(32) if batchnorm else nn.Identity()
    return nn.Sequential(nn.Linear(20, 32), norm, nn.ReLU(), nn.Linear(32, 4))


def _whole_gradient(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    model.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def _check_two_ranks(function, answer) -> str:
    generator = torch.Generator().manual_seed(1)
    x, y = (
        torch.randn(64, 20, generator=generator),
        torch.randint(0, 4, (64,), generator=generator),
    )
    gaps = {}
    for batchnorm in (False, True):
        theirs = function(small_model(batchnorm), x, y)
        right = two_rank_gradient(small_model(batchnorm), x, y)
        whole = _whole_gradient(small_model(batchnorm), x, y)
        if not isinstance(theirs, torch.Tensor) or theirs.shape != right.shape:
            raise Mistake(
                "return every parameter's gradient flattened into one vector, "
                f"{tuple(right.shape)}, as torch.cat([p.grad.flatten() ...]) gives."
            )
        if torch.allclose(theirs, 2 * right, atol=1e-6):
            raise Mistake(
                "your gradient is twice the ranks' average: DDP adds the ranks' "
                "gradients and divides by their number."
            )
        if batchnorm and torch.allclose(theirs, whole, atol=1e-6):
            raise Mistake(
                "with BatchNorm your gradient equals the whole batch's: each rank's "
                "half must go through the model on its own, as on two processes."
            )
        if not torch.allclose(theirs, right, atol=1e-6):
            raise Mistake(
                "that is not the average of the two halves' mean-loss gradients (off "
                f"by {_relative(theirs, right):.1e} of its size)."
            )
        gaps[batchnorm] = _relative(theirs, whole)
    check_letter(
        answer,
        "b",
        {
            "a": "Its parameters (a scale and a shift per feature) are per feature, "
            "like a linear layer's: they do not make one example's loss depend on "
            "another's.",
            "c": "Rounding gives differences near 1e-7; this one is many orders larger.",
        },
    )
    return (
        f"the two halves' average differs from the whole batch's gradient by "
        f"{gaps[False]:.1e} of its size without BatchNorm (rounding) and "
        f"{gaps[True]:.1e} with it."
    )


ex4 = Exercise(
    title="Where the equality ends",
    checker=_check_two_ranks,
    hint_text=(
        "For each half: its mean loss, torch.nn.functional.cross_entropy(model(xs), ys), "
        "divided by 2 (the number of ranks); backward() adds each half's gradient into "
        "p.grad. For the question: what does BatchNorm compute from the batch in "
        "training mode?"
    ),
    solution_code=reference_source(two_rank_gradient, "b"),
    explanation=(
        "Without BatchNorm each example's loss depends on that example alone, so the "
        "average of the halves' gradients is the whole batch's, to rounding. With "
        "BatchNorm each half is normalised with its own mean and variance, so every "
        "example's loss depends on which 31 others share its half: a different "
        "function, a different gradient. Dropout breaks the equality another way (each "
        "rank draws its own masks) without making training worse."
    ),
    reference=lambda: (two_rank_gradient, "b"),
    mistakes=[
        (
            lambda: (lambda m, x, y: 2 * two_rank_gradient(m, x, y), "b"),
            "twice the ranks' average",
        ),
        (lambda: (_whole_gradient, "b"), "equals the whole batch's"),
        (lambda: (two_rank_gradient, "a"), "are per feature"),
        (lambda: (two_rank_gradient, "c"), "Rounding gives"),
    ],
)
