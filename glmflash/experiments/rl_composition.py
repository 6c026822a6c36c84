"""Does RL teach the model to compose what it has not seen composed?

Yuan et al. (2025, "From f(x) and g(x) to f(g(x))") find that RL on depth-2 compositions of
skills a model already has transfers to deeper, unseen compositions, where RL on depth 1 or
supervised training on the same data does not; Zhang, Neubig and Yue (2025) find RL gains only
at the edge of competence, on tasks the base solves sometimes. Every arm starts from one
checkpoint with headroom (`--set init=DIR`: the pipeline's, or the budget curve's base) and
trains on the pipeline RL stage's tasks (the ladder's RL structures and three seed families)
for the same number of groups:

    base      the checkpoint itself, untrained: what every gain is measured from
    stage     the pipeline's RL stage: tasks in order, last block and head, lr 1e-4
    edge      tasks drawn at the edge of competence (task_sampler), groups without reward
              spread dropped and redrawn (DAPO's dynamic sampling)
    edge_all  edge, training the whole model at ALL_LR (chosen by rl-scope-lr on dev)
    rft       the supervised control at the same scope and learning rate: imitate the
              policy's own passing completions (rejection-sampling fine-tuning)

The final policies are read on the confirm split (opened once, for the claim), greedy pass@1
per rung: the trained structures (rl_only), those pretraining taught (seen_depth2), those no
training text or RL task holds (unseen_depth2, unseen_depth3), depth 1 under phrasings no
training text uses, and the seed families under neutral and misleading names. The primary
metric `unseen` is the mean of the two unseen rungs.

`rl-passk` asks whether the arm finds new solutions or only sharpens (Yue et al. 2025): the
checkpoint itself and the arm after training (edge_all unless --set says otherwise), 64
samples of 16 tasks per rung, pass@k at every k up to 64 (`evaluate.pass_curve`).

`rl-remedies` screens, on dev, what the composition study's near-null points at. Its RL
structures were 94% depth 3 (the RL group holds 63 structures of depth 2 and 1,000 of depth
3), each met once, and depth 3 is where the base almost never passes: f(g(x)) trains on
depth-2 compositions and leaves depth 3 to transfer. So: edge_all on the depth-2 RL structures
alone (`ladder_depths` 2: each structure met about 1.5 times in 96 ladder groups), the same
twice as long, and the same with the sampler weight that targets a group with spread
(1 - p^G - (1 - p)^G) and old rollouts discounted (the estimates follow the policy). Its rungs
add the trained structures themselves (`rl_only_depth2`).

`rl-structures` asks what the fresh-instance overfit check (results/rl_edge/overfit.py: 8
structures met 24 times each lift new instances of themselves, untrained structures stay flat)
says for the whole pool: every one of the 63 depth-2 RL structures met MEETINGS times, each time
a new instance (new constants, arguments, phrasing, name), on the whole model at ALL_LR, tasks
in the ladder's shuffled cycle (no sampler: every structure its share), nothing else trained.
Read on the confirm split, 64 tasks a rung: the trained structures (`rl_only_depth2`), the
unseen rungs (does a structure learnt carry to compositions never met?), and the seed families
RL no longer trains (are they kept?).

`rl-sampler` asks whether the edge sampler drops fewer groups when a task's pass rate is
estimated from every rollout of its structure (`edge_estimate` structure) instead of its own:
in its pool (192 groups: 96 instances of the 63 depth-2 RL structures, 32 of each seed family) a
probe of 2 samples tells an always-solved instance from one at the edge poorly (p_hat 3/4 at
best, weight 0.19 against 0.25), so a seed family the base solves 96% of the time keeps
being drawn.

`rl-meetings` asks what of rl-structures' gain the pipeline's RL stage can afford (16,128
rollouts take 27 minutes on the fastest 2-core host, the stage has 2 to 3): every structure met
4 times (4,032 rollouts) at ALL_LR and at 1e-4 (fewer steps, larger ones), and 8 times; dev
split, 64 tasks a rung, so the stage's setting is chosen off the confirm split.

`rl-stage-variants` asks whether the pipeline's stage (`PipelinePlan.rl_stage`, whose arm is
`stage`) teaches more with its rollouts at temperature 1 than at 0.8 (`t10`), and with the edge
sampler on top (`edge_t10`: pass rates per structure, groups without spread redrawn). From the
pipeline's base, samples of every depth-2 RL structure imply that 50% of the stage's groups of
16 have no reward spread at 0.8 and 38% at 1.0, and that 15-16 of the 63 structures are
never solved in 64 samples at either (results/rl_edge/spread_probe.py): the uniform order
cannot go below that floor, a sampler can. Dev split, 64 tasks a rung.

`rl-scope-lr` chooses ALL_LR: the edge sampler on the whole model at three learning rates and
on the last block and head at the stage's rate, and the untrained checkpoint, on the dev
split; its `rollouts_per_s` says what training the whole model costs.
"""

from __future__ import annotations

from typing import Any

from glmflash.config.plan import RL_LR, RL_MEETINGS
from glmflash.data import ladder
from glmflash.experiments.registry import Experiment, register
from glmflash.experiments.rl_arm import QUICK, train_and_evaluate

RUNGS = (
    "rl_only",
    "seen_depth2",
    "unseen_depth2",
    "unseen_depth3",
    "depth1_heldout_phrasings",
    "seed_neutral_names",
    "seed_misleading_names",
)
ALL_LR = RL_LR  # whole-model learning rate: rl-scope-lr's choice on dev (results/rl_edge)
BASE: dict[str, Any] = {
    "init": None,
    "families": ["increment", "double", "even"],
    "ladder_share": 0.5,
    "groups": 192,
    "group_size": 16,
    "tasks_per_step": 4,
    "lr": 1e-4,
    "scope": "last-block-head",
    "sampler": "uniform",
    "per_rung": 32,
    "split": "confirm",
}
EDGE = {"sampler": "edge", "edge_probe": 2}
ALL = {"scope": "all", "lr": ALL_LR}


def run(config: dict[str, Any], seed: int, rungs: tuple[str, ...] = RUNGS) -> dict[str, Any]:
    """One arm with this seed; `unseen` is the mean of the two unseen rungs."""
    rates = train_and_evaluate(config, seed, rungs)
    return {**rates, "unseen": (rates["unseen_depth2"] + rates["unseen_depth3"]) / 2}


SECONDARY = (*RUNGS, "no_spread_share", "train_seconds", "rollouts_per_s")

EXPERIMENT = register(
    Experiment(
        name="rl-composition",
        description=(
            "From one checkpoint with headroom (--set init=CKPT): the pipeline's RL stage, "
            "the edge-of-competence sampler, the sampler on the whole model, and rejection-"
            "sampling fine-tuning at the same scope; greedy pass@1 on the confirm split per "
            "ladder rung, the primary metric the mean of the unseen rungs."
        ),
        conditions={
            "base": {**BASE, "train": False},
            "stage": BASE,
            "edge": {**BASE, **EDGE},
            "edge_all": {**BASE, **EDGE, **ALL},
            "rft": {**BASE, **ALL, "advantage": "rft"},
        },
        seeds=tuple(range(1, 9)),  # 8 paired seeds: a sign-flip test can reach p = 1/128
        run=run,
        metric="unseen",
        secondary=SECONDARY,
        comparisons=[
            ("base", "stage"),
            ("base", "edge_all"),
            ("stage", "edge"),
            ("stage", "edge_all"),
            ("rft", "edge_all"),
        ],
        quick=QUICK,
        quick_seeds=(1, 2),
    )
)

LR_SWEEP = register(
    Experiment(
        name="rl-scope-lr",
        description=(
            "The edge sampler training the whole model at three learning rates, and the last "
            "block and head at 1e-4, from one checkpoint (--set init=CKPT); dev split."
        ),
        conditions={
            "base": {**BASE, "split": "dev", "train": False},
            "head_1e-4": {**BASE, **EDGE, "split": "dev"},
            **{
                f"all_{lr:.0e}": {**BASE, **EDGE, "scope": "all", "lr": lr, "split": "dev"}
                for lr in (1e-5, 3e-5, 1e-4)
            },
        },
        seeds=(1, 2),  # a screen: the composition study confirms with 8
        run=run,
        metric="unseen",
        secondary=SECONDARY,
        comparisons=[
            ("base", "head_1e-4"),
            *[("head_1e-4", f"all_{lr:.0e}") for lr in (1e-5, 3e-5, 1e-4)],
        ],
        quick=QUICK,
        quick_seeds=(1,),
    )
)

PASSK = {"passk": {"samples": 64, "per_rung": 16}}
PASSK_CURVES = register(
    Experiment(
        name="rl-passk",
        description=(
            "pass@k for k = 1..64 per ladder rung of the checkpoint (--set init=CKPT) and of the "
            "arm after training (edge sampler on the whole model unless --set changes it), on "
            "the same 16 confirm tasks per rung: new solutions or sharpening."
        ),
        conditions={
            "base": {**BASE, **PASSK, "train": False},
            "after": {**BASE, **EDGE, **ALL, **PASSK},
        },
        seeds=(1, 2, 3, 4),
        run=run,
        metric="unseen",
        secondary=SECONDARY,
        comparisons=[("base", "after")],
        quick={**QUICK, "passk": {"samples": 4, "per_rung": 2}},
        quick_seeds=(1,),
    )
)


def run_remedy(config: dict[str, Any], seed: int) -> dict[str, Any]:
    """`run` with the trained depth-2 structures read too."""
    return run(config, seed, REMEDY_RUNGS)


SPREAD = {"edge_weight": "spread", "edge_discount": 0.9}
DEV_EDGE_ALL = {**BASE, **EDGE, **ALL, "split": "dev"}
DEPTH2 = {**DEV_EDGE_ALL, "ladder_depths": [2]}
REMEDY_RUNGS = (*RUNGS, "rl_only_depth2")
REMEDIES = register(
    Experiment(
        name="rl-remedies",
        description=(
            "edge_all against the same on the depth-2 RL structures alone, twice as long, and "
            "with the sampler weighting the chance of a group with spread (old rollouts "
            "discounted), from one checkpoint (--set init=CKPT); dev split."
        ),
        conditions={
            "base": {**BASE, "split": "dev", "train": False},
            "edge_all": DEV_EDGE_ALL,
            "depth2": DEPTH2,
            "depth2_long": {**DEPTH2, "groups": 2 * BASE["groups"]},
            "depth2_spread": {**DEPTH2, **SPREAD},
        },
        seeds=(1, 2),  # a screen: a winner is confirmed with 8+ seeds on confirm
        run=run_remedy,
        metric="unseen",
        secondary=(*SECONDARY, "rl_only_depth2"),
        comparisons=[
            ("base", "edge_all"),
            ("edge_all", "depth2"),
            ("depth2", "depth2_long"),
            ("depth2", "depth2_spread"),
        ],
        quick=QUICK,
        quick_seeds=(1,),
    )
)


MEETINGS = 16  # overfit --fresh: most of the gain by 16 meetings (0.41 -> 0.57 of 0.59 at 24)
DEPTH2_STRUCTURES = len(ladder.structures("rl", 2))  # 63: the ladder's RL group at depth 2
STRUCTURES_READ = {"split": "confirm", "per_rung": 64}  # each rung's tasks cover its structures


def fresh(meetings: int, **settings: Any) -> dict[str, Any]:
    """The arm that meets every depth-2 RL structure `meetings` times, a new instance each time,
    on the whole model at ALL_LR, nothing else trained."""
    arm = {**BASE, **ALL, "families": [], "ladder_share": 1.0, "ladder_depths": [2]}
    return {**arm, "groups": meetings * DEPTH2_STRUCTURES, **settings}


STRUCTURES = register(
    Experiment(
        name="rl-structures",
        description=(
            "Every depth-2 RL structure met 16 times, a new instance each time, on the whole "
            "model, from one checkpoint (--set init=CKPT): the trained structures, the unseen "
            "rungs and the seed families on confirm, 64 tasks a rung."
        ),
        conditions={
            "base": {**BASE, **STRUCTURES_READ, "train": False},
            "fresh16": fresh(MEETINGS, **STRUCTURES_READ),
        },
        seeds=tuple(range(1, 9)),
        run=run_remedy,
        metric="rl_only_depth2",
        secondary=(*SECONDARY, "unseen"),
        comparisons=[("base", "fresh16")],
        quick=QUICK,
        quick_seeds=(1,),
    )
)

SAMPLER = register(
    Experiment(
        name="rl-sampler",
        description=(
            "The edge sampler on the depth-2 RL structures and the seed families, each task's "
            "pass rate estimated from its own rollouts against from every rollout of its "
            "structure, from one checkpoint (--set init=CKPT); the share of drawn groups "
            "without reward spread, dev split."
        ),
        conditions={
            "by_task": DEPTH2,
            "by_structure": {**DEPTH2, "edge_estimate": "structure"},
        },
        seeds=(1, 2),  # a screen of the sampler's bookkeeping
        run=run_remedy,
        metric="no_spread_share",
        secondary=(*SECONDARY, "rl_only_depth2", "unseen"),
        comparisons=[("by_task", "by_structure")],
        quick=QUICK,
        quick_seeds=(1,),
    )
)

MEETINGS_READ = {"split": "dev", "per_rung": 64}
BUDGETS = register(
    Experiment(
        name="rl-meetings",
        description=(
            "rl-structures' arm at budgets the pipeline's RL stage can carry: every depth-2 RL "
            "structure met 4 times (at lr 3e-5 and 1e-4) or 8 times, from one checkpoint "
            "(--set init=CKPT); dev split, 64 tasks a rung, to choose the stage's setting."
        ),
        conditions={
            "base": {**BASE, **MEETINGS_READ, "train": False},
            "fresh8": fresh(8, **MEETINGS_READ),  # first: two workers end together
            "fresh4": fresh(4, **MEETINGS_READ),
            "fresh4_1e-4": fresh(4, **MEETINGS_READ, lr=1e-4),
        },
        seeds=(1, 2),  # a screen: the stage's seed study (results/ladder_seeds) confirms
        run=run_remedy,
        metric="unseen",
        secondary=(*SECONDARY, "rl_only_depth2"),
        comparisons=[("base", "fresh4"), ("base", "fresh4_1e-4"), ("base", "fresh8")],
        quick=QUICK,
        quick_seeds=(1,),
    )
)

# The pipeline's RL stage as an arm: an arm reads its final policy, where the stage keeps the
# one its dev check picks once a cycle.
STAGE_ARM = fresh(RL_MEETINGS, **MEETINGS_READ)
T10 = {**STAGE_ARM, "temperature": 1.0}
STAGE_VARIANTS = register(
    Experiment(
        name="rl-stage-variants",
        description=(
            "The pipeline's RL stage, the same with rollouts at temperature 1.0 instead of "
            "0.8, and that with the edge sampler (pass rates per structure), from one "
            "checkpoint (--set init=CKPT); dev split, 64 tasks a rung."
        ),
        conditions={
            "base": {**BASE, **MEETINGS_READ, "train": False},
            "stage": STAGE_ARM,
            "t10": T10,
            "edge_t10": {**T10, "sampler": "edge", "edge_estimate": "structure"},
        },
        seeds=(1, 2),  # a screen: a winner is confirmed by the stage's seed study
        run=run_remedy,
        metric="rl_only_depth2",
        secondary=(*SECONDARY, "unseen"),
        comparisons=[("base", "stage"), ("base", "t10"), ("stage", "t10"), ("t10", "edge_t10")],
        quick=QUICK,
        quick_seeds=(1,),
    )
)
