"""The 25m train step (32 x 128, AdamW, the pipeline loop's update) of an earlier commit and of
the working tree, taking turns in fresh processes, natively and under the environment of an
AVX2-only CPU (`machine.EMULATE_AVX2`); bf16 autocast natively only (emulated bf16 is ~50x
slower). Best of 3 steps after one warm-up step per process, best over the rounds.

    python results/profile/before_after.py [BASE_REV] [--rounds N]

Writes results/profile/before_after.json with the machine record of each setting."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STEP = """
import json, sys, time, torch
from glmflash.bench.model import train_step
from glmflash.config import model_config
from glmflash.machine import machine_record
from glmflash.model.lm import GLMFlash
g = torch.Generator().manual_seed(0)
batch = torch.randint(4, 260, (32, 129), generator=g)
torch.manual_seed(0)
model = GLMFlash(model_config("25m")).train()
amp = torch.bfloat16 if sys.argv[1] == "bf16" else None
step = train_step(model, batch[:, :-1], batch[:, 1:], amp)
step()
best = float("inf")
for _ in range(3):
    t = time.perf_counter(); step(); best = min(best, time.perf_counter() - t)
print(json.dumps({"seconds": best, "machine": machine_record("cpu")}))
"""


def measure(tree: Path, precision: str, env: dict[str, str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", STEP, precision],
        env={**os.environ, **env, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=True,
        cwd=tree,
    ).stdout
    return json.loads(out.splitlines()[-1])


def main() -> None:
    from glmflash.machine import EMULATE_AVX2

    p = argparse.ArgumentParser()
    p.add_argument("base", nargs="?", default="7553270")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    settings = {
        "native fp32": ("fp32", {}),
        "native bf16": ("bf16", {}),
        "emulated AVX2 fp32": ("fp32", EMULATE_AVX2),
    }
    result: dict = {"base": args.base, "settings": {}}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "-f", "--detach", str(base), args.base],
            check=True,
            capture_output=True,
        )
        try:
            trees = {"before": base, "after": ROOT}
            for name, (precision, env) in settings.items():
                best = {"before": float("inf"), "after": float("inf")}
                for _ in range(args.rounds):
                    for which, tree in trees.items():
                        r = measure(tree, precision, env)
                        best[which] = min(best[which], r["seconds"])
                        print(f"{name} {which}: {r['seconds']:.3f} s", flush=True)
                result["settings"][name] = {
                    "before_seconds": best["before"],
                    "after_seconds": best["after"],
                    "speedup": best["before"] / best["after"],
                    "machine": r["machine"],
                }
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)],
                check=False,
                capture_output=True,
            )
    native = result["settings"]
    result["bf16_vs_fp32_after"] = (
        native["native fp32"]["after_seconds"] / native["native bf16"]["after_seconds"]
    )
    result["bf16_vs_fp32_before"] = (
        native["native fp32"]["before_seconds"] / native["native bf16"]["before_seconds"]
    )
    (ROOT / "results/profile/before_after.json").write_text(json.dumps(result, indent=2))
    print(
        json.dumps(
            {
                k: (v["speedup"] if isinstance(v, dict) else v)
                for k, v in {
                    **native,
                    "bf16_vs_fp32_after": result["bf16_vs_fp32_after"],
                    "bf16_vs_fp32_before": result["bf16_vs_fp32_before"],
                }.items()
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
