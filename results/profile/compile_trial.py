"""A first trial of torch.compile on the 25m train step (32 x 128, AdamW, fp32): each block
compiled with inductor (`Block.compile(dynamic=False)`) against eager, in fresh processes.
Reports the first step (which compiles) and the best of 4 later steps.

    python results/profile/compile_trial.py"""

import json
import subprocess
import sys

STEP = """
import sys, time, torch
from glmflash.bench.model import train_step
from glmflash.config import model_config
from glmflash.model.lm import GLMFlash
g = torch.Generator().manual_seed(0)
batch = torch.randint(4, 260, (32, 129), generator=g)
torch.manual_seed(0)
model = GLMFlash(model_config("25m")).train()
if sys.argv[1] == "compiled":
    for block in model.blocks():
        block.compile(dynamic=False)
step = train_step(model, batch[:, :-1], batch[:, 1:], None)
t0 = time.perf_counter(); step(); first = time.perf_counter() - t0
best = float("inf")
for _ in range(4):
    t0 = time.perf_counter(); step(); best = min(best, time.perf_counter() - t0)
print("RESULT", first, best)
"""


def main() -> None:
    from glmflash.machine import machine_record

    result = {}
    for mode in ("eager", "compiled"):
        out = subprocess.run(
            [sys.executable, "-c", STEP, mode], capture_output=True, text=True, check=True
        ).stdout
        first, best = map(
            float, next(x for x in out.splitlines() if x.startswith("RESULT")).split()[1:]
        )
        result[mode] = {"first_step_seconds": first, "best_step_seconds": best}
    result["speedup"] = (
        result["eager"]["best_step_seconds"] / result["compiled"]["best_step_seconds"]
    )
    result["machine"] = machine_record("cpu")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
