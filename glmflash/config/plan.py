"""The pipeline's plan: every stage's settings in one record (`glmflash pipeline --set
STAGE.FIELD=VALUE`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from glmflash.config.evaluation import EvalConfig, Sampling
from glmflash.config.pretrain import PretrainConfig
from glmflash.config.rl import RLConfig
from glmflash.config.vision import VisionConfig

RL_MEETINGS = 4  # rl-meetings (dev, seed 1): 8 meetings or lr 1e-4 lifted no rung further
RL_LR = 3e-5  # the whole model's rate: rl-scope-lr's choice on dev, the RL experiments' ALL_LR


@dataclass(frozen=True)
class PipelinePlan:
    """The budget of every stage. `full()` is the 25m plan; `quick()` the tiny smoke run; any
    setting of either can be changed with `with_setting` (glmflash pipeline --set)."""

    pretrain: PretrainConfig
    rl: RLConfig
    vision: VisionConfig = VisionConfig()  # glmflash vision's defaults are the pipeline's
    evaluation: EvalConfig = EvalConfig()  # the confirm evaluation before and after RL

    @classmethod
    def full(cls, seed: int) -> PipelinePlan:
        return cls(
            PretrainConfig(
                preset="25m",
                steps=800,  # the fewest that clear the competence bar on two seeds (competence)
                batch_size=32,
                seq_len=128,
                lr=4e-3,  # the screen of levers: results/competence/screen.md
                schedule="wsd",  # the harness's schedule (results/competence)
                row_start="document",  # every body with its comment (results/competence)
                warmup=10,
                eval_every=100,
                ckpt_every=100,
                keep_checkpoints=3,
                eval_tasks=0,
                seed=seed,
                optimizer="muon",
                precision="auto",  # bf16 where it is fast (results/precision/bf16_curves.json)
                compile="blocks",  # 1.40x bf16 AVX-512, 1.23x fp32 AVX2 (results/profile)
            ),
            cls.rl_stage(seed),
        )

    @staticmethod
    def rl_stage(seed: int) -> RLConfig:
        """RL at the edge of what the base writes: every depth-2 composition only RL trains on
        met RL_MEETINGS times, a new instance each time, on the whole model (results/rl_edge:
        rl-structures, rl-meetings). The seed families, which the base solves, are left out:
        their groups have no reward spread."""
        from glmflash.data.ladder import structures  # the ladder imports the configs

        cycle = len(structures("rl", 2))  # 63 structures, each once per cycle
        return RLConfig(
            families=(),
            ladder_share=1.0,
            ladder_depths=(2,),
            groups=RL_MEETINGS * cycle,
            scope="all",
            lr=RL_LR,
            eval_every=cycle,  # the dev check once a cycle
            seed=seed,
        )

    @classmethod
    def quick(cls, seed: int) -> PipelinePlan:
        return cls(
            PretrainConfig(
                preset="tiny",
                steps=6,
                batch_size=4,
                seq_len=64,
                warmup=2,
                eval_every=3,
                ckpt_every=3,
                eval_batches=1,
                keep_checkpoints=2,
                eval_tasks=0,
                seed=seed,
                optimizer="muon",
            ),
            RLConfig(
                groups=2,
                group_size=4,
                tasks_per_step=2,
                seed=seed,
                eval_every=2,
                dev_per_family=1,
                max_new_tokens=12,
            ),
            VisionConfig(steps=3, align_steps=3, eval_size=20),
            EvalConfig(per_family=1, per_rung=2, sampling=Sampling("sample", 2, max_new_tokens=12)),
        )

    @property
    def preset(self) -> str:
        return self.pretrain.preset

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


__all__ = ["PipelinePlan"]
