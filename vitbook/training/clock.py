"""Training against the clock: one run planned for a time budget that counts everything from
building its model (:func:`train_for_budget`), and several runs side by side, each in its own
process on its own share of the cores (:func:`side_by_side`).

    jobs = [dict(model_name=name, seed=seed, seconds=290, recipe=recipe,
                 train_loader=train, test_loader=test) for seed in (0, 1, 2)
            for name in ("cct_2_3x2", "tinyvgg")]
    runs = side_by_side(train_for_budget, jobs)  # [(model, results), ...], 2 at a time

On two cores, two one-thread processes train small models faster in total than one process
with two threads (PyTorch's per-operation threading costs more than it gains on small
tensors; ``benchmarks/README.md``), and two runs started together share the machine evenly.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
import torch.multiprocessing as mp
from torch import nn
from torch.utils.data import DataLoader
from tqdm import tqdm

from going_modular.models.registry import build_model
from going_modular.utils import set_seeds
from vitbook.training.loop import fit
from vitbook.training.recipe import Recipe, learning_rates
from vitbook.training.speed import (
    CANDIDATES,
    StepOptions,
    plan_for_budget,
    prefer_channels_last,
)

__all__ = ["side_by_side", "train_for_budget"]


def train_for_budget(
    model_name: str,
    seconds: float,
    recipe: Recipe,
    train_loader: Iterable,
    test_loader: DataLoader,
    *,
    seed: int = 0,
    model_kwargs: dict[str, Any] | None = None,
    tests: int = 3,
    candidates: Sequence[StepOptions] = CANDIDATES,
    repeats: int = 3,
    margin: float = 0.9,
    device: torch.device | str = "cpu",
) -> tuple[nn.Module, dict]:
    """Build the registry's ``model_name`` (with ``model_kwargs``, channels-last where that
    helps) after seeding with ``seed``, and train it on ``train_loader`` with ``recipe`` for
    ``seconds`` counted from building it: :func:`~vitbook.training.speed.plan_for_budget`
    measures the fastest of ``candidates`` and plans the steps, and ``test_loader`` is tested
    ``tests`` times along the way.

    Returns the trained model and :func:`~vitbook.training.loop.fit`'s results, with ``wall``
    (seconds in all), ``stamps`` (seconds since the build at each test), ``planned`` (steps),
    ``options`` (the step's options, as text), ``amp`` (whether it ran under autocast) and
    ``last_lr`` (the learning rate of the last step trained: near zero once the schedule ran
    to its end) added.
    """
    set_seeds(seed)
    start = time.perf_counter()
    model = prefer_channels_last(build_model(model_name, **(model_kwargs or {})))
    plan = plan_for_budget(
        model,
        train_loader,
        seconds,
        recipe,
        tests=tests,
        test_images=len(test_loader.dataset),
        candidates=candidates,
        repeats=repeats,
        margin=margin,
    )
    stamps: list[float] = []

    def stamp(_, results: dict) -> bool:
        stamps.append(time.perf_counter() - start)
        return False  # never stop early: the plan's time budget does

    with plan.options.attention(model):
        results = fit(
            model,
            train_loader,
            test_loader,
            plan.recipe,
            device=device,
            progress=False,
            callbacks=[stamp],
        )
    wall = time.perf_counter() - start
    schedule = learning_rates(plan.recipe, plan.recipe.steps)  # the planned one
    results.update(
        wall=wall,
        last_lr=schedule[sum(results["steps"]) - 1],
        stamps=stamps,
        planned=plan.recipe.steps,
        options=str(plan.options),
        amp=plan.options.amp,
    )
    return model, results


def _call(function_and_job: tuple[Callable[..., Any], dict[str, Any]]) -> Any:
    function, job = function_and_job
    return function(**job)


def side_by_side(
    function: Callable[..., Any],
    jobs: Sequence[dict[str, Any]],
    *,
    processes: int = 2,
    threads: int | None = None,
    progress: bool = True,
) -> list[Any]:
    """``[function(**job) for job in jobs]``, computed in waves of ``processes`` jobs that
    start together, each job in a (spawned) process with ``threads`` threads: by default this
    process's threads shared among them. A wave starts when the last one has ended, so runs
    side by side (jobs ``0, 1``, then ``2, 3`` ... of two processes) share the machine the
    same way each time, from their first second to their last.

    ``function`` must be importable (defined in a module, not in a notebook) and its
    arguments and results picklable; tensors travel through shared memory. An error in a job
    is raised here, and stopping this call stops every job.
    """
    if processes < 1 or (threads is not None and threads < 1):
        raise ValueError(
            f"Need processes >= 1 and threads >= 1, got processes={processes}, "
            f"threads={threads}."
        )
    if threads is None:
        threads = max(1, torch.get_num_threads() // processes)
    context = mp.get_context("spawn")  # a fork of a process running OpenMP can hang
    tasks = [(function, job) for job in jobs]
    results: list[Any] = []
    with (
        context.Pool(processes, torch.set_num_threads, (threads,)) as pool,
        tqdm(
            total=len(tasks),
            desc=f"{len(tasks)} runs, {processes} at a time",
            file=sys.stdout,
            leave=False,
            disable=not progress,
        ) as bar,
    ):
        for first in range(0, len(tasks), processes):
            wave = tasks[first : first + processes]
            results += pool.map(_call, wave, chunksize=1)
            bar.update(len(wave))
    return results
