"""Evaluation per rung of the task ladder: which kinds of task the model solves, each reported
on its own, from the structures pretraining showed to those nobody trained on.

Rungs (`RUNGS`), in the order of a report: the ladder's own (`data.ladder.RUNGS`: depth-1
primitives, depth 1 in held-out phrasings, seen depth 2, the RL structures, unseen depth 2,
unseen depth 3), then the eight seed families named three ways: with the family prefix (the
reference lab's format), with neutral names, and with another family's prefix (a control: a
model that writes what the name says fails it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from scipy.stats import betabinom

from glmflash.config.evaluation import GREEDY, Sampling
from glmflash.data import ladder
from glmflash.data.code_tasks import FAMILIES, CodeTask, interleaved_tasks
from glmflash.evaluate.coding import EvalResult, evaluate_tasks
from glmflash.model.lm import GLMFlash

SEED_RUNGS = {
    "seed_families": "family",
    "seed_neutral_names": "neutral",
    "seed_misleading_names": "misleading",
}  # rung -> name style
RUNGS: tuple[str, ...] = (*ladder.RUNGS, *SEED_RUNGS)
# Rungs cut to one depth, read on request (not in `all`): rl_only_depth2 is the structures RL
# trains on when its ladder_depths is 2 alone (rl_only is 94% depth 3).
DEPTH_SLICES = {"rl_only_depth2": ("rl_only", (2,))}
KNOWN_RUNGS = (*RUNGS, *DEPTH_SLICES)  # every name a rung may be asked by
HELDOUT_RUNGS = ("depth1_heldout_phrasings", "unseen_depth2", "unseen_depth3")
# The competence bar: the ladder has headroom for RL once the model writes half of the depth-1
# tasks and leaves the floor on every held-out rung (rung -> comparison, share of its tasks).
COMPETENCE_BAR = {
    "depth1": (">=", 0.50),
    "depth1_heldout_phrasings": (">=", 0.15),
    "unseen_depth2": (">=", 0.15),
    "unseen_depth3": (">", 0.0),
}


def clears_bar(rungs: dict[str, Sequence[float]], bar: dict = COMPETENCE_BAR) -> bool:
    """Whether rung -> [solved, n] meets every line of the bar."""
    return all(_meets(rungs[rung][0] / rungs[rung][1], line) for rung, line in bar.items())


def _meets(rate: float, line: tuple[str, float]) -> bool:
    op, share = line
    return rate >= share if op == ">=" else rate > share


# A budget has margin when a fresh confirm draw would miss the bar less often than this.
MARGIN = 0.05


def miss_chance(rungs: dict[str, Sequence[float]], n: int, bar: dict = COMPETENCE_BAR) -> float:
    """The chance that a fresh draw of `n` tasks per rung misses the bar, for a model whose
    rung -> [solved, tried] reading is `rungs`: each rung's count is the beta-binomial
    predictive, solved' ~ Binomial(n, p) with p ~ Beta(1 + solved, 1 + tried - solved) (a
    uniform prior updated by the reading), rungs independent, so
    1 - prod_r P(rung r's count meets its line). It asks of a dev reading what the bar asks of
    the confirm one: 4/128 on unseen depth 3 misses it 3% of the time, 10/128 0.04%."""
    if missing := set(bar) - set(rungs):
        raise ValueError(f"the bar needs rungs {sorted(missing)}, not in the reading")
    holds = 1.0
    for rung, line in bar.items():
        solved, tried = rungs[rung]
        fewest = next((k for k in range(n + 1) if _meets(k / n, line)), n + 1)
        holds *= betabinom(n, 1 + solved, 1 + tried - solved).sf(fewest - 1)
    return 1.0 - holds


def parse_rungs(text: str) -> tuple[str, ...]:
    """`all` or comma-separated rung names, in the order given."""
    if text.strip() == "all":
        return RUNGS
    names = tuple(r.strip() for r in text.split(",") if r.strip())
    unknown = [r for r in names if r not in KNOWN_RUNGS]
    if unknown or not names:
        raise ValueError(
            f"unknown rung {', '.join(unknown) or '(none given)'}; choose from "
            f"all, {', '.join(KNOWN_RUNGS)}"
        )
    return names


def rung_tasks(rung: str, split: str, n: int, seed: int = 0) -> list[CodeTask]:
    """`n` tasks of `rung` with function names of `split` (confirm for reports)."""
    if rung in SEED_RUNGS:
        return interleaved_tasks(split, FAMILIES, n, seed, SEED_RUNGS[rung])
    if rung in DEPTH_SLICES:
        whole, depths = DEPTH_SLICES[rung]
        return ladder.rung_tasks(whole, split, n, seed, depths)
    if rung not in RUNGS:
        raise ValueError(f"unknown rung {rung!r}; choose from {', '.join(KNOWN_RUNGS)}")
    return ladder.rung_tasks(rung, split, n, seed)


def evaluate_rungs(
    model: GLMFlash,
    rungs: Sequence[str],
    split: str = "confirm",
    per_rung: int = 24,
    sampling: Sampling = GREEDY,
) -> dict[str, EvalResult]:
    """Greedy pass@1 per rung, and sampled pass@k too when `sampling` samples, as EvalResults
    grouped by rung (`result.per_family[rung]` is [solved, n]). The tasks are drawn with
    `sampling.seed`."""
    todo = [(r, t) for r in rungs for t in rung_tasks(r, split, per_rung, sampling.seed)]
    labels, tasks = [r for r, _ in todo], [t for _, t in todo]
    greedy = replace(sampling, mode="greedy")
    out = {"greedy": evaluate_tasks(model, tasks, greedy, groups=labels)}
    if sampling.mode == "sample":
        out["sampled"] = evaluate_tasks(model, tasks, sampling, groups=labels)
    return out


def rung_table(results: dict[str, EvalResult]) -> dict[str, dict[str, Any]]:
    """rung -> {"greedy": [k, n], "pass@K": [k, n], "samples": [passing, drawn]}."""
    table: dict[str, dict[str, Any]] = {}
    for rung, counts in results["greedy"].per_family.items():
        table[rung] = {"greedy": counts}
    if "sampled" in results:
        s = results["sampled"]
        for rung, counts in s.per_family.items():
            table[rung][f"pass@{s.k}"] = counts
            table[rung]["samples"] = s.passing_samples()[rung]
    return table
