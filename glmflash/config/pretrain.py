"""One pretraining run's settings."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from glmflash.config.model import PRESETS, ConfigError
from glmflash.flags import check_setting_choices, setting

CORPORA = ("tasks", "compositions", "stdlib", "mix")
SCHEDULES = ("cosine", "wsd")
ROW_STARTS = ("anywhere", "document")
LADDER_CONSTANTS = ("task", "wide")  # data.ladder.WIDE_CONSTANTS
PRECISIONS = ("auto", "fp32", "bf16")  # of training: auto is bf16 where bf16 is fast here
OPTIMIZERS = ("adamw", "muon")
COMPILE = ("off", "blocks")  # model.lm.GLMFlash.compile_blocks


@dataclass(frozen=True)
class PretrainConfig:
    """One pretraining run. `steps` counts optimizer updates of `batch_size` sequences of
    `seq_len` tokens (the global batch, split across data-parallel ranks)."""

    preset: str = setting("25m", "model preset", tuple(PRESETS))
    steps: int = setting(300, "optimizer updates")
    batch_size: int = setting(32, "sequences per update (the global batch)")
    seq_len: int = setting(128, "tokens per sequence (packed documents, no padding)")
    lr: float = setting(3e-3, "peak learning rate, after the linear warm-up")
    min_lr_ratio: float = setting(0.1, "the schedule decays to lr * min_lr_ratio")
    schedule: str = setting(
        "cosine",
        "cosine decay after the warm-up, or wsd: stable at lr, then decay over the last "
        "decay_fraction of the steps (a run to any budget is a branch of one stable run)",
        SCHEDULES,
    )
    decay_fraction: float = setting(0.2, "share of the steps the wsd schedule spends decaying")
    warmup: int = setting(20, "steps of linear warm-up")
    weight_decay: float = setting(0.1, "decoupled weight decay on matrices only")
    beta1: float = setting(0.9, "Adam's first-moment decay")
    beta2: float = setting(0.95, "Adam's second-moment decay")
    grad_clip: float = setting(1.0, "gradient norm clip")
    seed: int = setting(0, "initial weights and the data stream")
    row_start: str = setting(
        "anywhere",
        "where a packed row begins: anywhere in a document (a window of a long stream, so a "
        "row's first body often lacks its comment) or at a document's start (every body has "
        "its comment, but the tail of a document longer than seq_len is never trained on)",
        ROW_STARTS,
    )
    ladder_constants: str = setting(
        "task",
        "constants of the ladder's pretraining documents: the tasks' own ranges, or wider ones "
        "(data.ladder.WIDE_CONSTANTS) so that copying beats guessing",
        LADDER_CONSTANTS,
    )
    corpus: str = setting(
        "tasks", "the synthetic corpus (mix: tasks, compositions and stdlib by document)", CORPORA
    )
    precision: str = setting(
        "fp32",
        "fp32, bf16 autocast (slower on CPUs without native bf16), or auto: bf16 where a bf16 "
        "matmul measures clearly faster on this machine",
        PRECISIONS,
    )
    optimizer: str = setting(
        "adamw",
        "adamw, or muon (Muon for 2-D hidden matrices, AdamW for the rest)",
        OPTIMIZERS,
    )
    compile: str = setting(
        "off",
        "off, or blocks: each block compiled by torch.compile (inductor) for the training step, "
        "one graph per kind of block serving all its layers; about a minute of compiling the "
        "first time (inductor caches it on disk), repaid after a few hundred steps "
        "(results/profile/compile_pipeline.py). Evaluation and generation stay eager",
        COMPILE,
    )
    eval_every: int = setting(100, "steps between dev-loss evaluations")
    eval_batches: int = setting(4, "dev batches per evaluation")
    eval_tasks: int = setting(4, "dev tasks per family for greedy pass@1 during training (0: off)")
    ckpt_every: int = setting(100, "steps between checkpoints")
    keep_checkpoints: int = setting(2, "checkpoints kept (the latest ones)")
    indexer_warmup: int = setting(
        0, "dense warm-up steps training only the lightning indexer (sparse_kind indexer)"
    )

    def __post_init__(self) -> None:
        for name in (
            "steps",
            "batch_size",
            "seq_len",
            "eval_every",
            "ckpt_every",
            "keep_checkpoints",
            "eval_batches",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        for name in ("warmup", "eval_tasks", "indexer_warmup"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ConfigError(f"lr must be positive, got {self.lr}")
        check_setting_choices(self, ConfigError)
        if not 0 < self.decay_fraction <= 1:
            raise ConfigError(f"decay_fraction must be in (0, 1], got {self.decay_fraction}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


__all__ = [
    "COMPILE",
    "CORPORA",
    "LADDER_CONSTANTS",
    "OPTIMIZERS",
    "PRECISIONS",
    "ROW_STARTS",
    "SCHEDULES",
    "PretrainConfig",
]
