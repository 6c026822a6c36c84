"""The learning-rate schedule shared by pretraining and the vision stages."""

from __future__ import annotations

import math

from glmflash.config import PretrainConfig


def lr_at(step: int, cfg: PretrainConfig) -> float:
    """Linear warmup to cfg.lr over cfg.warmup steps, then cosine decay to lr * min_lr_ratio."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * cosine)


__all__ = ["lr_at"]
