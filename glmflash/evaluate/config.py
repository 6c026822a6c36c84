"""What an evaluation of the confirm split measures: how many tasks, how they are sampled."""

from __future__ import annotations

from dataclasses import dataclass

from glmflash.evaluate.coding import MAX_NEW_TOKENS
from glmflash.flags import setting


@dataclass(frozen=True)
class EvalConfig:
    """The pipeline's evaluation before and after RL (greedy pass@1 and sampled pass@k)."""

    per_family: int = setting(8, "confirm tasks per seed family")
    per_rung: int = setting(32, "confirm tasks per ladder rung (greedy)")
    k: int = setting(8, "samples per task of the sampled pass@k")
    temperature: float = setting(0.8, "sampling temperature of pass@k (RL samples at its own)")
    max_new_tokens: int = setting(
        MAX_NEW_TOKENS, "token budget of an evaluated completion (RL keeps its own)"
    )

    def __post_init__(self) -> None:
        for name in ("per_family", "per_rung", "k", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be positive, got {self.temperature}")


__all__ = ["EvalConfig"]
