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

from glmflash.config import PretrainConfig


def decay_steps(cfg: PretrainConfig) -> int:
    """Steps of the wsd decay at the end of the run (at least one)."""
    return max(1, round(cfg.decay_fraction * cfg.steps))


def decay_start(cfg: PretrainConfig) -> int:
    """The first step whose learning rate is below the stable value under wsd."""
    return max(cfg.warmup, cfg.steps - decay_steps(cfg))


def lr_at(step: int, cfg: PretrainConfig) -> float:
    """The learning rate of update `step` (0-based) under cfg.schedule."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    if cfg.schedule == "wsd":
        start = decay_start(cfg)
        if step < start:
            return cfg.lr
        progress = min(1.0, (step - start + 1) / max(1, cfg.steps - start))
        return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * (1 - math.sqrt(progress)))
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * cosine)


__all__ = ["decay_start", "decay_steps", "lr_at"]
