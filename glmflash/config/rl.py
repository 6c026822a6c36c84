"""One RL run's settings (`glmflash rl`, the pipeline's RL stage, the RL experiments)."""

from __future__ import annotations

from dataclasses import dataclass

from glmflash.config.evaluation import MAX_NEW_TOKENS
from glmflash.config.pretrain import PRECISIONS
from glmflash.data.code_tasks import FAMILIES
from glmflash.flags import check_setting_choices, setting

SCOPES = ("last-block-head", "last-block", "all")
SAMPLERS = ("uniform", "edge")
EDGE_WEIGHTS = ("variance", "spread")  # train.task_sampler
EDGE_ESTIMATES = ("task", "structure")
OBJECTIVES = ("rloo", "sft")
REWARDS = ("binary", "partial")
ADVANTAGES = ("rloo", "grpo", "dr_grpo", "rft")
AGGREGATIONS = ("sequence", "token_mean", "constant")


@dataclass(frozen=True)
class RLConfig:
    """One RL run; every field is a flag of `glmflash rl` (`flags.add_config_flags`). The
    defaults are the first RL stage the lab had (the reference lab's three families, half the
    groups on the ladder's RL structures, the last block and head): the RL experiments' `stage`
    arm. The pipeline's stage (`PipelinePlan.rl_stage`) changes seven of them and the seed."""

    objective: str = setting(
        "rloo",
        "rloo: reward from the verifier; sft: imitate the "
        "reference bodies (the supervised control)",
        OBJECTIVES,
    )
    families: tuple[str, ...] = setting(
        ("increment", "double", "even"), "seed families trained (the reference lab's three)"
    )
    ladder_share: float = setting(0.5, "share of the groups drawn from the ladder's RL structures")
    ladder_depths: tuple[int, ...] = setting(
        (2, 3),
        "depths of the ladder's RL structures drawn (the group holds 63 of depth 2 and 1,000 of "
        "depth 3); 2 alone is the composition study's setup: RL on depth-2 compositions of "
        "primitives the base writes, each structure met several times, depth 3 left to transfer",
    )
    groups: int = setting(96, "tasks in the run, each one group of group_size completions")
    group_size: int = setting(16, "completions sampled per task (the leave-one-out group)")
    tasks_per_step: int = setting(4, "groups batched into one optimizer step")
    temperature: float = setting(0.8, "sampling temperature of the rollouts")
    top_p: float = setting(1.0, "nucleus sampling of the rollouts (1: off)")
    lr: float = setting(1e-4, "AdamW learning rate (0 updates nothing: rl-ablations' control)")
    reward: str = setting(
        "binary", "binary: all cases pass; partial: share of cases passed", REWARDS
    )
    invalid_penalty: float = setting(-0.1, "reward of a program that does not parse or run")
    scope: str = setting(
        "last-block-head",
        "trained parameters: last block + final norm + tied embedding, last block only, or all",
        SCOPES,
    )
    precision: str = setting(
        "fp32",
        "the update's arithmetic: fp32, bf16 autocast, or auto: bf16 where a bf16 matmul "
        "measures clearly faster here. fp32 by default: on a Xeon with AMX bf16 updates of the "
        "whole model ran 1.57x faster on a fixed batch shape but 0.96x on the stage's own "
        "rollouts, whose shapes change every step (`glmflash bench rl`). Sampling and the dev "
        "checks stay fp32: bf16 decoding ran slower (results/profile/rl_precision.py)",
        PRECISIONS,
    )
    seed: int = setting(31415, "task order and sampling")
    kl: float = setting(0.0, "weight of the k3 KL penalty to the initial policy")
    kl_rows: int = setting(
        16,
        "completions (of those with nonzero advantage, the scored ones) the initial policy "
        "scores for the KL health figure when kl = 0: an estimate of the step's KL at a "
        "fraction of a full pass (kl > 0 scores all)",
    )
    ptx: float = setting(
        0.0,
        "weight of the pretraining next-token loss mixed into each update (InstructGPT's PPO-ptx)",
    )
    ptx_batch: int = setting(8, "rows of PTX_SEQ_LEN pretraining tokens per update")
    normalize_std: bool = setting(False, "divide RLOO's advantages by the group's reward std")
    advantage: str = setting(
        "rloo",
        "advantage estimator: leave-one-out, group mean and std (GRPO), group mean (Dr. GRPO), "
        "or rft: 1 for a passing completion, else 0 (rejection-sampling fine-tuning, the "
        "supervised control on the policy's own samples)",
        ADVANTAGES,
    )
    aggregation: str = setting(
        "sequence",
        "a completion's log-probability: summed, averaged "
        "over its tokens (GRPO), or over a constant budget (Dr. GRPO)",
        AGGREGATIONS,
    )
    update_epochs: int = setting(
        1, "updates per batch of rollouts; above 1, PPO's clipped ratio against the sampling policy"
    )
    clip_low: float = setting(
        0.2, "PPO's ratio range [1 - clip_low, 1 + clip_high] (update_epochs > 1): its low side"
    )
    clip_high: float = setting(
        0.2,
        "the ratio range's high side; above clip_low (DAPO's clip-higher: 0.2, 0.28) a token "
        "the policy finds unlikely can gain more before the clip stops it",
    )
    sampler: str = setting(
        "uniform",
        "uniform: the tasks of rl_tasks in order, each once; edge: drawn from them by estimated "
        "pass rate, weight p(1 - p) + floor, groups without reward spread dropped and "
        "redrawn (task_sampler; objective rloo)",
        SAMPLERS,
    )
    max_redraws: int = setting(
        8,
        "sampler edge: groups a step may draw beyond tasks_per_step to replace groups without "
        "reward spread (DAPO's dynamic sampling; 0: drop them without refill)",
    )
    edge_weight: str = setting(
        "variance",
        "sampler edge: how a task's estimate becomes its draw weight: variance p(1 - p), or "
        "spread, the posterior chance that a group of group_size has reward spread, "
        "1 - p^G - (1 - p)^G (flatter: it keeps tasks solved 5% or 95% of the time in play)",
        EDGE_WEIGHTS,
    )
    edge_discount: float = setting(
        1.0,
        "sampler edge: factor on every counted rollout at each step (1: all count alike; 0.9 "
        "remembers about 10 steps), so the estimates follow the policy as it trains",
    )
    edge_estimate: str = setting(
        "task",
        "sampler edge: whose rollouts a task's pass-rate estimate counts: its own (task), or "
        "every rollout of its structure (structure: a ladder structure, or a seed family), so a "
        "new instance starts from what its structure has shown and a structure always solved "
        "sinks to the floor after a few groups",
        EDGE_ESTIMATES,
    )
    edge_probe: int = setting(
        0,
        "sampler edge: samples of every pool task drawn before training to start the pass-rate "
        "estimates (0: each starts at the uniform prior, 1/2)",
    )
    max_new_tokens: int = setting(
        MAX_NEW_TOKENS, "token budget of a rollout (the ladder's step-by-step bodies need the room)"
    )
    eval_every: int = setting(32, "groups between dev evaluations (checkpoint selection)")
    dev_per_family: int = setting(
        40, "dev tasks per trained family for checkpoint selection (24 were too few to choose on)"
    )
    dev_ladder: int = setting(60, "dev tasks of the ladder's RL structures (when ladder_share > 0)")
    grad_clip: float = setting(1.0, "gradient norm clip")

    def __post_init__(self) -> None:
        check_setting_choices(self)
        if not 0 <= self.ladder_share <= 1:
            raise ValueError(f"ladder share must be in [0, 1], got {self.ladder_share}")
        if not self.ladder_depths or not set(self.ladder_depths) <= {2, 3}:
            raise ValueError(f"ladder depths must be among 2, 3, got {self.ladder_depths}")
        unknown = [f for f in self.families if f not in FAMILIES]
        if unknown or (not self.families and self.ladder_share < 1):
            raise ValueError(
                f"unknown family {', '.join(unknown) or '(none given)'}; choose from "
                f"{', '.join(FAMILIES)}"
            )
        if self.group_size < 2:
            raise ValueError(
                f"group size must be at least 2 for a leave-one-out baseline, got {self.group_size}"
            )
        if self.groups < 1 or self.tasks_per_step < 1 or self.eval_every < 1:
            raise ValueError("groups, tasks per step and eval every must be positive")
        if self.temperature <= 0:
            raise ValueError("temperature must be positive for sampling")
        if self.lr < 0:
            raise ValueError(
                f"learning rate must be non-negative (0 updates nothing), got {self.lr}"
            )
        if self.kl < 0 or self.ptx < 0 or self.ptx_batch < 1 or self.kl_rows < 1:
            raise ValueError(
                "kl and ptx must be non-negative, ptx batch and KL rows positive, got "
                f"{self.kl}, {self.ptx}, {self.ptx_batch}, {self.kl_rows}"
            )
        if self.update_epochs < 1 or not 0 < self.clip_low < 1 or self.clip_high <= 0:
            raise ValueError(
                f"update epochs must be positive, clip_low in (0, 1) and clip_high positive, "
                f"got {self.update_epochs}, {self.clip_low}, {self.clip_high}"
            )
        if not 0 < self.edge_discount <= 1:
            raise ValueError(f"edge discount must be in (0, 1], got {self.edge_discount}")
        if self.max_redraws < 0 or self.edge_probe < 0:
            raise ValueError(
                f"max redraws and edge probe must be non-negative, got {self.max_redraws}, "
                f"{self.edge_probe}"
            )
        if self.sampler == "edge" and self.objective != "rloo":
            raise ValueError(
                "sampler edge needs objective rloo: supervised steps draw no rollouts to "
                "estimate pass rates from"
            )


__all__ = [
    "ADVANTAGES",
    "AGGREGATIONS",
    "EDGE_ESTIMATES",
    "EDGE_WEIGHTS",
    "OBJECTIVES",
    "SAMPLERS",
    "SCOPES",
    "RLConfig",
]
