"""Train a model from the command line: ``python -m vitbook.train --help``.

Each run writes into its own new folder ``<output-dir>/<YYYYmmdd-HHMMSS>-<id>/`` (``runs/``
by default): the model (``model.pth``), the per-epoch results (``results.json``, strict JSON
with the run's id, status, options and the SHA-256 of the ``model.pth`` they belong to, written
after it) and the loss and accuracy curves (``loss_curves.png``); until the run is complete, it
also holds the training checkpoint that ``--resume`` continues from (``checkpoint.pth``).
``<output-dir>/latest`` then points to the newest run that saved a model. No run deletes or
moves another run's files, and a lock refuses a second run into the same output folder while
one is running.

Bad numbers, an unusable output folder and a model that does not fit the images are refused
before any data is prepared: :mod:`vitbook.cli.options` checks the options once into a
:class:`~vitbook.cli.config.RunConfig`, the one thing :func:`run` receives. Ctrl-C, SIGTERM
(``kill``, ``timeout``, ``docker stop``, a scheduler) and SIGHUP (unless ``nohup`` ignores
it) save the last completed epoch, mark the run ``interrupted`` and exit with 130, 143 or
129; ``--resume RUN_DIR`` continues it from there, once the checkpoint, the model, the
recipe and the data are found to be the run's own (a refusal leaves the run folder as it
was). A signal after the last epoch lets the save finish: the run is complete. A run that
fails (a NaN or exploding loss, a corrupt image, a full disk) also saves its completed
epochs, is marked ``failed`` with the error, and exits with 1. A failing optional step (the
figure, MLflow) is only a warning. The run's files: :class:`vitbook.training.runs.Run`.

``--dataset fashion_mnist`` trains on Fashion-MNIST (28x28 grey), padded to 32x32 or repeated
to RGB only when the model needs it; ``--data-dir PATH`` trains on your own images (an
ImageFolder with ``train/`` and ``test/`` class folders).

``--recipe cct`` (or ``cct200``) trains with a Compact Transformers recipe from
:mod:`going_modular.data.augment`: its augmentations (on cifar10), MixUp/CutMix (cct), label
smoothing, AdamW (cct exempts biases and norms from weight decay) and warmup + cosine. The recipe
supplies the defaults of ``--epochs``, ``--batch-size``, ``--lr``, ``--weight-decay``,
``--warmup-epochs`` and ``--label-smoothing``; options given explicitly override them.
``--time-budget MINUTES`` stops training when the time is spent (see ``vitbook.training.loop.fit``):
the run is marked ``stopped`` and keeps its checkpoint, so ``--resume`` with a larger budget
continues it; an epoch it cut short is listed in results.json's ``cut_short_epochs``.

The CLI reads none of the book's ``BOOK_*`` variables; its own switches say what they do:
``--offline`` never touches the network, ``--data-root PATH`` is where datasets land and
``--dry-run`` caps every epoch at :data:`~vitbook.cli.config.DRY_RUN_STEPS` training and
test batches (the book's chapters pass them from their settings).

Launched by ``torchrun --nproc_per_node=N -m vitbook.train ...`` (or with ``--nnodes``
and ``--rdzv-endpoint`` on several machines), each process joins the process group
(:func:`~vitbook.training.distributed.from_environment`: NCCL on CUDA, gloo on a CPU)
and trains a replica on its shard of every global batch of ``N x --batch-size`` images;
the learning rate is used as given. The processes must have been given the same options
(each node types its own command): any difference, say in ``--lr`` or ``--seed``, is
refused before anything starts, naming the options and each rank's value. Rank 0 alone
locks the output folder, creates the run folder (whose path it sends to the others) and
writes the checkpoints, results, curves and MLflow records, and prints; every rank
restores a ``--resume``d checkpoint, which must come from as many processes. A rank that
dies or hangs ends the others after ``--dist-timeout`` seconds at most, each saying which
rank it is; rank 0 keeps the completed epochs.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import signal
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence

_NOTHING_TRAINED = "Interrupted before training started; nothing was trained."


def _interrupted_while_starting(signum: int, frame: object) -> None:
    """Ctrl-C while the modules below load (about a second): one line, no traceback."""
    if os.environ.get("RANK", "0") == "0":
        print(_NOTHING_TRAINED, file=sys.stderr)
    raise SystemExit(128 + signum)


if (
    __name__ == "__main__"
    and signal.getsignal(signal.SIGINT) is signal.default_int_handler
):
    signal.signal(signal.SIGINT, _interrupted_while_starting)

import matplotlib  # noqa: E402

matplotlib.use("Agg")

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from going_modular import utils  # noqa: E402
from vitbook.cli import parts, ranks, resume  # noqa: E402
from vitbook.cli.config import RunConfig  # noqa: E402
from vitbook.cli.errors import (  # noqa: E402
    FAILURES,
    ProcessGroupFailed,
    TrainingFailed,
    TrainingInterrupted,
    UsageError,
)
from vitbook.cli.options import build_parser, configure  # noqa: E402
from vitbook.cli.output_dir import locked_output_dir  # noqa: E402
from vitbook.cli.parts import make_dataloaders  # noqa: E402
from vitbook.cli.stops import kept_if_stopped  # noqa: E402
from vitbook.data import image_folders  # noqa: E402
from vitbook.data.download import DownloadError  # noqa: E402
from vitbook.data.files import listing_sha256, remove_file  # noqa: E402
from vitbook.training import distributed, runs  # noqa: E402
from vitbook.training.checkpoint import CHECKPOINT_NAME  # noqa: E402
from vitbook.training.distributed import Distributed  # noqa: E402
from vitbook.training.loop import fit  # noqa: E402
from vitbook.training.recipe import Recipe  # noqa: E402

__all__ = [
    "FAILURES",
    "ProcessGroupFailed",
    "TrainingFailed",
    "TrainingInterrupted",
    "main",
    "make_dataloaders",
    "run",
]


# --- The run's steps: a new or a resumed run folder, its data and recipe, its save ---------------


def _log_to_mlflow(config: RunConfig, record: dict, results: dict) -> None:
    """Log the options as parameters and each epoch's results with ``step=epoch``."""
    from vitbook.training import tracking

    with tracking.start_run(
        "cli", f"{config.model} {record['run_id']}", config.params()
    ):
        tracking.log_results(results)
    print(f"[INFO] Logged to MLflow; browse with: {tracking.ui_command()}")


def _new_run(
    config: RunConfig, model: nn.Module, img_size: int, ctx: Distributed | None
) -> runs.Run:
    """A new run folder (rank 0 creates it and sends its path to the others), its record
    written (status running)."""
    run_dir = ranks.on_main(ctx, lambda: runs.new_run_dir(config.output_dir))
    record = {
        "run_id": run_dir.name,
        "model": config.model,
        "data": str(config.data_dir) if config.data_dir else config.dataset,
        "options": config.options,
        "status": "running",
    }
    current = runs.Run(run_dir, record, model, img_size)
    if ranks.is_main(ctx):
        current.write_results(record, {})
    print(f"[INFO] Writing the run in {run_dir}")
    return current


def _prepare(
    config: RunConfig,
    current: runs.Run,
    channels: int,
    device: torch.device,
    ctx: Distributed | None,
) -> tuple[DataLoader, DataLoader, Recipe]:
    """The data (each rank's shard of the training set under torchrun) and the recipe; the
    run's record takes the data's class names and sizes."""
    with ranks.main_first(ctx):
        train_dl, test_dl, class_names = parts.loaders(
            config, current.img_size, channels, device, one_process=ctx is None
        )
    if ctx is not None:
        train_dl = distributed.shard(train_dl, ctx, shuffle=True, seed=config.seed)
    current.class_names = class_names
    sizes = {"train_images": len(train_dl.dataset), "test_images": len(test_dl.dataset)}
    current.record = current.record | {"class_names": class_names} | sizes
    listings = {  # image files (an ImageFolder's samples): their names, labels, sizes
        split: listing_sha256(data.root, data.samples)
        for split, data in (("train", train_dl.dataset), ("test", test_dl.dataset))
        if hasattr(data, "samples")
    }
    if listings:
        current.record = current.record | {"data_sha256": listings}
    print(
        f"[INFO] Data: {config.data_label}, {sizes['train_images']} train and "
        f"{sizes['test_images']} test images of {len(class_names)} classes, given to "
        f"{config.model} as {channels}x{current.img_size}x{current.img_size}."
    )
    steps_per_epoch = min(len(train_dl), config.max_steps or math.inf)
    return (
        train_dl,
        test_dl,
        parts.training_recipe(config, steps_per_epoch, len(class_names)),
    )


def _resumed_run(
    config: RunConfig,
    model: nn.Module,
    img_size: int,
    channels: int,
    device: torch.device,
    ctx: Distributed | None,
) -> tuple[runs.Run, DataLoader, DataLoader, Recipe]:
    """The run ``--resume`` continues, its data and recipe checked against its checkpoint
    before its record is written (status running)."""
    resumed = config.resumed
    current = runs.Run(resumed.run_dir, dict(resumed.record), model, img_size)
    train_dl, test_dl, recipe = _prepare(config, current, channels, device, ctx)
    world_size = 1 if ctx is None else ctx.world_size
    ranks.check_on_every_rank(
        ctx,
        lambda: resume.check_resumable(resumed, current, train_dl, recipe, world_size),
    )
    current.record = current.record | {"status": "running"}
    if ranks.is_main(ctx):
        current.write_results(current.record, resumed.results)
    print(f"[INFO] Continuing the run in {current.dir}")
    _say_cut_short(current.record, resumed.results)
    return current, train_dl, test_dl, recipe


def _full_epoch_steps(train_dl: DataLoader, recipe: Recipe, model: nn.Module) -> int:
    """The training steps of an epoch no time budget cuts short: the loader's batches,
    at most ``recipe.max_steps_per_epoch``, less a last batch of one image, which
    :func:`~vitbook.training.loop.fit` skips for a model with BatchNorm."""
    steps = len(train_dl)
    if recipe.max_steps_per_epoch is not None and recipe.max_steps_per_epoch < steps:
        return recipe.max_steps_per_epoch
    last = len(train_dl.sampler) - (steps - 1) * (train_dl.batch_size or 1)
    batchnorm = any(
        isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()
    )
    return steps - int(last == 1 and batchnorm and not train_dl.drop_last)


def _say_cut_short(record: dict, results: dict) -> None:
    """Print which epochs the time budget cut short (``cut_short_epochs``), if any."""
    cut = record.get("cut_short_epochs", [])
    if cut:
        steps = ", ".join(f"epoch {e}: {results['steps'][e - 1]}" for e in cut)
        print(
            f"[INFO] The time budget cut short epoch(s) {', '.join(map(str, cut))} of "
            f"this run ({steps} of {record['steps_per_epoch']} training steps; "
            "cut_short_epochs in results.json)."
        )


def _finish_after(epochs: int, stops: runs.StopSignals) -> Callable[[int, dict], bool]:
    """A callback of :func:`~vitbook.training.loop.fit`: after the last epoch, a signal
    waits for the save (:meth:`~vitbook.training.runs.StopSignals.finish`)."""

    def after_epoch(epoch: int, results: dict) -> bool:
        if epoch >= epochs:
            stops.finish()
        return False  # never stops training early

    return after_epoch


def _save(
    config: RunConfig,
    current: runs.Run,
    results: dict,
    stops: runs.StopSignals,
    ctx: Distributed | None,
    planned: int,
    full_steps: int,
) -> None:
    """Save the run (rank 0): complete, or ``stopped`` by its time budget before its last
    epoch (its checkpoint kept, so ``--resume`` with a larger ``--time-budget`` continues
    it; an epoch it cut short, with fewer than ``full_steps`` training steps, is recorded
    in ``cut_short_epochs``); then the optional steps. A signal meanwhile waits."""
    stops.finish()
    if not ranks.is_main(ctx):
        return
    done = len(results["train_loss"])
    record = {k: v for k, v in current.record.items() if k != "stopped_because"}
    record |= {"status": "complete" if done >= planned else "stopped"}
    record["epochs_completed"] = done
    if done < planned:
        record["stopped_because"] = (
            f"its time budget of {config.time_budget:g} min ran out"
        )
        if results["steps"][-1] < full_steps:
            cut = record.get("cut_short_epochs", [])
            record |= {"cut_short_epochs": [*cut, done], "steps_per_epoch": full_steps}
    with kept_if_stopped(current):
        current.save(record, results)
    if done >= planned:
        runs.optional_step(  # complete: nothing left to resume
            "Removing checkpoint.pth",
            lambda: remove_file(current.dir / CHECKPOINT_NAME),
        )
    log = functools.partial(_log_to_mlflow, config) if config.mlflow else None
    current.finish(record, results, log)
    print(f"[INFO] Saved the run to {current.dir}")
    _say_cut_short(record, results)
    if done < planned:
        print(
            f"[INFO] The time budget stopped it after {done} of {planned} epochs; to "
            f"train on: --resume {current.dir} --time-budget <more minutes in all>"
        )
    if stops.received is not None:
        name = signal.Signals(stops.received).name
        print(f"[INFO] {name} came after the last epoch: the run is complete.")


def run(
    config: RunConfig,
    stops: runs.StopSignals | None = None,
    ctx: Distributed | None = None,
) -> dict[str, list[float]]:
    """Train as ``config`` says into a new run folder (or continue ``config.resumed``) and
    write the model, results and curves there: model, lock, data, recipe, fit, save. With
    ``ctx`` (torchrun), this process is one rank of a distributed run (see the module).

    Raises UsageError before anything is written when the processes were given
    different options, or the model or a resumed run's checkpoint does not fit,
    TrainingInterrupted after saving the completed epochs on Ctrl-C, SIGTERM or SIGHUP (``stops``: their handler, see
    :func:`~vitbook.training.runs.stop_signals`), and TrainingFailed after saving them
    when training fails (e.g. the loss diverges).
    """
    stops = stops or runs.StopSignals()
    if ctx is not None:
        ranks.check_same_options(config, ctx)
    utils.set_seeds(config.seed)
    model, img_size, channels = parts.fitting_model(config)
    device = utils.get_device() if ctx is None else ctx.device
    if ctx is not None:
        ranks.share_work(config, ctx)
    with contextlib.ExitStack() as held:
        held.enter_context(parts.data_switches(config))
        ranks.on_main(
            ctx,
            lambda: held.enter_context(
                locked_output_dir(config.output_dir, config.resumed)
            ),
        )
        if config.resumed is None:
            current = _new_run(config, model, img_size, ctx)
            with kept_if_stopped(current, ctx):
                train_dl, test_dl, recipe = _prepare(
                    config, current, channels, device, ctx
                )
        else:
            current, train_dl, test_dl, recipe = _resumed_run(
                config, model, img_size, channels, device, ctx
            )
        with kept_if_stopped(current, ctx):
            results = fit(
                parts.prepare_model(model, config.compile),
                train_dl,
                test_dl,
                recipe,
                device=device,
                checkpoint_dir=current.dir,
                identity=resume.run_identity(current.record),
                callbacks=[_finish_after(recipe.epochs, stops)],
                distributed=ctx,
            )
        full_steps = _full_epoch_steps(train_dl, recipe, model)
        _save(config, current, results, stops, ctx, recipe.epochs, full_steps)
        return results


@contextlib.contextmanager
def _plain_warnings(speaks: bool) -> Iterator[None]:
    """Within the block, each warning about the images
    (:class:`~vitbook.data.image_folders.ImageFolderWarning`) printed once as
    "[WARNING] ...", without the source line that Python shows (and, under torchrun, by
    rank 0 alone); other warnings as Python shows them."""
    said: set[str] = set()
    show = warnings.showwarning

    def show_plainly(message, category, filename, lineno, file=None, line=None):
        if not issubclass(category, image_folders.ImageFolderWarning):
            show(message, category, filename, lineno, file, line)
        elif speaks and str(message) not in said:
            said.add(str(message))
            print(f"[WARNING] {message}", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.showwarning = show_plainly
        yield


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``python -m vitbook.train`` and the ``vit-train`` command.

    Exits with 2 on bad options, 1 when training fails (e.g. a NaN loss) and 128 + the
    signal's number when stopped (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP), each with a
    one-line message instead of a traceback (as the program, ``argv`` None, more stop
    signals after the first are ignored until it has exited). It reads no ``BOOK_*``
    variable: ``--offline``, ``--data-root`` and ``--dry-run`` are its own switches.
    Under torchrun, bad options, and processes given different options, are reported by
    rank 0 alone (every rank exits with 2).
    """
    speaks = os.environ.get("RANK", "0") == "0"  # torchrun's rank 0, or no torchrun
    parser = build_parser()
    with ranks.silenced(not speaks):
        args = parser.parse_args(argv)
    if signal.getsignal(signal.SIGINT) is _interrupted_while_starting:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # caught below
    try:
        exiting = argv is None  # the program itself: it ends after this
        with (
            ranks.silenced(not speaks, stderr=False),
            runs.stop_signals(exiting) as stops,
            _plain_warnings(speaks),
        ):
            config = configure(args)  # the options checked before the processes meet
            run(config, stops, ranks.join(config.dist_timeout))
    except UsageError as error:
        if exiting and "WORLD_SIZE" in os.environ:  # under torchrun, whose agent sends
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # SIGTERM once a rank exited
        with ranks.silenced(not speaks):
            parser.error(str(error))
    except TrainingInterrupted as interrupted:
        if str(interrupted):
            print(interrupted, file=sys.stderr)
        raise SystemExit(interrupted.exit_code) from None
    except KeyboardInterrupt as interrupt:
        if speaks:
            print(_NOTHING_TRAINED, file=sys.stderr)
        raise SystemExit(runs.exit_code(interrupt)) from None
    except (
        TrainingFailed,
        ProcessGroupFailed,
        DownloadError,
        FileNotFoundError,
        image_folders.ImageDecodeError,
    ) as error:
        if str(error):
            print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    finally:
        distributed.shutdown()


if __name__ == "__main__":
    main()
