"""Training throughput of this project's ViT against torchvision's VisionTransformer.

Both models get the same configuration and the same weights (copied with
``load_torchvision_weights``), train on the same batch (forward + backward + optimizer step),
and are timed in alternating order, repeat after repeat, to spread the noise of a shared
machine evenly. Prints the median images/s of each and the ratio ours / torchvision.

    python benchmarks/bench_vit.py                          # vit_4_16's config at 224 px
    python benchmarks/bench_vit.py --layers 12 --dim 768 --heads 12 --mlp 3072 --batch-size 4
"""

from __future__ import annotations

import argparse
from functools import partial
from statistics import median

import torch
from timing import interleave
from torchvision.models import VisionTransformer

from going_modular.models.vit import ViT
from vitbook.models.complexity import count_params
from vitbook.models.convert import load_torchvision_weights
from vitbook.training.timing import images_per_second


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--layers", type=int, default=4, help="transformer encoder layers"
    )
    parser.add_argument("--dim", type=int, default=192, help="embedding dimension D")
    parser.add_argument("--heads", type=int, default=3, help="attention heads")
    parser.add_argument("--mlp", type=int, default=384, help="MLP hidden size")
    parser.add_argument("--img-size", type=int, default=224)
    parser.add_argument("--patch-size", type=int, default=16)
    parser.add_argument("--num-classes", type=int, default=3)
    parser.add_argument(
        "--dropout", type=float, default=0.1, help="MLP/embedding dropout"
    )
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument(
        "--steps", type=int, default=3, help="timed training steps per repeat"
    )
    parser.add_argument(
        "--warmup", type=int, default=1, help="untimed steps per model first"
    )
    parser.add_argument(
        "--repeats", type=int, default=6, help="alternating timed repeats"
    )
    parser.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch threads (0: torch default; 1 is steadier on a shared CPU)",
    )
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    tv = VisionTransformer(
        image_size=args.img_size,
        patch_size=args.patch_size,
        num_layers=args.layers,
        num_heads=args.heads,
        hidden_dim=args.dim,
        mlp_dim=args.mlp,
        dropout=args.dropout,
        attention_dropout=0.0,
        num_classes=args.num_classes,
    )
    ours = ViT(
        img_size=args.img_size,
        patch_size=args.patch_size,
        depth=args.layers,
        dim=args.dim,
        mlp_ratio=args.mlp / args.dim,
        heads=args.heads,
        attn_drop_rate=0.0,
        drop_rate=args.dropout,
        pos_drop_rate=args.dropout,
        num_classes=args.num_classes,
    )
    load_torchvision_weights(ours, tv)
    images = torch.randn(args.batch_size, 3, args.img_size, args.img_size)
    labels = torch.randint(0, args.num_classes, (args.batch_size,))

    models = {"ours": ours.train(), "torchvision": tv.train()}
    optimizers = {
        name: torch.optim.SGD(m.parameters(), lr=1e-3, momentum=0.9)
        if args.optimizer == "sgd"
        else torch.optim.AdamW(m.parameters(), lr=1e-4)
        for name, m in models.items()
    }
    n_params = count_params(ours)
    print(
        f"config: layers={args.layers} dim={args.dim} heads={args.heads} mlp={args.mlp} "
        f"img={args.img_size} patch={args.patch_size} batch={args.batch_size} "
        f"params={n_params:,} optimizer={args.optimizer} threads={torch.get_num_threads()} "
        f"torch={torch.__version__}"
    )
    steps = {
        name: partial(
            images_per_second,
            model,
            images,
            labels,
            warmup=0,
            optimizer=optimizers[name],
        )
        for name, model in models.items()
    }
    for name in models:
        if args.warmup:
            steps[name](steps=args.warmup)

    results = interleave(
        {name: partial(steps[name], steps=args.steps) for name in models},
        args.repeats,
    )

    ours_ips = median(results["ours"])
    tv_ips = median(results["torchvision"])
    print(f"ours:        {ours_ips:8.2f} img/s (median of {args.repeats})")
    print(f"torchvision: {tv_ips:8.2f} img/s (median of {args.repeats})")
    print(f"ratio ours / torchvision: {ours_ips / tv_ips:.3f}")


if __name__ == "__main__":
    main()
