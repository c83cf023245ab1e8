"""Plots the chapters share: loss and accuracy curves, and several runs compared."""

from __future__ import annotations

import matplotlib.pyplot as plt

__all__ = ["TWO_PANELS", "compare_runs", "plot_loss_curves"]

#: The size, in inches, of a figure of two panels side by side (loss and accuracy).
TWO_PANELS = (8.2, 3.6)


def _finish(
    fig: plt.Figure, axes: tuple[plt.Axes, ...], title: str | None
) -> plt.Figure:
    """Grid and legend on every panel, the title above them (shown literally: a ``$`` in a
    folder or run name is not maths), and a tight layout."""
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title.replace("$", r"\$"))
    fig.tight_layout()
    return fig


def plot_loss_curves(
    results: dict[str, list[float]],
    title: str | None = None,
    figsize: tuple[float, float] = TWO_PANELS,
) -> plt.Figure:
    """Plot training and test loss and accuracy per epoch from an engine ``results`` dict
    (what ``engine.train`` or ``fit`` returns)."""
    epochs = range(1, len(results["train_loss"]) + 1)
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=figsize)
    for ax, metric, label in ((ax_loss, "loss", "Loss"), (ax_acc, "acc", "Accuracy")):
        ax.plot(epochs, results[f"train_{metric}"], marker="o", label=f"train {metric}")
        ax.plot(epochs, results[f"test_{metric}"], marker="o", label=f"test {metric}")
        ax.set(title=label, xlabel="Epoch")
    return _finish(fig, (ax_loss, ax_acc), title)


def compare_runs(
    runs: dict[str, dict[str, list[float]]],
    title: str | None = None,
    figsize: tuple[float, float] = TWO_PANELS,
) -> plt.Figure:
    """Plot the test loss and accuracy of several named runs on shared axes."""
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=figsize)
    for name, results in runs.items():
        epochs = range(1, len(results["test_loss"]) + 1)
        ax_loss.plot(epochs, results["test_loss"], marker="o", label=name)
        ax_acc.plot(epochs, results["test_acc"], marker="o", label=name)
    ax_loss.set(title="Test loss", xlabel="Epoch")
    ax_acc.set(title="Test accuracy", xlabel="Epoch")
    return _finish(fig, (ax_loss, ax_acc), title)
