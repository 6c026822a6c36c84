"""`glmflash bench rl`: RL rollouts per second, and where an RL step's time goes.

Steps of the pipeline's RL stage (`RLConfig`'s defaults: 4 tasks x 16 samples, verified,
one update) run from a trained checkpoint, each timed in its phases: sampling (cached
decoding), verification (the sandboxed pool) and the update; the first step warms up (the
verifier's workers start) and is not counted. A random model would not do: its completions
stop at their first token, so `--checkpoint` is required.

The baseline is the reference lab's way of sampling, measured in the same run on the first
timed step's prompts with the same seed: the whole prefix recomputed for every new token. Its
ratio compares the RL step with that sampling (same verification and update) against ours.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from glmflash.data import derive_seed
from glmflash.generate import generate
from glmflash.train import checkpoint as ckpt
from glmflash.train.rl import RLConfig, make_learner, rl_step, rl_tasks

PHASES = ("sample", "verify", "update")
TARGET_ROLLOUTS_PER_S = 10.0  # the reference lab's RL: 1,536 rollouts in 155 s on a GPU


def full_recompute_sampling(model, cfg: RLConfig, batch: list, g0: int) -> float:
    """Seconds to draw an RL step's samples of `batch` (its first group index g0, so the same
    seed) recomputing the whole prefix for every token, as the reference lab's RL did."""
    t0 = time.perf_counter()
    generate(
        model,
        [t.prompt for t in batch for _ in range(cfg.group_size)],
        cfg.max_new_tokens,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        seed=derive_seed("rl", cfg.seed, g0),
        use_cache=False,
    )
    return time.perf_counter() - t0


def bench_rl(
    checkpoint: str | Path,
    steps: int = 3,
    device: torch.device | str = "cpu",
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Every figure of `glmflash bench rl`, as one JSON-ready dict with `ratios`."""
    cfg = RLConfig()
    model, _ = ckpt.load_model(checkpoint, torch.device(device))
    tasks = rl_tasks(cfg)
    n = cfg.tasks_per_step
    if (steps + 1) * n > len(tasks):
        raise ValueError(f"at most {len(tasks) // n - 1} timed steps (the RL stage's tasks)")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-rl-") as tmp:
        learner = make_learner(model, cfg, Path(tmp))
        for s in range(steps + 1):
            log(f"RL step {s + 1} of {steps + 1}" + (" (warm-up)" if s == 0 else ""))
            t0 = time.perf_counter()
            stats = rl_step(learner, tasks[s * n : (s + 1) * n], s * n)
            rows.append({**stats, "step_seconds": time.perf_counter() - t0})
    timed = rows[1:]
    step_seconds = sum(r["step_seconds"] for r in timed) / steps
    phases = {p: sum(r[f"{p}_seconds"] for r in timed) / steps for p in PHASES}
    phases["other"] = step_seconds - sum(phases.values())
    rollouts = n * cfg.group_size

    log("the first timed step's sampling again, recomputing the prefix for every token (slow)")
    full_sample = full_recompute_sampling(model, cfg, tasks[n : 2 * n], n)
    full_step = rows[1]["step_seconds"] - rows[1]["sample_seconds"] + full_sample
    return {
        "bench": "rl",
        "checkpoint": str(checkpoint),
        "timed_steps": steps,
        "rollouts_per_step": rollouts,
        "rollouts_per_s": rollouts / step_seconds,
        "target_rollouts_per_s": TARGET_ROLLOUTS_PER_S,
        "step_seconds": step_seconds,
        "phase_seconds": phases,
        "phase_share": {p: s / step_seconds for p, s in phases.items()},
        "mean_completion_tokens": sum(r["mean_len"] for r in timed) / steps,
        "truncation_rate": sum(r["truncation_rate"] for r in timed) / steps,
        "full_recompute": {
            "sample_seconds": full_sample,
            "cached_sample_seconds": rows[1]["sample_seconds"],
            "rollouts_per_s": rollouts / full_step,
        },
        "ratios": {
            "rl_step_vs_full_recompute_sampling": full_step / rows[1]["step_seconds"],
            "rl_sampling_cached_vs_full": full_sample / rows[1]["sample_seconds"],
        },
    }


__all__ = ["bench_rl"]
