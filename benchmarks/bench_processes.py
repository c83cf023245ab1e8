"""One process with all the threads against one-thread processes side by side.

Chapter 10 trains each seed's CCT and TinyVGG together, in two processes of one thread each
(``vitbook.training.clock.side_by_side``). This measures what that costs or gains on
this machine: the training images/s of CCT-2/3x2 (Fashion-MNIST's shape, batch 128, the
step ``fastest_step`` picks) in one process with ``--threads`` threads, against the total of
``--threads`` one-thread processes timing the same step at the same time. The two are timed
in alternating order, ``--repeats`` times; the ratio of the medians is the gain.

    .venv/bin/python benchmarks/bench_processes.py --threads 2 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics

import torch
from timing import interleave

from going_modular.models import build_model
from going_modular.utils import set_seeds
from vitbook.book.settings import hardware
from vitbook.training.clock import side_by_side
from vitbook.training.speed import fastest_step, prefer_channels_last
from vitbook.training.timing import images_per_second

MODEL = dict(
    num_classes=10, img_size=28, in_channels=1, attn_drop_rate=0.0, drop_path_rate=0.0
)


def training_rate(batch: int, steps: int) -> float:
    """Images/s of CCT-2/3x2 training steps on a random batch, in the fastest step's
    options on this process's threads."""
    set_seeds(0)
    model = prefer_channels_last(build_model("cct_2_3x2", **MODEL))
    images, labels = torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
    options, _ = fastest_step(model, images, labels, steps=2, repeats=1)
    with options.attention(model):
        return images_per_second(
            model, images, labels, steps=steps, warmup=2, amp=options.amp
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{hardware()}; torch {torch.__version__}")
    job = dict(batch=args.batch, steps=args.steps)
    rates = interleave(
        {
            f"1 process x {args.threads} threads": lambda: training_rate(**job),
            f"{args.threads} processes x 1 thread": lambda: sum(
                side_by_side(
                    training_rate,
                    [job] * args.threads,
                    processes=args.threads,
                    threads=1,
                    progress=False,
                )
            ),
        },
        args.repeats,
    )
    one, many = (statistics.median(r) for r in rates.values())
    print(
        f"median images/s: one process {one:,.0f}, side by side {many:,.0f} in total; "
        f"ratio {many / one:.2f}"
    )


if __name__ == "__main__":
    main()
