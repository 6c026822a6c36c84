"""The learning-rate schedules shared by pretraining and the vision stages.

    cosine  linear warm-up to lr, then cosine decay to lr * min_lr_ratio at the last step
    wsd     warm-up, stable at lr, then in the last decay_fraction of the steps a "1 - sqrt"
            decay to lr * min_lr_ratio (warmup-stable-decay; Hägele et al. 2024 find this
            cooldown over the last 20% matches cosine at any budget)

Under wsd the learning rate before the decay does not depend on `steps`, so a run to budget B
equals a longer stable run's checkpoint at B - decay_steps followed by the decay alone: one
stable run and a short branch per budget give a whole curve of fully decayed points.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from glmflash.config import PretrainConfig


@dataclass(frozen=True)
class Schedule:
    """A learning-rate schedule in plain values (PretrainConfig's fields of the same names)."""

    lr: float
    steps: int
    warmup: int = 0
    schedule: str = "cosine"  # cosine | wsd
    min_lr_ratio: float = 0.1
    decay_fraction: float = 0.2

    @classmethod
    def of(cls, cfg: PretrainConfig) -> Schedule:
        return cls(
            cfg.lr, cfg.steps, cfg.warmup, cfg.schedule, cfg.min_lr_ratio, cfg.decay_fraction
        )


def decay_steps(s: Schedule) -> int:
    """Steps of the wsd decay at the end of the run (at least one)."""
    return max(1, round(s.decay_fraction * s.steps))


def decay_start(s: Schedule) -> int:
    """The first step whose learning rate is below the stable value under wsd."""
    return max(s.warmup, s.steps - decay_steps(s))


def lr_at(step: int, s: Schedule) -> float:
    """The learning rate of update `step` (0-based)."""
    if step < s.warmup:
        return s.lr * (step + 1) / s.warmup
    if s.schedule == "wsd":
        start = decay_start(s)
        if step < start:
            return s.lr
        progress = min(1.0, (step - start + 1) / max(1, s.steps - start))
        return s.lr * (s.min_lr_ratio + (1 - s.min_lr_ratio) * (1 - math.sqrt(progress)))
    progress = (step - s.warmup) / max(1, s.steps - s.warmup)
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return s.lr * (s.min_lr_ratio + (1 - s.min_lr_ratio) * cosine)


def set_lr(optimizer, lr: float) -> None:
    """Every parameter group's learning rate to `lr`."""
    for group in optimizer.param_groups:
        group["lr"] = lr


__all__ = ["Schedule", "decay_start", "decay_steps", "lr_at", "set_lr"]
