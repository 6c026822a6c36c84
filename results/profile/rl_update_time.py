"""Seconds of one RL update (`policy_update`, an AdamW at lr 0 so every repeat sees the same
weights) of the pipeline's stage on the same rollouts: its first step with reward spread from
CHECKPOINT, 4 repeats in one process. Two versions of the code are compared by running each on
PYTHONPATH in turn, e.g. the merged continuation in RL scoring (commit f539ce1, reverted) against
the code before this work (64e8f57; the sparse layers then masked by offsets, not slots):

    git worktree add /tmp/merged f539ce1 && git worktree add /tmp/before 64e8f57
    PYTHONPATH=/tmp/before python results/profile/rl_update_time.py CHECKPOINT
    PYTHONPATH=/tmp/merged python results/profile/rl_update_time.py CHECKPOINT
"""

import sys
import tempfile
import time
from pathlib import Path

import torch

from glmflash import checkpoint as ckpt
from glmflash.config import PipelinePlan
from glmflash.train.policy_gradient import advantages
from glmflash.train.rl import make_learner, policy_update, rl_tasks, roll_out

cfg = PipelinePlan.full(0).rl
model, _ = ckpt.load_model(sys.argv[1], torch.device("cpu"))
tasks, n = rl_tasks(cfg), cfg.tasks_per_step
with tempfile.TemporaryDirectory() as tmp:
    learner = make_learner(model, cfg, Path(tmp), amp=None)
    for g0 in range(0, len(tasks) - n + 1, n):
        rolled = roll_out(learner, tasks[g0 : g0 + n], g0)
        adv = advantages(rolled.rewards, cfg.advantage, cfg.normalize_std).flatten()
        if adv.any():
            break
sel = (adv != 0).nonzero().flatten().tolist()
scored = sum(len(rolled.completions[i].sampled) for i in sel)
print(f"rows scored {len(sel)}, completion tokens {scored}")
prompts = [c.prompt_ids for c in rolled.completions]
optimizer = torch.optim.AdamW(learner.params, lr=0.0)
for _ in range(4):
    t0 = time.perf_counter()
    args = (model, learner.reference, optimizer, learner.params, prompts)
    policy_update(*args, rolled.completions, adv, cfg)
    print(f"update {time.perf_counter() - t0:.2f} s")
