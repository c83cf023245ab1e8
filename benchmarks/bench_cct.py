"""Training throughput of this project's compact transformers against timm's transformer blocks.

For each model the timm twin is a copy of ours whose blocks are replaced by
``timm.models.vision_transformer.Block`` (same width, heads, MLP ratio, qkv without bias,
dropout and stochastic-depth rates); tokenizer, position embedding, pooling and head are shared,
so only the transformer layers' implementation differs. (timm's block is a standard pre-norm
block, while ours re-normalises the stream after attention as the CCT reference does; the
parameter counts and the work are the same.)

One step is forward + cross-entropy + backward + AdamW on random 32x32 images. After warm-up
steps, timed runs of ours and timm alternate; each model's best run (as in ``timeit``: on shared
cores the fastest run is the least disturbed) and the median run are reported in images/s.

    python benchmarks/bench_cct.py                  # fp32, batch 128
    python benchmarks/bench_cct.py --bf16 --steps 5
"""

from __future__ import annotations

import argparse
import copy
from functools import partial
from statistics import median

import torch
from timing import interleave
from timm.models.vision_transformer import Block
from torch import nn

from going_modular.models import build_model
from going_modular.models.cct import CompactTransformer
from vitbook.models.complexity import count_params
from vitbook.training.timing import images_per_second


def timm_twin(model: CompactTransformer) -> CompactTransformer:
    """A copy of ``model`` whose blocks are timm ``Block``s of the same configuration."""
    twin = copy.deepcopy(model)
    blocks = []
    for block in model.blocks:
        dim = block.mlp.fc1.in_features
        blocks.append(
            Block(
                dim,
                block.attn.heads,
                mlp_ratio=block.mlp.fc1.out_features / dim,
                qkv_bias=False,
                proj_drop=block.mlp.drop1.p,
                attn_drop=block.attn.attn_drop_rate,
                drop_path=block.drop_path.p,
                norm_layer=nn.LayerNorm,
            )
        )
    twin.blocks = nn.ModuleList(blocks)
    return twin


def benchmark(name: str, args: argparse.Namespace) -> tuple[float, float]:
    torch.manual_seed(0)
    ours = build_model(name, num_classes=10, img_size=32).train()
    theirs = timm_twin(ours).train()
    n_ours, n_theirs = count_params(ours), count_params(theirs)
    if n_ours != n_theirs:
        raise RuntimeError(
            f"{name}: {n_ours:,} parameters but timm twin has {n_theirs:,}"
        )
    images = torch.randn(args.batch_size, 3, 32, 32)
    labels = torch.randint(0, 10, (args.batch_size,))
    models = {"ours": ours, "timm": theirs}
    optimizers = {
        key: torch.optim.AdamW(m.parameters(), lr=1e-4) for key, m in models.items()
    }
    steps = {
        key: partial(
            images_per_second,
            model,
            images,
            labels,
            warmup=0,
            amp=args.bf16,
            optimizer=optimizers[key],
        )
        for key, model in models.items()
    }
    for key in models:
        if args.warmup:
            steps[key](steps=args.warmup)
    runs = interleave(
        {key: partial(steps[key], steps=args.steps) for key in models},
        args.repeats,
        verbose=False,
    )
    best = {key: max(r) for key, r in runs.items()}
    med = {key: median(r) for key, r in runs.items()}
    print(
        f"{name:<13} {n_ours:>10,} params | best: ours {best['ours']:7.1f}, timm "
        f"{best['timm']:7.1f} img/s, ratio {best['ours'] / best['timm']:.3f} | median: ours "
        f"{med['ours']:7.1f}, timm {med['timm']:7.1f}, ratio "
        f"{med['ours'] / med['timm']:.3f}",
        flush=True,
    )
    return best["ours"], best["timm"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--models",
        nargs="+",
        default=["cct_2_3x2", "vit_lite_7_4"],
        help="registered ViT-Lite/CVT/CCT names (default: cct_2_3x2 vit_lite_7_4)",
    )
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per model")
    parser.add_argument("--steps", type=int, default=5, help="steps per timed run")
    parser.add_argument(
        "--repeats", type=int, default=5, help="timed runs per model, alternated"
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="torch.set_num_threads"
    )
    parser.add_argument(
        "--bf16",
        action="store_true",
        help="the engine's autocast (bfloat16 on a CPU, float16 on CUDA)",
    )
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch_size}, "
        f"{'bf16 autocast' if args.bf16 else 'fp32'}, {args.repeats} x {args.steps} steps"
    )
    for name in args.models:
        benchmark(name, args)


if __name__ == "__main__":
    main()
