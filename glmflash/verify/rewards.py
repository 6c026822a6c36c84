"""Rewards for reinforcement learning, computed from a verifier verdict."""

from __future__ import annotations

from glmflash.verify.sandbox import Verdict

REWARD_MODES = ("binary", "partial")


def reward(verdict: Verdict, mode: str = "binary", invalid_penalty: float = -0.1) -> float:
    """The scalar reward of one verdict.

    binary:  pass -> 1, fail -> 0.
    partial: pass or fail -> passed / total (the fraction of hidden cases right).
    In both modes a program that is invalid, times out or crashes (raises on any case, dies)
    gets `invalid_penalty`: it did not produce a checkable answer.
    """
    if mode not in REWARD_MODES:
        raise ValueError(f"reward mode must be one of {REWARD_MODES}, got {mode!r}")
    if verdict.status not in ("pass", "fail"):
        return float(invalid_penalty)
    if mode == "binary":
        return 1.0 if verdict.status == "pass" else 0.0
    return verdict.passed / verdict.total if verdict.total else 0.0
