"""The RL stage's sampling with one prefill per distinct prompt against one per row (each of
a task's 16 samples prefilled again, as before the sharing), from a trained checkpoint:

    python results/profile/prefix_sharing.py CHECKPOINT [OUT.json]

The first 3 steps of the pipeline's RL stage (4 tasks x 16 samples each), timed in turns, best
of 3; both paths draw the same completions (the same seed and logits up to rounding), so the
token counts are printed beside the times. One JSON object with the machine record.
"""

import json
import sys
import time

import torch

import glmflash.generate as gen
from glmflash.checkpoint import load_model
from glmflash.config import RLConfig
from glmflash.data import derive_seed
from glmflash.machine import machine_record
from glmflash.train.rl import rl_tasks

cfg = RLConfig()
model, _ = load_model(sys.argv[1])
tasks = rl_tasks(cfg)
n = cfg.tasks_per_step
steps = [
    [t.prompt for t in tasks[s * n : (s + 1) * n] for _ in range(cfg.group_size)] for s in range(3)
]
real_unique = torch.unique


def per_row(prompt, dim=0, return_inverse=False):
    """torch.unique that keeps every row: one prefill per row."""
    return prompt, torch.arange(prompt.shape[0])


def sample(shared: bool) -> tuple[float, int]:
    gen.torch.unique = real_unique if shared else per_row
    t0, tokens = time.perf_counter(), 0
    for s, prompts in enumerate(steps):
        out = gen.generate(
            model,
            prompts,
            cfg.max_new_tokens,
            cfg.temperature,
            cfg.top_p,
            seed=derive_seed("rl", cfg.seed, s * n),
        )
        tokens += sum(len(c.ids) for c in out)
    gen.torch.unique = real_unique
    return time.perf_counter() - t0, tokens


times = {"shared": [], "per_row": []}
tokens = {}
for _ in range(3):
    for name in times:
        seconds, tokens[name] = sample(name == "shared")
        times[name].append(seconds)
best = {k: min(v) for k, v in times.items()}
result = {
    "checkpoint": sys.argv[1],
    "rollouts": 3 * n * cfg.group_size,
    "seconds": times,
    "completion_tokens": tokens,
    "rollouts_per_s": {k: 3 * n * cfg.group_size / s for k, s in best.items()},
    "ratio_shared_vs_per_row": best["per_row"] / best["shared"],
    "machine": machine_record("cpu"),
}
print(json.dumps(result, indent=2))
if len(sys.argv) > 2:
    open(sys.argv[2], "w").write(json.dumps(result, indent=2))
