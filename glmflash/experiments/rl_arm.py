"""One RL (or supervised) arm of an experiment: train from a pretrained checkpoint with any
RLConfig fields, then read the final policy's greedy pass@1 on rungs of the task ladder.

An arm's configuration is RLConfig's fields plus three of the experiment's own:

    init      the pretrained checkpoint every arm and seed starts from (--set init=DIR)
    per_rung  evaluation tasks per rung
    split     where they are drawn: dev while settings are chosen, confirm for the claim
    passk     optional {"samples": n, "per_rung": m}: also n samples of m tasks per rung for
              pass@k at every k up to n (`evaluate.pass_curve`), drawn with the run's seed

    train     optional, True by default; False reads the checkpoint itself, untrained (the
              base of a comparison)

The seed sets the task order and the sampling; the evaluation tasks are the same for every
arm and seed (EVAL_SEED), so arms are paired within a seed and seeds differ only in training.
No checkpoint is selected: the final policy is what the arm produced.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from glmflash import checkpoint as ckpt
from glmflash.checkpoint import checkpoint_dirs
from glmflash.config import RLConfig
from glmflash.config.evaluation import Sampling
from glmflash.evaluate.pass_curve import pass_counts
from glmflash.evaluate.rungs import evaluate_rungs
from glmflash.train.rl import train_rl
from glmflash.train.runlog import read_jsonl

EVAL_SEED = 0
HEALTH = ("entropy", "kl", "no_spread_share")  # means over an RL arm's steps
CURVES = ("reward_mean", "pass_rate", "no_spread_share")  # per step: where training flattens
QUICK = {
    "groups": 4,
    "tasks_per_step": 2,
    "group_size": 4,
    "max_new_tokens": 16,
    "per_rung": 2,
}  # --quick: tiny runs of every arm


def train_and_evaluate(config: dict[str, Any], seed: int, rungs: Sequence[str]) -> dict[str, Any]:
    """Train one arm with this seed; greedy pass@1 per rung of the final policy (a rate), the
    training time, the means of the health figures and the per-step curves."""
    c = dict(config)
    init, per_rung, split = c.pop("init"), c.pop("per_rung"), c.pop("split", "dev")
    passk, train = c.pop("passk", None), c.pop("train", True)
    if not init:
        raise ValueError(
            "this experiment starts from a pretrained checkpoint: pass --set init=CHECKPOINT_DIR"
        )
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    if not train:
        model, _ = ckpt.load_model(init)
    else:
        cfg = RLConfig(
            **{k: tuple(v) if isinstance(v, list) else v for k, v in c.items()},  # from JSON
            seed=seed,
            eval_every=c["groups"],
            dev_per_family=1,
            dev_ladder=1,
        )
        with tempfile.TemporaryDirectory(prefix="rl-arm-") as tmp:
            train_rl(init, Path(tmp), cfg, device="cpu", log=lambda _: None, progress=False)
            model, _ = ckpt.load_model(checkpoint_dirs(Path(tmp))[-1])
            rows = list(read_jsonl(Path(tmp) / "metrics.jsonl"))
    train_seconds = time.perf_counter() - t0
    greedy = evaluate_rungs(model, rungs, split, per_rung, Sampling(seed=EVAL_SEED))["greedy"]
    out: dict[str, Any] = {r: k / n for r, (k, n) in greedy.per_family.items()}
    # each task's greedy outcome, in the order the rung drew its tasks (the same tasks for
    # every arm and seed): the report's per-rung intervals resample seeds, then tasks
    out["greedy_passes"] = {r: [] for r in greedy.per_family}
    for record in greedy.records:
        out["greedy_passes"][record["group"]].append(int(record["status"] == "pass"))
    out["train_seconds"] = train_seconds
    out["init_sha256"] = ckpt.read_config(init)[1].get("sha256")  # which weights: paths repeat
    out["rollouts_per_s"] = rows[-1].get("rollouts_per_s") if rows else None
    if passk:
        out["passk_samples"] = passk["samples"]
        out["passes"] = pass_counts(model, rungs, split, passk["per_rung"], passk["samples"], seed)
    for key in HEALTH:
        values = [r[key] for r in rows if r.get(key) is not None]
        if values:
            out[key] = sum(values) / len(values)
    hists = [r["pool_pass_hist"] for r in rows if r.get("pool_pass_hist")]
    if hists:  # the edge sampler's pool: observed pass rates in fifths, after the first step
        out["pool_pass_hist"] = {"first": hists[0], "last": hists[-1]}  # and after the last
    if rows:
        out["curves"] = {
            key: [[r["step"], r[key]] for r in rows if r.get(key) is not None] for key in CURVES
        }
    return out
