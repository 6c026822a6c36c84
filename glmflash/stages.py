"""What each stage of the pipeline hands on, as typed records: written once to the stage's
stage.json (`save_stage`) and read back as the same type (`load_stage`), so the results and
the report name their fields instead of string keys, and every score carries the sampling
that produced it."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar


@dataclass
class TrainStage:
    """Pretraining or RL: the run's summary (its last metrics) and the checkpoint chosen."""

    summary: dict[str, Any]
    selected: str  # the checkpoint the next stages start from
    wall_seconds: float = 0.0


@dataclass
class Draws:
    """How a score's completions were drawn: k of pass@k, temperature, draws per task."""

    k: int
    temperature: float
    samples: int


@dataclass
class ConfirmEval:
    """The confirm evaluation of one checkpoint (before or after RL). Scores are [solved, n]:
    greedy pass@1 per ladder rung and on the reference lab's RL families, pass@k on the
    families."""

    checkpoint: str
    ladder: dict[str, list[float]]  # rung -> greedy [solved, n]
    greedy_pass1_trained: list[float]
    passk_trained: list[float]
    passk_all: list[float]
    per_family_passk: dict[str, list[float]]
    per_family_samples: dict[str, list[int]]  # family -> [passing samples, samples]
    sampling: Draws  # of the pass@k scores
    examples: list[dict[str, Any]] = field(default_factory=list)  # greedy records
    # cached decoding against full recomputation on this checkpoint (None: not checked)
    decoding: dict[str, Any] | None = None
    wall_seconds: float = 0.0


@dataclass
class VisionStage:
    """Digit reading inside the pretrained model: [correct, n] on each split."""

    heldout_correct: list[int]
    train_correct: list[int]
    wall_seconds: float = 0.0


Stage = TypeVar("Stage", TrainStage, ConfirmEval, VisionStage)


@dataclass
class BeforeAfter:
    """One score of the confirm evaluation before and after RL."""

    before: Any
    after: Any


@dataclass
class PretrainSummary:
    """The pretraining stage as results.json reports it."""

    steps: int
    dev_loss: float | None
    loss: float | None
    tokens_per_s: float | None
    tokens: int  # trained by the selected checkpoint
    schedule: str
    selected: str


@dataclass
class BarReading:
    """The competence bar (rung -> "op share") and whether the base clears it on confirm."""

    bar: dict[str, str]
    cleared_on_confirm: bool


@dataclass
class RLSummary:
    """The RL stage: the seed-family scores before and after it, and its run's figures."""

    greedy_pass1_trained: BeforeAfter
    sampling: dict[str, float]  # {"k", "temperature"} of the pass@k scores
    passk_trained: BeforeAfter
    passk_all: BeforeAfter
    per_family: dict[str, BeforeAfter]
    per_family_samples: dict[str, BeforeAfter]  # [passing samples, samples]
    trainable_parameters: int | None
    rollouts_per_s: float | None
    best_dev: dict[str, Any] | None


@dataclass
class VisionScores:
    heldout_correct: list[int]
    train_correct: list[int]


@dataclass
class PipelineResults:
    """Everything results.json holds and report.md is written from."""

    preset: str
    seed: int
    plan: dict[str, Any]
    machine: dict[str, Any]
    wall_seconds: dict[str, float]  # per stage, and "total"
    ladder: dict[str, BeforeAfter]  # rung -> greedy [solved, n]
    peak_memory_bytes: int
    pretrain: PretrainSummary
    competence_bar: BarReading
    rl: RLSummary
    decoding: BeforeAfter  # the cached-decoding check of each checkpoint (None: not run)
    vision: VisionScores

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def save_stage(path: Path, result: Any) -> None:
    """Write a stage's record atomically (a crash leaves the old file or none)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(dataclasses.asdict(result), indent=2))
    tmp.replace(path)


def load_stage(path: Path, cls: type[Stage]) -> Stage:
    """The record `save_stage` wrote, as `cls`; a record of another layout is refused."""
    data = json.loads(path.read_text())
    try:
        if cls is ConfirmEval:
            data["sampling"] = Draws(**data["sampling"])
        return cls(**data)
    except (TypeError, KeyError) as e:
        raise ValueError(
            f"{path} is not a {cls.__name__} record ({e}); it was written by another "
            f"version: remove the stage's folder to redo it"
        ) from None


__all__ = [
    "BarReading",
    "BeforeAfter",
    "ConfirmEval",
    "Draws",
    "PipelineResults",
    "PretrainSummary",
    "RLSummary",
    "TrainStage",
    "VisionScores",
    "VisionStage",
    "load_stage",
    "save_stage",
]
