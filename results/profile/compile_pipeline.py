"""torch.compile on the pipeline's pretraining step (25m, 32 x 128, Muon, the pipeline's
precision), each mode in a fresh process, against eager:

    python results/profile/compile_pipeline.py [--steps 6] [--modes eager,blocks,mixers]
        [--linear-kind elu|delta]

    eager   no compilation
    blocks  every Block compiled by inductor (dynamic=False), the MoE's routed experts left
            eager (their row counts change every step; a graph per count would recompile
            without end): one graph per kind of block serves all layers of that kind
    mixers  only the stream connections, the norms and the attention compiled

Reports the first step (which compiles, or reads inductor's on-disk cache) and the median of
the later steps, and the break-even step count: compile seconds / seconds saved per step."""

import argparse
import json
import statistics
import subprocess
import sys

STEP = """
import sys, time, torch
from glmflash.bench.model import train_step
from glmflash.config import PipelinePlan, model_config
from glmflash.device import autocast_dtype
from glmflash.model.lm import GLMFlash
mode, steps, linear_kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
cfg = PipelinePlan.full(0).pretrain
g = torch.Generator().manual_seed(0)
batch = torch.randint(4, 260, (cfg.batch_size, cfg.seq_len + 1), generator=g)
torch.manual_seed(0)
model = GLMFlash(model_config(cfg.preset, linear_kind=linear_kind)).train()
if mode == "blocks":
    model.compile_blocks()
elif mode == "mixers":
    for block in model.blocks():
        for m in (block.hc_attn, block.hc_moe, block.attn_norm, block.moe_norm, block.attn):
            m.compile(dynamic=False)
amp = autocast_dtype(torch.device("cpu"), cfg.precision)
step = train_step(model, batch[:, :-1], batch[:, 1:], amp, cfg)
times = []
for _ in range(steps):
    t0 = time.perf_counter(); step(); times.append(time.perf_counter() - t0)
print("RESULT", " ".join(map(str, times)), str(amp))
"""


def main() -> None:
    from glmflash.machine import machine_record

    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--modes", default="eager,blocks,mixers")
    p.add_argument("--linear-kind", default="elu", help="the linear layers' kind (model option)")
    args = p.parse_args()
    result: dict = {}
    for mode in args.modes.split(","):
        out = subprocess.run(
            [sys.executable, "-c", STEP, mode, str(args.steps), args.linear_kind],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        fields = next(x for x in out.splitlines() if x.startswith("RESULT")).split()[1:]
        times, amp = list(map(float, fields[:-1])), fields[-1]
        result[mode] = {
            "first_step_seconds": times[0],
            "step_seconds": statistics.median(times[1:]),
            "autocast": amp,
        }
        print(mode, result[mode], file=sys.stderr)
    eager = result.get("eager")
    if eager:
        for mode, r in result.items():
            if mode == "eager":
                continue
            saved = eager["step_seconds"] - r["step_seconds"]
            r["speedup"] = eager["step_seconds"] / r["step_seconds"]
            extra = r["first_step_seconds"] - eager["first_step_seconds"]
            r["break_even_steps"] = extra / saved if saved > 0 else None
    result["linear_kind"] = args.linear_kind
    result["machine"] = machine_record("cpu")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
