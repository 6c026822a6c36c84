"""SFT against RL: which one generalises further from the same tasks?

Both arms start from the same pretrained checkpoint (`--set init=DIR`) and train the same
scope (last block + head) with the same optimizer, learning rate and number of updates on the
same tasks: the ladder's RL structures (`ladder_share` 1), 48 tasks in steps of 4, in the
seed's order (half the pipeline's RL stage, so that ten runs fit a session on 2 cores).

    rl    RLOO with the verifier's binary reward, 8 samples per task
    sft   supervised fine-tuning on each task's reference body (one per task and update:
          no sampling, no verifier; far less compute than rl, which samples 8 per task)

The seed sets the task order (and rl's sampling), so both arms of a seed see the same tasks.
Each final policy (no checkpoint selection) is evaluated greedily on dev-named tasks of the
rungs: `rl_only` (the trained structures, new constants and names: in distribution),
`unseen_depth2`, `unseen_depth3` (held out from pretraining and from both arms) and
`seed_neutral_names`. The primary metric `unseen` is the mean of the two unseen rungs.
At large scale Chu et al. (2025) found that RL transfers to unseen rule variants and SFT does
not; this measures what happens here.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from glmflash.evaluate.config import Sampling
from glmflash.evaluate.rungs import evaluate_rungs
from glmflash.experiments.registry import Experiment, register
from glmflash.train import checkpoint as ckpt
from glmflash.train.checkpoint import checkpoint_dirs
from glmflash.train.rl import RLConfig, train_rl
from glmflash.train.runlog import read_jsonl

EVAL_SEED = 0  # the evaluation tasks, the same for every arm and seed
RUNGS = ("rl_only", "unseen_depth2", "unseen_depth3", "seed_neutral_names")
HEALTH = ("entropy", "kl", "no_spread_share")  # means over an RL arm's steps
QUICK = {
    "groups": 4,
    "tasks_per_step": 2,
    "group_size": 4,
    "max_new_tokens": 16,
    "per_rung": 2,
}  # --quick: tiny runs of every arm
BASE: dict[str, Any] = {
    "init": None,
    "families": [],
    "ladder_share": 1.0,
    "groups": 48,
    "group_size": 8,
    "tasks_per_step": 4,
    "lr": 1e-4,
    "scope": "last-block-head",
    "per_rung": 48,
}


def run(config: dict[str, Any], seed: int) -> dict[str, Any]:
    """Train one arm (any RLConfig fields in `config`) with this seed, then greedy pass@1 per
    rung of the final policy, and the means of the run's health figures (RL arms)."""
    c = dict(config)
    init, per_rung = c.pop("init"), c.pop("per_rung")
    if not init:
        raise ValueError(
            "this experiment starts from a pretrained checkpoint: pass --set init=CHECKPOINT_DIR"
        )
    cfg = RLConfig(
        **{**c, "families": tuple(c["families"])},
        seed=seed,
        eval_every=c["groups"],
        dev_per_family=1,
        dev_ladder=1,
    )
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sft-vs-rl-") as tmp:
        train_rl(init, Path(tmp), cfg, device="cpu", log=lambda _: None, progress=False)
        model, _ = ckpt.load_model(checkpoint_dirs(Path(tmp))[-1])
        rows = list(read_jsonl(Path(tmp) / "metrics.jsonl"))
    train_seconds = time.perf_counter() - t0
    greedy = evaluate_rungs(model, RUNGS, "dev", per_rung, Sampling(seed=EVAL_SEED))["greedy"]
    rates = {r: k / n for r, (k, n) in greedy.per_family.items()}
    health = {}
    for key in HEALTH:
        values = [r[key] for r in rows if r.get(key) is not None]
        if values:
            health[key] = sum(values) / len(values)
    return {
        **rates,
        "unseen": (rates["unseen_depth2"] + rates["unseen_depth3"]) / 2,
        "train_seconds": train_seconds,
        **health,
    }


EXPERIMENT = register(
    Experiment(
        name="sft-vs-rl",
        description=(
            "RLOO against supervised fine-tuning on reference bodies, same checkpoint "
            "(--set init=CKPT), tasks, scope, learning rate and updates; greedy pass@1 "
            "of the final policy on dev tasks of the trained (rl_only) and held-out "
            "(unseen_depth2, unseen_depth3) structures."
        ),
        conditions={"sft": {**BASE, "objective": "sft"}, "rl": {**BASE, "objective": "rloo"}},
        seeds=(1, 2, 3, 4, 5),
        run=run,
        metric="unseen",
        secondary=(
            "rl_only",
            "unseen_depth2",
            "unseen_depth3",
            "seed_neutral_names",
            "train_seconds",
        ),
        comparisons=[("sft", "rl")],
        quick=QUICK,
        quick_seeds=(1, 2),
    )
)
