#!/usr/bin/env bash
# GPU check for a maintainer with CUDA (about 3-5 minutes): training throughput in images/s
# and MFU (model FLOPs utilisation: achieved FLOP/s over the GPU's peak) of ViT-B/16 (224 px)
# and CCT-7/3x1 (32 px) in fp32 and in bf16 (fp16 with loss scaling where bf16 is missing),
# then the input pipeline against the models (benchmarks/bench_pipeline.py).
#
#   bash benchmarks/gpu_check.sh                        # from the repository root
#   PEAK_TFLOPS_FP32=19.5 PEAK_TFLOPS_HALF=312 bash benchmarks/gpu_check.sh   # unknown GPU
#
# Without CUDA it says so and exits with status 0.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3

if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_check: no CUDA device is visible to PyTorch here, so there is nothing to" \
        "measure. Run this script on a machine with an NVIDIA GPU (e.g. Colab)."
    exit 0
fi

timeout 200 "$PY" - <<'EOF'
"""Training throughput and MFU of two models, fp32 and half precision, on this GPU."""
import os
import time

import torch
import torch.nn.functional as F

from going_modular.models import build_model
from vitbook.models.complexity import count_macs

# Dense peak TFLOP/s (fp32 without tensor cores, and fp16/bf16 tensor cores), from NVIDIA's
# data sheets; the first name found in the device name wins.
PEAKS = {
    "H100": (67.0, 989.0),
    "A100": (19.5, 312.0),
    "L40S": (91.6, 362.0),
    "L4": (30.3, 121.0),
    "A10": (31.2, 125.0),
    "V100": (15.7, 125.0),
    "T4": (8.1, 65.0),
    "4090": (82.6, 165.2),
    "3090": (35.6, 71.0),
}
name = torch.cuda.get_device_name()
peak = next((p for key, p in PEAKS.items() if key in name), (None, None))
fp32_peak = float(os.environ.get("PEAK_TFLOPS_FP32", peak[0] or 0)) or None
half_peak = float(os.environ.get("PEAK_TFLOPS_HALF", peak[1] or 0)) or None
half = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
print(
    f"GPU: {name}; torch {torch.__version__}; peak TFLOP/s fp32 {fp32_peak}, "
    f"{str(half).split('.')[-1]} {half_peak} (set PEAK_TFLOPS_FP32/_HALF if None)"
)


def measure(model_name: str, img_size: int, batch: int, dtype, steps: int) -> None:
    torch.manual_seed(0)
    model = build_model(model_name, num_classes=10, img_size=img_size)
    flops = 6 * count_macs(model, (1, 3, img_size, img_size))["total"]  # fwd + bwd
    model = model.cuda().train().to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    scaler = torch.amp.GradScaler("cuda", enabled=dtype == torch.float16)
    x = torch.randn(batch, 3, img_size, img_size, device="cuda")
    y = torch.randint(0, 10, (batch,), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    rate = batch * steps / (time.perf_counter() - start)
    peak_tflops = fp32_peak if dtype == torch.float32 else half_peak
    mfu = f"{rate * flops / (peak_tflops * 1e12):6.1%}" if peak_tflops else "   n/a"
    label = str(dtype).split(".")[-1]
    print(
        f"{model_name:<10} {img_size:>3}px batch {batch:>3} {label:<8} "
        f"{rate:9.0f} img/s  {flops / 1e9:6.1f} GFLOP/img  MFU {mfu}",
        flush=True,
    )
    del model, opt


for model_name, img_size, batch, steps in (
    ("vit_b_16", 224, 64, 15),
    ("cct_7_3x1", 32, 128, 40),
):
    for dtype in (torch.float32, half):
        measure(model_name, img_size, batch, dtype, steps)
EOF

echo
echo "Input pipeline against the models (CPU workers, then batched on the GPU):"
BF16=$("$PY" -c "import torch; print('--bf16' if torch.cuda.is_bf16_supported() else '')")
timeout 150 "$PY" benchmarks/bench_pipeline.py --sections cuda --repeats 2 --images 4096 $BF16
