"""Why the pipeline runs each stage in a fresh process: a short vision run (300 align + 8 full
steps from the pipeline's pretrained checkpoint, fp32) timed in a fresh process, and after
3 training steps of the 25m model in the same process: fp32, bf16 autocast forward only, and
bf16 autocast with backward and AdamW. Each case in its own interpreter, the cases in turn,
`--rounds` times; per case the align and full stages' seconds, and from getrusage the CPU
time and the minor page faults of the vision run.

    python results/profile/after_bf16.py CHECKPOINT > results/profile/after_bf16.json

CHECKPOINT: a pretrained 25m checkpoint, e.g. runs/pipeline/pretrain/run/checkpoints/step_000160
"""

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time

import torch

CASES = ("fresh", "fp32_train", "bf16_forward", "bf16_train")


def warm_up(case: str) -> None:
    """Three steps of the 25m model on random tokens, as the case says."""
    from glmflash.config import model_config
    from glmflash.model.lm import GLMFlash

    if case == "fresh":
        return
    torch.manual_seed(0)
    model = GLMFlash(model_config("25m"))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(4, 260, (32, 129))
    for _ in range(3):
        with torch.autocast("cpu", torch.bfloat16, enabled=case.startswith("bf16")):
            loss = model(x[:, :-1], x[:, 1:]).loss
        if case != "bf16_forward":
            loss.backward()
            opt.step()
            opt.zero_grad()


def one_case(case: str, checkpoint: str) -> dict:
    """Run in a child interpreter: the case's warm-up, then the vision run, timed."""
    from glmflash.config import VisionConfig
    from glmflash.train.vision import train_vision

    warm_up(case)
    before = resource.getrusage(resource.RUSAGE_SELF)
    with tempfile.TemporaryDirectory() as out:
        cfg = VisionConfig(align_steps=300, steps=8, eval_size=50)
        res = train_vision(out + "/v", cfg, init=checkpoint, progress=False, plots=False)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "align_seconds": round(res["align_seconds"], 2),
        "full_seconds": round(res["train_seconds"] - res["align_seconds"], 2),
        "cpu_seconds": round(after.ru_utime - before.ru_utime, 1),
        "system_seconds": round(after.ru_stime - before.ru_stime, 1),
        "minor_faults": after.ru_minflt - before.ru_minflt,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("checkpoint")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)  # the child's job
    args = p.parse_args()
    if args.case:
        print(json.dumps(one_case(args.case, args.checkpoint)))
        return
    from glmflash.machine import machine_record

    runs: dict[str, list[dict]] = {case: [] for case in CASES}
    for _ in range(args.rounds):
        for case in CASES:
            cmd = [sys.executable, __file__, args.checkpoint, "--case", case]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            runs[case].append(json.loads(out.splitlines()[-1]))
            print(case, runs[case][-1], file=sys.stderr)
    best = {case: min(r["align_seconds"] for r in rs) for case, rs in runs.items()}
    result = {
        "runs": runs,
        "best_align_seconds": best,
        "ratios": {f"{case}_vs_fresh": round(best[case] / best["fresh"], 3) for case in CASES},
        "environment": machine_record(torch.device("cpu")),
        "date": time.strftime("%Y-%m-%d"),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
