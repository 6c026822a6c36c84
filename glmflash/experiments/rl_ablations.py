"""RL ablations: which RLOO settings move greedy dev pass@1?

Every condition starts from the same pretrained checkpoint (`--set init=DIR`, e.g. the
pipeline's selected pretraining checkpoint) and changes one setting of the baseline
(binary reward, invalid penalty -0.1, temperature 0.8, group size 16, lr 3e-4):

    partial              reward = fraction of the cases passed (+ the same penalty)
    penalty-0, penalty-1 invalid penalty 0 or -1
    temp-0.2             sampling temperature 0.2
    group-4, group-8     groups of 4 or 8 completions (the same tasks, fewer rollouts)
    ptx-1                plus the pretraining next-token loss, weight 1 (--ptx 1)
    lr-1e-4              a third of the learning rate
    kl-0.1               plus a KL penalty to the initial policy, beta 0.1 (--kl 0.1)
    lr-0                 the control: sampled, scored and stepped exactly as the baseline
                         but with learning rate 0, so the final policy is the starting one

ptx-1, lr-1e-4 and kl-0.1 are the candidate remedies for RL drifting away from a strong
base; lr-0 says whether RL from this base improves on it at all.

The seed (31415, 27182, 16180) sets the RL task order and the sampling; the evaluation is
greedy pass@1 of the final policy (no checkpoint selection, so the dev set is not also used
to choose) on the same 40 dev tasks per trained family for every run, and, as a secondary
metric, on 40 dev tasks of each untrained family (what RL keeps of what it does not train).
The reference lab found no ablation significant on 20 tasks.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from glmflash import checkpoint as ckpt
from glmflash.checkpoint import checkpoint_dirs
from glmflash.config import RLConfig
from glmflash.config.evaluation import Sampling
from glmflash.data.code_tasks import FAMILIES, tasks
from glmflash.evaluate.coding import evaluate_tasks
from glmflash.experiments.registry import Experiment, register
from glmflash.train.rl import train_rl
from glmflash.train.runlog import read_jsonl

EVAL_SEED = 0  # the dev tasks, the same for every condition and seed
BASELINE: dict[str, Any] = {
    "init": None,
    "families": ["increment", "double", "even"],
    "groups": 96,
    "group_size": 16,
    "tasks_per_step": 4,
    "temperature": 0.8,
    "lr": 3e-4,
    "reward": "binary",
    "invalid_penalty": -0.1,
    "scope": "last-block-head",
    "kl": 0.0,
    "ptx": 0.0,
    "dev_per_family": 40,
    "max_new_tokens": 48,
    "ladder_share": 0.0,
}
CHANGES: dict[str, dict[str, Any]] = {
    "baseline": {},
    "partial": {"reward": "partial"},
    "penalty-0": {"invalid_penalty": 0.0},
    "penalty-1": {"invalid_penalty": -1.0},
    "temp-0.2": {"temperature": 0.2},
    "group-4": {"group_size": 4},
    "group-8": {"group_size": 8},
    "ptx-1": {"ptx": 1.0},
    "lr-1e-4": {"lr": 1e-4},
    "kl-0.1": {"kl": 0.1},
    "lr-0": {"lr": 0.0},
}


def run(config: dict[str, Any], seed: int) -> dict[str, Any]:
    """RLOO from config['init'] with this seed, then greedy dev pass@1 of the final policy."""
    c = dict(config)
    init = c.pop("init")
    if not init:
        raise ValueError(
            "rl-ablations starts from a pretrained checkpoint: pass --set init=CHECKPOINT_DIR"
        )
    dev_per_family = c.pop("dev_per_family")
    cfg = RLConfig(
        **{**c, "families": tuple(c["families"])},
        seed=seed,
        eval_every=c["groups"],
        dev_per_family=1,
    )
    dev = tasks("dev", cfg.families, per_family=dev_per_family, seed=EVAL_SEED)
    others = [f for f in FAMILIES if f not in cfg.families]
    held = tasks("dev", others, per_family=dev_per_family, seed=EVAL_SEED)
    with tempfile.TemporaryDirectory(prefix="rl-ablation-") as tmp:
        folder = Path(tmp)
        summary = train_rl(init, folder, cfg, device="cpu", log=lambda _: None, progress=False)
        model, _ = ckpt.load_model(checkpoint_dirs(folder)[-1])
        rows = list(read_jsonl(folder / "metrics.jsonl"))
    greedy = Sampling(max_new_tokens=cfg.max_new_tokens)
    result = evaluate_tasks(model, dev, greedy)
    passed, total = result.counts()
    untrained = evaluate_tasks(model, held, greedy).pass_rate
    return {
        "dev_pass1": passed / total,
        "dev_passed": passed,
        "dev_total": total,
        "untrained_pass1": untrained,
        "sample_pass_rate": sum(r["pass_rate"] for r in rows) / len(rows),
        "invalid_rate": sum(r["invalid_rate"] for r in rows) / len(rows),
        "no_spread_groups": summary["no_spread_groups"],
        "rollouts_per_s": summary["rollouts_per_s"],
        "curves": {
            "reward_mean": [[r["step"], r["reward_mean"]] for r in rows],
            "pass_rate": [[r["step"], r["pass_rate"]] for r in rows],
        },
    }


EXPERIMENT = register(
    Experiment(
        name="rl-ablations",
        description=(
            "One RLOO setting changed at a time from the baseline (binary reward, "
            "penalty -0.1, temperature 0.8, group size 16, lr 3e-4), all from --set "
            "init=CKPT; greedy pass@1 of the final policy on 40 dev tasks per trained "
            "family (and per untrained family, secondary)."
        ),
        conditions={name: {**BASELINE, **change} for name, change in CHANGES.items()},
        seeds=(31415, 27182, 16180),
        run=run,
        metric="dev_pass1",
        secondary=("untrained_pass1", "sample_pass_rate", "invalid_rate"),
        comparisons=[("baseline", name) for name in CHANGES if name != "baseline"],
        quick={"groups": 4, "tasks_per_step": 2, "dev_per_family": 2, "max_new_tokens": 16},
        quick_seeds=(31415, 27182),
    )
)
