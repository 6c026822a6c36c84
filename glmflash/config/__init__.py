"""Every setting of the lab in one place: one typed dataclass per stage, each field declared
with `flags.setting` (its help and allowed values beside its default), validated when built.

    model       ModelConfig, the named presets
    pretrain    PretrainConfig
    rl          RLConfig
    vision      VisionConfig
    evaluation  Sampling (how completions are drawn and scored), EvalConfig (the pipeline's)
    plan        PipelinePlan: every stage's settings for one pipeline run
"""

from glmflash.config.evaluation import GREEDY, MAX_NEW_TOKENS, EvalConfig, Sampling
from glmflash.config.model import PRESETS, ConfigError, ModelConfig, model_config
from glmflash.config.plan import PipelinePlan
from glmflash.config.pretrain import (
    CORPORA,
    LADDER_CONSTANTS,
    PRECISIONS,
    ROW_STARTS,
    SCHEDULES,
    PretrainConfig,
)
from glmflash.config.rl import RLConfig
from glmflash.config.vision import VisionConfig, VisionTrainError

__all__ = [
    "CORPORA",
    "GREEDY",
    "LADDER_CONSTANTS",
    "MAX_NEW_TOKENS",
    "PRECISIONS",
    "PRESETS",
    "ROW_STARTS",
    "SCHEDULES",
    "ConfigError",
    "EvalConfig",
    "ModelConfig",
    "PipelinePlan",
    "PretrainConfig",
    "RLConfig",
    "Sampling",
    "VisionConfig",
    "VisionTrainError",
    "model_config",
]
