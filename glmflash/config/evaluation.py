"""What an evaluation measures: how completions are drawn (`Sampling`), and how many confirm
tasks the pipeline scores before and after RL (`EvalConfig`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from glmflash.flags import check_setting_choices, setting

MAX_NEW_TOKENS = 128  # evaluation budget per completion: room for step-by-step depth-3 bodies
MODES = ("greedy", "sample")


@dataclass(frozen=True)
class Sampling:
    """How an evaluation draws its completions and scores them.

    greedy: one completion per task at temperature 0, scored pass@1. sample: `samples` draws
    per task, scored by the unbiased pass@k estimator 1 - C(n - c, k) / C(n, k)
    (n draws, c of them passing)."""

    mode: str = setting("greedy", "greedy pass@1, or sampled pass@k", MODES)
    samples: int = setting(8, "completions drawn per task (sample mode)")
    k: int = setting(0, "k of pass@k, at most samples (0: k = samples)")
    temperature: float = setting(0.8, "sampling temperature (sample mode)")
    top_p: float = setting(1.0, "nucleus sampling: draw from the top tokens holding this mass")
    seed: int = setting(0, "seed of the draws (glmflash eval also draws its tasks with it)")
    max_new_tokens: int = setting(MAX_NEW_TOKENS, "token budget of a completion")

    def __post_init__(self) -> None:
        check_setting_choices(self)
        for name in ("samples", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not 0 <= self.k <= self.samples:
            raise ValueError(f"k must be in [0, samples={self.samples}], got {self.k}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be positive, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def n(self) -> int:
        """Completions drawn per task."""
        return 1 if self.mode == "greedy" else self.samples

    @property
    def pass_k(self) -> int:
        """The k of the score: 1 for greedy."""
        return 1 if self.mode == "greedy" else (self.k or self.samples)

    @property
    def draw_temperature(self) -> float:
        """The temperature completions are drawn at: 0 (argmax) for greedy."""
        return 0.0 if self.mode == "greedy" else self.temperature


GREEDY = Sampling()


@dataclass(frozen=True)
class EvalConfig:
    """The pipeline's evaluation before and after RL: greedy pass@1 per ladder rung and on the
    reference lab's RL families, and `sampling` (pass@k) on all eight families."""

    per_family: int = setting(8, "confirm tasks per seed family")
    per_rung: int = setting(
        128,
        "confirm tasks per ladder rung (greedy): enough that a rung the base passes ~5% of the"
        " time reads above zero (0.95^128 = 0.1% of draws hold no pass; at 32 tasks 19% do)",
    )
    decoding_check: int = setting(
        8,
        "trained-family prompts decoded greedily twice, cached and by recomputing every prefix,"
        " on the evaluated checkpoint: how many come out identical, and the speedup (0: skip)",
    )
    sampling: Sampling = field(
        default=Sampling(mode="sample", samples=8),
        metadata={"help": "the sampled pass@k (its seed is the pipeline's)"},
    )

    def __post_init__(self) -> None:
        for name in ("per_family", "per_rung"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.decoding_check < 0:
            raise ValueError(f"decoding_check must be >= 0, got {self.decoding_check}")
        if self.sampling.mode != "sample":
            raise ValueError("the pipeline's pass@k needs sampling.mode = sample")

    def greedy(self) -> Sampling:
        """Greedy decoding with the same token budget."""
        return Sampling(max_new_tokens=self.sampling.max_new_tokens)


__all__ = ["GREEDY", "MAX_NEW_TOKENS", "EvalConfig", "Sampling"]
