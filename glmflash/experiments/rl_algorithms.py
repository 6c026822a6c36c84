"""RL algorithms on the task ladder: which advantage and loss transfer furthest?

Four arms from the same pretrained checkpoint (`--set init=DIR`), the same tasks (the ladder's
RL structures, 48 in steps of 4, in the seed's order), the same scope, learning rate and
rollouts (8 per task), differing only in the pieces of `policy_gradient.ALGORITHMS`:

    rloo     leave-one-out advantage, each completion's summed log-probability (the default)
    grpo     group-normalised advantage (mean and std), log-probability averaged per token
    dr_grpo  group-mean advantage, summed over a constant token budget (no length or std
             normalisation)
    ppo      leave-one-out advantage, per-token mean, 4 clipped-ratio updates per batch of
             rollouts (the only arm with more than one update per batch)

Evaluation as in sft-vs-rl (the same function): greedy pass@1 of the final policy on dev tasks
of the trained structures (`rl_only`) and of the held-out ones; the primary metric `unseen` is
the mean of unseen_depth2 and unseen_depth3. Each run also reports the means of its entropy,
KL to the initial policy and share of groups without reward spread.
"""

from __future__ import annotations

from glmflash.experiments.registry import Experiment, register
from glmflash.experiments.rl_arm import HEALTH, QUICK
from glmflash.experiments.sft_vs_rl import BASE, RUNGS, run
from glmflash.train.policy_gradient import ALGORITHMS

EXPERIMENT = register(
    Experiment(
        name="rl-algorithms",
        description=(
            "RLOO, GRPO, Dr. GRPO and PPO-style clipped updates at matched rollouts from "
            "the same checkpoint (--set init=CKPT) on the ladder's RL structures; greedy "
            "pass@1 of the final policy on the trained and held-out structures."
        ),
        conditions={
            name: {**BASE, "objective": "rloo", **fields} for name, fields in ALGORITHMS.items()
        },
        seeds=(1, 2, 3, 4, 5),
        run=run,
        metric="unseen",
        secondary=(*RUNGS, *HEALTH, "train_seconds"),
        comparisons=[("rloo", name) for name in ALGORITHMS if name != "rloo"],
        quick=QUICK,
        quick_seeds=(1, 2),
    )
)
