"""Chapter 10's small-data runs, importable so that ``training.clock.side_by_side`` can run
two of them at once, each in a process of its own with one thread.

* :func:`small_run` trains one network (CCT-2/3x2 with a :class:`CCTRecipe`, or TinyVGG) on a
  subset of uint8 images for a fixed number of steps and returns its test accuracy, its
  accuracy on its own (un-augmented) training images and its mean confidence on the test
  images (the mean of the largest softmax probability).
* :func:`logistic_baseline` fits logistic regression on raw pixels, choosing its inverse
  regularisation ``C`` on a validation split carved out of the training subset (never on the
  test set), then refits on the whole subset and scores the test images.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn

from going_modular.models.registry import build_model
from vitbook.data.gpu_augment import BatchAugment, DeviceLoader, recipe_augment
from vitbook.training.cct_recipes import CCTRecipe
from vitbook.training.loop import fit
from vitbook.training.speed import StepOptions, prefer_channels_last

__all__ = ["confidence", "logistic_baseline", "small_run"]


def confidence(logits: torch.Tensor) -> float:
    """The mean over images of the largest softmax probability of each row of ``logits``."""
    return logits.float().softmax(dim=1).max(dim=1).values.mean().item()


@torch.inference_mode()
def _predict(
    model: nn.Module, loader, amp: bool, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    model.eval()
    logits, labels = [], []
    with torch.autocast(device.type, enabled=amp):
        for X, y in loader:
            logits.append(model(X).float().cpu())
            labels.append(y.cpu())
    return torch.cat(logits), torch.cat(labels)


def small_run(
    recipe: CCTRecipe,
    seed: int,
    images: torch.Tensor,
    labels: torch.Tensor,
    test_images: torch.Tensor,
    test_labels: torch.Tensor,
    steps: int,
    *,
    mean: tuple[float, ...],
    std: tuple[float, ...],
    model_name: str = "cct_2_3x2",
    model_kwargs: dict | None = None,
    options: StepOptions | None = None,
    device: torch.device | str = "cpu",
) -> dict[str, float]:
    """Train ``model_name`` on uint8 ``images`` for ``steps`` steps of ``recipe`` (its
    batch size, augmentation, mixing, smoothing, decay and schedule compressed into the
    run), seeded with ``seed``; test once at the end.

    Returns ``test_acc``, ``train_acc`` (on ``images`` without augmentation),
    ``confidence`` (mean largest softmax probability on the test images), ``steps`` and
    ``cpu_seconds`` (this process's CPU time for the run).
    """
    started = time.process_time()
    options = options or StepOptions()
    device = torch.device(device)
    torch.manual_seed(seed)
    np.random.seed(seed)
    batch = min(recipe.batch_size, len(images))
    per_pass = len(images) // batch
    passes = max(1, -(-steps // per_pass))
    loader = DeviceLoader(
        images,
        labels,
        batch,
        recipe_augment(recipe, mean, std),
        drop_last=True,
        passes=passes,
        device=device,
    )
    model = build_model(
        model_name,
        num_classes=10,
        img_size=images.shape[-1],
        in_channels=images.shape[1],
        **(model_kwargs or {}),
    )
    model = prefer_channels_last(model)
    training = recipe.training_recipe(len(loader), 1, num_classes=10).replace(
        amp=options.amp, max_steps_per_epoch=steps
    )
    plain = BatchAugment([], mean, std)
    test_loader = DeviceLoader(
        test_images, test_labels, 1000, plain, shuffle=False, device=device
    )
    clean = DeviceLoader(images, labels, 500, plain, shuffle=False, device=device)
    with options.attention(model):
        fit(model, loader, None, training, progress=False, device=device)
        logits, y = _predict(model, test_loader, options.amp, device)
        train_logits, train_y = _predict(model, clean, options.amp, device)
    return {
        "test_acc": (logits.argmax(1) == y).float().mean().item(),
        "train_acc": (train_logits.argmax(1) == train_y).float().mean().item(),
        "confidence": confidence(logits),
        "steps": min(steps, len(loader)),
        "cpu_seconds": time.process_time() - started,
    }


def logistic_baseline(
    images: torch.Tensor,
    labels: torch.Tensor,
    test_images: torch.Tensor,
    test_labels: torch.Tensor,
    *,
    Cs: tuple[float, ...] = (0.001, 0.01, 0.1, 1.0),
    validation: float = 0.2,
    seed: int = 0,
) -> dict[str, float]:
    """Logistic regression on raw pixels in [0, 1]: ``C`` chosen on a stratified
    validation split (``validation`` of the training images), then refitted on all of them
    with that ``C``; returns ``test_acc``, ``C`` and ``converged`` (L-BFGS stopped before
    its iteration limit in every fit)."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split

    x = images.flatten(1).float().div(255).numpy()
    y = labels.numpy()
    classes = len(set(y.tolist()))
    held_out = max(round(validation * len(y)), classes)  # one image a class at least
    x_fit, x_val, y_fit, y_val = train_test_split(
        x, y, test_size=held_out, stratify=y, random_state=seed
    )
    converged = True

    def fitted(C: float, xs, ys) -> LogisticRegression:
        nonlocal converged
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            model = LogisticRegression(C=C, max_iter=2000).fit(xs, ys)
        converged &= not any(issubclass(w.category, ConvergenceWarning) for w in caught)
        return model

    scores = {C: fitted(C, x_fit, y_fit).score(x_val, y_val) for C in Cs}
    best = max(Cs, key=lambda C: (scores[C], -C))  # ties: the stronger regularisation
    final = fitted(best, x, y)
    x_test = test_images.flatten(1).float().div(255).numpy()
    return {
        "test_acc": float(final.score(x_test, test_labels.numpy())),
        "C": best,
        "converged": converged,
    }
