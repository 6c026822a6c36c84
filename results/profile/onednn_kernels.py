"""Why bf16 autocast was slower than fp32 on a CPU with AMX: oneDNN compiles a kernel per
matmul shape, and routing changes every expert's row count each step. Four 25m bf16 train
steps (32 x 128, AdamW, real updates) in a fresh process with ONEDNN_VERBOSE=profile_create,
with the experts' rows unpadded (ROW_GRANULE 1) and padded to 64: oneDNN's kernel-cache
misses and the time spent creating kernels, and the best step.

    python results/profile/onednn_kernels.py"""

import json
import os
import subprocess
import sys

STEPS = """
import sys, time, torch
import glmflash.model.moe as moe
moe.ROW_GRANULE = int(sys.argv[1])
from glmflash.bench.model import train_step
from glmflash.config import model_config
from glmflash.model.lm import GLMFlash
g = torch.Generator().manual_seed(0)
batch = torch.randint(4, 260, (32, 129), generator=g)
torch.manual_seed(0)
model = GLMFlash(model_config("25m")).train()
step = train_step(model, batch[:, :-1], batch[:, 1:], torch.bfloat16)
best = float("inf")
for _ in range(4):
    t0 = time.perf_counter(); step(); best = min(best, time.perf_counter() - t0)
print("BEST", best)
"""


def main() -> None:
    from glmflash.machine import machine_record

    result = {}
    for granule in (1, 64):
        out = subprocess.run(
            [sys.executable, "-c", STEPS, str(granule)],
            env={**os.environ, "ONEDNN_VERBOSE": "profile_create"},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
        misses = [line for line in out if "create:cache_miss" in line]
        result[f"granule_{granule}"] = {
            "kernel_cache_misses": len(misses),
            "kernel_creation_ms": round(sum(float(m.split(",")[-1]) for m in misses), 1),
            "best_step_seconds": float(next(x for x in out if x.startswith("BEST")).split()[1]),
        }
    result["machine"] = machine_record("cpu")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
