"""Chapter 0's exercises: accuracy averaged per batch or per sample, what a bigger image
costs TinyVGG, and the command line that trains it on MNIST."""

from __future__ import annotations

import contextlib
import io
import math
import sys

import torch
from torch import nn

from going_modular.models.registry import build_model
from vitbook.book.exercises import Exercise, Mistake
from vitbook.models.complexity import count_macs, count_params

__all__ = ["ex1", "ex2", "ex3"]


# Exercise 1 ------------------------------------------------------------------------------


def _accuracy_both_ways(model, dataset, batch_size, device="cpu"):
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size)
    per_batch, correct, seen = [], 0, 0
    model.eval()
    with torch.inference_mode():
        for X, y in loader:
            hits = (model(X.to(device)).argmax(1).cpu() == y).sum().item()
            per_batch.append(hits / len(y))
            correct, seen = correct + hits, seen + len(y)
    return sum(per_batch) / len(per_batch), correct / seen


def _predictions_and_labels() -> torch.utils.data.TensorDataset:
    """75 samples whose "images" are the predicted class (one-hot, for nn.Identity): half
    of the first 64 right, all of the last 11 right, so the last batch differs."""
    predicted = torch.zeros(75, 3)
    predicted[:, 0] = 1.0  # class 0 for every sample
    labels = torch.tensor([i % 2 if i < 64 else 0 for i in range(75)])
    return torch.utils.data.TensorDataset(predicted, labels)


def _check_accuracy_both_ways(accuracy_both_ways) -> str:
    dataset, model = _predictions_and_labels(), nn.Identity()
    for batch_size in (32, 64, 1):
        expected = _accuracy_both_ways(model, dataset, batch_size)
        got = accuracy_both_ways(model, dataset, batch_size)
        if not isinstance(got, tuple) or len(got) != 2:
            raise Mistake("return two numbers: (per-batch mean, per-sample accuracy).")
        if all(math.isclose(g, e) for g, e in zip(got, expected)):
            continue
        per_batch, per_sample = got
        where = f"with batches of {batch_size} (75 samples, 43 right)"
        if math.isclose(per_batch, expected[1]) and math.isclose(
            per_sample, expected[0]
        ):
            raise Mistake(
                f"{where} the two are swapped: first the mean of the per-batch "
                "accuracies, then the accuracy per sample."
            )
        if math.isclose(per_sample, expected[0]) and not math.isclose(*expected):
            raise Mistake(
                f"{where} the per-sample accuracy {per_sample:.4f} is the per-batch "
                "mean: count the correct predictions and the images seen over all "
                "batches, and divide once at the end."
            )
        if per_sample > 1:
            raise Mistake(
                f"{where} the per-sample accuracy is {per_sample:.2f}, above 1: `seen` "
                "must count images (len(y)), not batches."
            )
        if not math.isclose(per_batch, expected[0]):
            raise Mistake(
                f"{where} the per-batch mean is {per_batch:.4f}, expected "
                f"{expected[0]:.4f}: each batch's accuracy is its hits divided by the "
                "images in that batch, len(y); the last batch holds fewer than "
                "batch_size."
            )
        raise Mistake(
            f"{where} the per-sample accuracy is {per_sample:.4f}, expected "
            f"{expected[1]:.4f}."
        )
    return "the two averages, and they agree with batches of one image."


def _wrong_both_ways(divide_by_batch_size=False, count_batches=False, swap=False):
    """The reference, with one of the typical slips."""

    def accuracy_both_ways(model, dataset, batch_size, device="cpu"):
        loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size)
        per_batch, correct, seen = [], 0, 0
        with torch.inference_mode():
            for X, y in loader:
                hits = (model(X.to(device)).argmax(1) == y).sum().item()
                per_batch.append(
                    hits / (batch_size if divide_by_batch_size else len(y))
                )
                correct, seen = correct + hits, seen + (1 if count_batches else len(y))
        both = sum(per_batch) / len(per_batch), correct / seen
        return both[::-1] if swap else both

    return accuracy_both_ways


ex1 = Exercise(
    title="Per-batch versus per-sample accuracy",
    checker=_check_accuracy_both_ways,
    hint_text=(
        "A batch's accuracy is its correct predictions divided by the images in that "
        "batch, len(y), which for the last batch is less than batch_size. For the "
        "accuracy per sample, add up the correct predictions and the images of every "
        "batch, and divide only at the end."
    ),
    solution_code="""
def accuracy_both_ways(model, dataset, batch_size, device="cpu"):
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size)
    per_batch, correct, seen = [], 0, 0
    model.eval()
    with torch.inference_mode():
        for X, y in loader:
            hits = (model(X.to(device)).argmax(1).cpu() == y).sum().item()
            per_batch.append(hits / len(y))  # this batch's accuracy
            correct, seen = correct + hits, seen + len(y)  # images, not batches
    return sum(per_batch) / len(per_batch), correct / seen
""",
    explanation=(
        "Per sample, every test image counts once, whatever the batch size, and that "
        "is the accuracy the engine reports. The mean of per-batch accuracies gives the "
        "last batch, which holds only the leftover images (11 of the 75 test images "
        "with batches of 32, all 75 minus 64 with batches of 64), the same weight as a "
        "full one, so it moves up or down with how the model happens to do on those "
        "few images. With batches of one image every batch weighs the same, and the "
        "two ways agree exactly."
    ),
    reference=lambda: (_accuracy_both_ways,),
    mistakes=[
        (lambda: (_wrong_both_ways(divide_by_batch_size=True),), "len(y)"),
        (lambda: (_wrong_both_ways(count_batches=True),), "not batches"),
        (lambda: (_wrong_both_ways(swap=True),), "swapped"),
    ],
)


# Exercise 2 ------------------------------------------------------------------------------


def _tinyvgg(size: int) -> nn.Module:
    return build_model("tinyvgg", num_classes=3, img_size=size, hidden_units=10)


def _check_bigger_picture(work_ratio, params_at_128) -> str:
    small, big = _tinyvgg(64), _tinyvgg(128)
    macs = [count_macs(m, (1, 3, s, s))["total"] for m, s in ((small, 64), (big, 128))]
    expected_ratio, expected_params = macs[1] / macs[0], count_params(big)
    if not math.isclose(work_ratio, expected_ratio, rel_tol=0.02):
        if math.isclose(work_ratio, 2, rel_tol=0.02):
            raise Mistake(
                "work_ratio: each side doubles, but a convolution runs at every pixel, "
                "and there are side x side of them."
            )
        if math.isclose(work_ratio, 16, rel_tol=0.02):
            raise Mistake(
                "work_ratio: four times the pixels is four times the work of each "
                "convolution, not 4 x 4: the kernels are the same size."
            )
        if math.isclose(work_ratio, 1, rel_tol=0.02):
            raise Mistake(
                "work_ratio: the kernels do not change, but each one runs at every "
                "pixel of its input."
            )
        raise Mistake(f"work_ratio {work_ratio} is not what count_macs measures.")
    small_params = count_params(small)
    if params_at_128 == expected_params:
        return (
            f"{expected_ratio:.2f} times the work per image, and {expected_params:,} "
            f"parameters instead of {small_params:,}: only the head grew."
        )
    if params_at_128 == small_params:
        raise Mistake(
            "params_at_128: the convolutions are unchanged, but the head reads the last "
            "feature maps flattened, and at 128 px they hold four times as many numbers."
        )
    if params_at_128 == 4 * small_params:
        raise Mistake(
            "params_at_128: only the head grows; the convolutions' kernels are the "
            "same at any image size."
        )
    raise Mistake(
        f"params_at_128 = {params_at_128:,} is not the model's count: the head's "
        "Linear reads hidden_units x (img_size / 4)^2 features, one weight per feature "
        "and class, plus a bias per class."
    )


ex2 = Exercise(
    title="A bigger picture",
    checker=_check_bigger_picture,
    hint_text=(
        "A 3 x 3 convolution does the same work at every pixel of its input. The head "
        "is nn.Linear(hidden_units * (img_size // 4) ** 2, 3): see how the summary above "
        "splits the 10,693 parameters between the convolutions and the head."
    ),
    solution_code="""
work_ratio = 4  # twice the side: four times the pixels for every convolution
head_64 = 10 * 16 * 16 * 3 + 3  # 7,683: the head at 64 px (features x classes + bias)
head_128 = 10 * 32 * 32 * 3 + 3  # 30,723: four times the features at 128 px
params_at_128 = 10_693 - head_64 + head_128  # 33,733: the convolutions stay the same

# Or let the package count them:
work_ratio = tinyvgg_macs(128) / tinyvgg_macs(64)  # count_macs, as in the plan above
model_at_128 = build_model("tinyvgg", num_classes=3, img_size=128, hidden_units=10)
params_at_128 = sum(p.numel() for p in model_at_128.parameters())
""",
    explanation=(
        "At 128 px every convolution runs on four times the pixels, and the linear "
        "head reads four times as many features, so the model does four times the work "
        "per image. Its parameters grow less, about 3.2 times: the convolutions' "
        "kernels (3,010 parameters) do not depend on the image size; only the head's "
        "weights do. An epoch takes less than four times as long when the fixed costs "
        "(loading and decoding the JPEG files, which are the same whatever size they "
        "are resized to) are a noticeable part of it."
    ),
    reference=lambda: (4, 33_733),
    mistakes=[
        (lambda: (2, 33_733), "side x side"),
        (lambda: (16, 33_733), "not 4 x 4"),
        (lambda: (4, 10_693), "four times as many numbers"),
        (lambda: (4, 4 * 10_693), "only the head grows"),
    ],
)


# Exercise 3 ------------------------------------------------------------------------------


def _train_command(out):
    return [
        sys.executable,
        "-m",
        "vitbook.train",
        "--model",
        "tinyvgg",
        "--dataset",
        "mnist",
        "--epochs",
        "2",
        "--batch-size",
        "32",
        "--lr",
        "3e-3",
        "--output-dir",
        out,
    ]


def _check_train_command(train_command) -> str:
    from vitbook.cli.options import build_parser

    out = "runs_of_exercise_3"
    command = train_command(out)
    if not isinstance(command, list):
        raise Mistake(f"return a list of strings, not a {type(command).__name__}.")
    not_text = [item for item in command if not isinstance(item, str)]
    if not_text:
        raise Mistake(
            f"{not_text[0]!r} is not a string: subprocess passes text to the program, "
            "so every item of the command is a string ('2', not 2)."
        )
    if command[:2] != [sys.executable, "-m"] or len(command) < 3:
        raise Mistake(
            "start with sys.executable and -m: the command runs a module with this "
            "notebook's Python."
        )
    if command[2] != "vitbook.train":
        raise Mistake(
            f"python -m takes a module's dotted name: vitbook.train, not {command[2]!r}."
        )
    refusal = io.StringIO()
    try:
        with contextlib.redirect_stderr(refusal):
            args = build_parser().parse_args(command[3:])
    except SystemExit:
        said = refusal.getvalue().strip().splitlines()[-1]
        raise Mistake(f"the command line refuses it: {said}") from None
    if args.model != "tinyvgg":
        raise Mistake(f"--model {args.model}: the exercise trains tinyvgg.")
    if args.dataset != "mnist":
        raise Mistake(
            f"--dataset {args.dataset or 'not given (food, the default)'}: MNIST is "
            "--dataset mnist."
        )
    if args.epochs != 2:
        raise Mistake(f"--epochs {args.epochs}: two epochs, --epochs 2.")
    if str(args.output_dir) != out:
        raise Mistake("--output-dir: pass the folder `out` the function receives.")
    return "the command that trains TinyVGG on MNIST for two epochs."


def _command_with(changed: dict[int, object]):
    """The reference command with the items at some positions replaced."""

    def train_command(out):
        command = _train_command(out)
        for index, value in changed.items():
            command[index] = value
        return command

    return train_command


ex3 = Exercise(
    title="From the command line",
    checker=_check_train_command,
    hint_text=(
        "The output of --help above lists every option. python -m runs a module by "
        "its dotted name, as in `import`. subprocess.run passes each item of the list "
        "as one word of the command line, so each item is a string."
    ),
    solution_code="""
def train_command(out):
    return [
        sys.executable, "-m", "vitbook.train",
        "--model", "tinyvgg",
        "--dataset", "mnist",
        "--epochs", "2",
        "--batch-size", "32",
        "--lr", "3e-3",
        "--output-dir", out,
    ]
""",
    explanation=(
        "python -m vitbook.train runs the book's command line with this notebook's "
        "Python, so it finds the same packages. Each run writes model.pth (the weights "
        "and how to rebuild the model), results.json (the per-epoch history) and "
        "loss_curves.png into a new folder inside --output-dir, and latest points to "
        "it. The cell below runs your command, reloads the checkpoint and evaluates it "
        "again: the accuracy it measures is the one results.json recorded, because the "
        "file holds the trained weights."
    ),
    reference=lambda: (_train_command,),
    mistakes=[
        (lambda: (_command_with({8: 2}),), "'2', not 2"),
        (lambda: (_command_with({2: "vitbook/train.py"}),), "dotted name"),
        (lambda: (_command_with({6: "food"}),), "--dataset mnist"),
        (lambda: (_command_with({6: "minst"}),), "refuses it"),
    ],
)
