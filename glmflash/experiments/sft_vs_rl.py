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

from typing import Any

from glmflash.experiments.registry import Experiment, register
from glmflash.experiments.rl_arm import QUICK, train_and_evaluate

RUNGS = ("rl_only", "unseen_depth2", "unseen_depth3", "seed_neutral_names")
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
    """One arm with this seed: `rl_arm.train_and_evaluate` on this experiment's rungs."""
    rates = train_and_evaluate(config, seed, RUNGS)
    return {**rates, "unseen": (rates["unseen_depth2"] + rates["unseen_depth3"]) / 2}


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
