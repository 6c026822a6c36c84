"""`glmflash bench rl`: RL rollouts per second, and where an RL step's time goes.

Steps of the pipeline's RL stage (`PipelinePlan.full(0).rl`: 4 tasks x 16 samples, verified,
one update of the whole model, in the stage's precision) run from a trained checkpoint, each
timed in its phases: sampling (cached decoding), verification (the sandboxed pool) and the
update; the first step warms up (the verifier's workers start) and is not counted. A random
model would not do: its completions stop at their first token, so `--checkpoint` is required.

The baseline is the reference lab's way of sampling, measured in the same run on the first
timed step's prompts with the same seed and weights, just before that step: the whole prefix
recomputed for every new token. Its ratio compares the RL step with that sampling (same
verification and update) against ours.
Where bf16 matmuls are fast (`device.autocast_dtype` auto), one update on the same rollouts is
also timed in fp32 and in bf16 in turn: whether bf16 updates would pay on this machine.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from glmflash import checkpoint as ckpt
from glmflash.config import PipelinePlan, RLConfig
from glmflash.device import autocast_dtype
from glmflash.train.policy_gradient import advantages
from glmflash.train.rl import (
    make_learner,
    policy_update,
    rl_step,
    rl_tasks,
    roll_out,
    sample_rollouts,
)

PHASES = ("sample", "verify", "update")
TARGET_ROLLOUTS_PER_S = 10.0  # the reference lab's RL: 1,536 rollouts in 155 s on a GPU


def bench_rl(
    checkpoint: str | Path,
    steps: int = 3,
    device: torch.device | str = "cpu",
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Every figure of `glmflash bench rl`, as one JSON-ready dict with `ratios`."""
    cfg = PipelinePlan.full(seed=0).rl
    device = torch.device(device)
    amp = autocast_dtype(device, cfg.precision)
    n, available = cfg.tasks_per_step, len(rl_tasks(cfg))
    if (steps + 1) * n > available:
        raise ValueError(f"at most {available // n - 1} timed steps (the RL stage's tasks)")
    rows, full_sample = _timed_steps(checkpoint, cfg, amp, steps, device, log)
    timed = rows[1:]
    step_seconds = sum(r["step_seconds"] for r in timed) / steps
    phases = _phases(timed)
    rollouts = n * cfg.group_size
    full_step = rows[1]["step_seconds"] - rows[1]["sample_seconds"] + full_sample
    result = {
        "bench": "rl",
        "checkpoint": str(checkpoint),
        "update_dtype": str(amp or torch.float32).removeprefix("torch."),
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
    bf16 = autocast_dtype(device, "auto")
    if bf16 is not None:  # bf16 matmuls are fast here: would bf16 updates pay?
        log("the update in fp32 and in bf16 on the same rollouts, in turn")
        updates = _update_seconds(checkpoint, cfg, bf16, device)
        result["update_seconds_same_rollouts"] = updates
        result["ratios"]["update_fp32_vs_bf16"] = updates["fp32"] / updates["bf16"]
    return result


def _update_seconds(
    checkpoint: str | Path, cfg: RLConfig, bf16: torch.dtype, device: torch.device, rounds: int = 2
) -> dict[str, float]:
    """Best seconds of one update (`policy_update`, an AdamW at lr 0 so the weights stay) on
    the same rollouts (the stage's first step with reward spread, from the checkpoint), in
    fp32 and under autocast to `bf16`, taking turns `rounds` times."""
    model, _ = ckpt.load_model(checkpoint, device)
    tasks, n = rl_tasks(cfg), cfg.tasks_per_step
    with tempfile.TemporaryDirectory(prefix="bench-rl-") as tmp:
        learner = make_learner(model, cfg, Path(tmp), amp=None)
        for g0 in range(0, len(tasks) - n + 1, n):  # the first step with a gradient
            rolled = roll_out(learner, tasks[g0 : g0 + n], g0)
            adv = advantages(rolled.rewards, cfg.advantage, cfg.normalize_std).flatten()
            if adv.any():
                break
    prompts = [c.prompt_ids for c in rolled.completions]
    optimizer = torch.optim.AdamW(learner.params, lr=0.0)
    best = {"fp32": math.inf, "bf16": math.inf}
    for _ in range(rounds):
        for name, dtype in (("fp32", None), ("bf16", bf16)):
            t0 = time.perf_counter()
            args = (model, learner.reference, optimizer, learner.params, prompts)
            policy_update(*args, rolled.completions, adv, cfg, amp=dtype)
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def _timed_steps(
    checkpoint: str | Path,
    cfg: RLConfig,
    amp: torch.dtype | None,
    steps: int,
    device: torch.device,
    log: Callable[[str], None],
) -> tuple[list[dict[str, Any]], float]:
    """steps + 1 RL steps of the stage from the checkpoint, updates under autocast to `amp`:
    each step's figures with its seconds, and the seconds of sampling the first timed step's
    rollouts by recomputing the prefix per token, just before that step."""
    model, _ = ckpt.load_model(checkpoint, device)
    tasks, n = rl_tasks(cfg), cfg.tasks_per_step
    rows, full_sample = [], math.nan
    with tempfile.TemporaryDirectory(prefix="bench-rl-") as tmp:
        learner = make_learner(model, cfg, Path(tmp), amp=amp)
        for s in range(steps + 1):
            if s == 1:  # the weights the first timed step samples with
                log("the first timed step's sampling, recomputing the prefix per token (slow)")
                t0 = time.perf_counter()
                sample_rollouts(model, tasks[n : 2 * n], n, cfg, use_cache=False)
                full_sample = time.perf_counter() - t0
            log(f"RL step {s + 1} of {steps + 1}" + (" (warm-up)" if s == 0 else ""))
            t0 = time.perf_counter()
            stats = rl_step(learner, tasks[s * n : (s + 1) * n], s * n)
            rows.append({**stats, "step_seconds": time.perf_counter() - t0})
    return rows, full_sample


def _phases(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Mean seconds per step of each phase, and the rest ("other")."""
    phases = {p: sum(r[f"{p}_seconds"] for r in rows) / len(rows) for p in PHASES}
    phases["other"] = sum(r["step_seconds"] for r in rows) / len(rows) - sum(phases.values())
    return phases


__all__ = ["bench_rl"]
