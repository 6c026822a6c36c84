"""The pipeline's RL stage at lr 1e-4 with 40 dev tasks per family for selection (eval every
32), from the pipeline's 160-step checkpoint, then the pipeline's confirm evaluation.

Needs runs/pipeline from `glmflash pipeline`; writes runs/rl_lr1e4 (remove it to rerun).
Run: .venv/bin/python results/rl_lr1e4/run.py   (about 5 min on 2 cores)
"""
import dataclasses
import json
from pathlib import Path

from glmflash.pipeline import Pipeline, PipelinePlan
from glmflash.train.rl import train_rl

plan = PipelinePlan.full(0)
plan = dataclasses.replace(
    plan, rl=dataclasses.replace(plan.rl, lr=1e-4, dev_per_family=40, eval_every=32))
out = Path("runs/rl_lr1e4")
s = train_rl("runs/pipeline/pretrain/run/checkpoints/step_000160", out / "run", plan.rl, "cpu")
print(json.dumps(s), flush=True)
(out / "after").mkdir(parents=True, exist_ok=True)
r = Pipeline(out, plan, "cpu").confirm_eval(str(out / "run" / "best"), out / "after")
print({k: r[k] for k in ("greedy_pass1_trained", "pass8_trained", "pass8_all")}, flush=True)
