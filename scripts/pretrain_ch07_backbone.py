"""Pre-train chapter 7's backbone and ship it with the package.

    OMP_NUM_THREADS=1 python scripts/pretrain_ch07_backbone.py --epochs 12 --threads 1

trains the small hybrid ViT (:func:`vitbook.models.fashion_source.source_vit`) on
the Fashion-MNIST classes outside ``--target`` (resuming from ``--checkpoint-dir`` after an
interruption), then writes its float32 ``state_dict`` to
``vitbook/models/weights/ch07_fashion_source_vit.pt`` and a JSON record beside it: the
command, the wall time of its epochs (summed over resumptions), the CPU and threads, the
epochs, the classes, the test accuracy per epoch and the file's SHA-256.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import subprocess
import sys
from pathlib import Path

import torch

from vitbook.models.fashion_source import WEIGHTS_FILE, file_sha256
from vitbook.training.source_backbone import pretrain_source_backbone


def cpu_model() -> str:
    """``lscpu``'s Model name (the platform's processor name where there is no lscpu)."""
    try:
        lines = subprocess.run(
            ["lscpu"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor()
    names = [
        line.split(":", 1)[1] for line in lines.splitlines() if "Model name" in line
    ]
    return names[0].strip() if names else platform.processor()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--target", type=int, nargs="+", default=[2, 4, 6])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--checkpoint-dir", default="checkpoints/ch07_backbone")
    parser.add_argument("--out", default=str(WEIGHTS_FILE))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    source = [c for c in range(10) if c not in args.target]
    model, results = pretrain_source_backbone(
        source,
        args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        seed=args.seed,
        device="cpu",
        checkpoint_dir=args.checkpoint_dir,
    )  # the fastest step on this machine, measured on the first batch and recorded
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), out)
    command = "python scripts/pretrain_ch07_backbone.py " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    record = {
        "command": command.strip(),
        "wall_seconds": round(sum(results["epoch_seconds"]), 1),
        "cpu": cpu_model(),
        "threads": args.threads,
        "step": results["options"],
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "seed": args.seed,
        "source_classes": source,
        "target_classes": args.target,
        "test_acc": round(results["test_acc"][-1], 4),
        "test_acc_per_epoch": [round(a, 4) for a in results["test_acc"]],
        "torch": torch.__version__,
        "sha256": file_sha256(out),
    }
    out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
