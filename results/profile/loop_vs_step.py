"""The pretraining loop against the bare train step, in one process on one machine:

    python results/profile/loop_vs_step.py [--steps 6] [--optimizer muon] [--compile off]
                                           [--out FILE.json]

Runs `pretrain` with the pipeline's settings (25m, 32 x 128, its precision; the optimizer and
compilation as given) for a few steps into a temporary folder (no evaluation or checkpoint
before the last step) and times the same update without the loop (`bench.model.train_step`,
the loop's own `update`, on a fixed random batch). The loop's step time is the median over its
steps 2..N-1 of the wall time between consecutive steps (data, update, metrics, logs,
progress: everything the loop does), the bare step's the median of as many calls. The earlier
JSON files here were written by its first version: fp32, AdamW by default."""

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from glmflash.bench.model import train_step
from glmflash.config import PipelinePlan, model_config
from glmflash.device import autocast_dtype
from glmflash.machine import machine_record
from glmflash.model.lm import GLMFlash
from glmflash.train.pretrain import pretrain
from glmflash.train.runlog import METRICS, read_jsonl

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=6)
p.add_argument("--optimizer", default="muon", choices=("adamw", "muon"))
p.add_argument("--compile", default="off", choices=("off", "blocks"))
p.add_argument("--out", default=None)
args = p.parse_args()
cfg = dataclasses.replace(  # the pipeline's pretraining, without evaluations or checkpoints
    PipelinePlan.full(0).pretrain,
    steps=args.steps,
    eval_every=10_000,
    ckpt_every=10_000,
    optimizer=args.optimizer,
    compile=args.compile,
)
with tempfile.TemporaryDirectory() as tmp:
    pretrain(cfg, Path(tmp) / "run", device="cpu", log=lambda _: None)
    rows = list(read_jsonl(Path(tmp) / "run" / METRICS))
# wall time of step k = tokens / tokens_per_s differences (tokens_per_s is cumulative)
ends = [r["step"] * cfg.batch_size * cfg.seq_len / r["tokens_per_s"] for r in rows]
loop = [b - a for a, b in zip(ends, ends[1:], strict=False)][:-1]  # the last step evaluates
update = [r["step_seconds"] for r in rows[1:-1]]

torch.manual_seed(0)
model = GLMFlash(model_config("25m")).train()
batch = torch.randint(4, 260, (cfg.batch_size, cfg.seq_len + 1))
if cfg.compile == "blocks":
    model.compile_blocks()
amp = autocast_dtype(torch.device("cpu"), cfg.precision)
step = train_step(model, batch[:, :-1], batch[:, 1:], amp, cfg)
step()
bare = []
for _ in range(len(loop)):
    t0 = time.perf_counter()
    step()
    bare.append(time.perf_counter() - t0)
result = {
    "optimizer": args.optimizer,
    "compile": args.compile,
    "autocast": str(amp),
    "steps": args.steps,
    "loop_step_seconds": statistics.median(loop),
    "loop_update_seconds": statistics.median(update),
    "bare_step_seconds": statistics.median(bare),
    "loop_vs_bare": statistics.median(bare) / statistics.median(loop),
    "machine": machine_record(torch.device("cpu")),
}
print(json.dumps(result, indent=1))
if args.out:
    Path(args.out).write_text(json.dumps(result, indent=1))
