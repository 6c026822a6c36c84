"""New solutions or sharpening: pass@k for k = 1..n per rung, before and after training.

Yue et al. (2025, "Does Reinforcement Learning Really Incentivize Reasoning Capacity in LLMs
Beyond the Base Model?") separate two things RL can do. Sharpening raises pass@1 by moving
probability onto completions the base already samples; it leaves pass@k at large k where it
was (or lowers it, as the policy narrows). A new ability raises pass@k at large k: the policy
solves tasks the base never solved in n tries. So each task gets n samples before and after,
c of them passing, and every k is scored by the unbiased estimator (`passk.pass_at_k`)

    pass@k = 1 - C(n - c, k) / C(n, k)

on the same tasks (drawn with one seed for every policy), so the two curves are paired task
by task. The gain at k is the mean over seeds of the mean over tasks of
pass@k(after) - pass@k(base), with a hierarchical bootstrap interval (seeds, then tasks:
`stats.hierarchical_bootstrap`): a reading needs its interval clear of zero.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from glmflash.config.evaluation import Sampling
from glmflash.evaluate import stats
from glmflash.evaluate.coding import evaluate_tasks
from glmflash.evaluate.passk import pass_at_k
from glmflash.evaluate.rungs import rung_tasks
from glmflash.model.lm import GLMFlash
from glmflash.plots import pyplot, save

TASK_SEED = 0  # every policy is read on the same tasks: the curves are paired by task


def ks_up_to(n: int) -> list[int]:
    """1, 2, 4, ... up to n, and n itself: the k of a curve."""
    ks = [2**i for i in range(n.bit_length()) if 2**i <= n]
    return ks if ks[-1] == n else [*ks, n]


def pass_counts(
    model: GLMFlash,
    rungs: Sequence[str],
    split: str,
    per_rung: int,
    samples: int,
    seed: int,
    temperature: float = 0.8,
) -> dict[str, list[int]]:
    """rung -> the passing samples of each of its `per_rung` tasks (of `samples` draws at
    `temperature`, drawn with `seed`; the tasks drawn with TASK_SEED)."""
    labels, tasks = [], []
    for rung in rungs:
        drawn = rung_tasks(rung, split, per_rung, TASK_SEED)
        labels += [rung] * len(drawn)
        tasks += drawn
    sampling = Sampling("sample", samples, samples, temperature, seed=seed)
    records = evaluate_tasks(model, tasks, sampling, groups=labels).records
    counts: dict[str, list[int]] = {r: [] for r in rungs}
    for j, label in enumerate(labels):  # records are task-major, `samples` per task
        drawn = records[j * samples : (j + 1) * samples]
        counts[label].append(sum(r["status"] == "pass" for r in drawn))
    return counts


def curve(n: int, counts: Sequence[int], ks: Sequence[int]) -> list[float]:
    """Mean pass@k over tasks at each k."""
    return [float(np.mean(pass_at_k(n, list(counts), k))) for k in ks]


def gains(
    n: int,
    base: Mapping[int, Sequence[int]],
    after: Mapping[int, Sequence[int]],
    ks: Sequence[int],
    seed: int = 0,
) -> list[dict[str, float]]:
    """At each k: pass@k of the base and after training (means over seeds), and the gain with
    its hierarchical bootstrap interval. `base` and `after` map a seed to the passing samples
    of the same tasks; seeds present in both are paired."""
    seeds = sorted(set(base) & set(after))
    if not seeds:
        raise ValueError("no seed has both a base and an after-training reading")
    rows = []
    for k in ks:
        before = [np.asarray(pass_at_k(n, list(base[s]), k)) for s in seeds]
        later = [np.asarray(pass_at_k(n, list(after[s]), k)) for s in seeds]
        interval = stats.hierarchical_bootstrap(
            [b - a for a, b in zip(before, later, strict=True)], seed=seed
        )
        rows.append(
            {
                "k": k,
                "base": float(np.mean([a.mean() for a in before])),
                "after": float(np.mean([b.mean() for b in later])),
                "gain": interval.estimate,
                "low": interval.low,
                "high": interval.high,
            }
        )
    return rows


def reading(rows: Sequence[Mapping[str, float]]) -> str:
    """What the gains at k = 1 and at the largest k say, by whether their intervals clear 0."""
    first, last = rows[0], rows[-1]
    if last["low"] > 0:
        return f"new solutions: pass@{last['k']} rose"
    if first["low"] > 0:
        return f"sharpening: pass@1 rose, pass@{last['k']} did not"
    if last["high"] < 0:
        return f"narrowing: pass@{last['k']} fell"
    return "no change the design detects"


def compare_runs(
    runs: Sequence[Mapping[str, Any]], base: str, after: str
) -> dict[str, dict[str, Any]] | None:
    """From an experiment's runs whose metrics hold `passes` (rung -> counts) and
    `passk_samples`: rung -> {"rows": gains, "reading"} for condition `after` against `base`,
    or None when the runs hold no such readings."""
    by = {c: {r["seed"]: r["metrics"] for r in runs if r["condition"] == c} for c in (base, after)}
    by = {c: {s: m for s, m in seeds.items() if "passes" in m} for c, seeds in by.items()}
    if not by[base] or not by[after]:
        return None
    n = int(next(iter(by[base].values()))["passk_samples"])
    out = {}
    for rung in next(iter(by[base].values()))["passes"]:
        rows = gains(
            n,
            {s: m["passes"][rung] for s, m in by[base].items()},
            {s: m["passes"][rung] for s, m in by[after].items()},
            ks_up_to(n),
        )
        out[rung] = {"rows": rows, "reading": reading(rows)}
    return out


def plot(table: Mapping[str, Mapping[str, Any]], base: str, after: str, path: Path) -> None:
    """One panel per rung: pass@k against k (log scale) for both policies, the gain's interval
    drawn as a band around the after-training curve."""
    plt = pyplot()
    rungs = list(table)
    cols = min(4, len(rungs))
    rows = -(-len(rungs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.8 * rows), squeeze=False)
    for ax, rung in zip(axes.flat, rungs, strict=False):
        r = table[rung]["rows"]
        ks = [x["k"] for x in r]
        ax.plot(ks, [x["base"] for x in r], "o-", color="0.5", label=base)
        ax.plot(ks, [x["after"] for x in r], "o-", color="C0", label=after)
        ax.fill_between(
            ks,
            [x["base"] + x["low"] for x in r],
            [x["base"] + x["high"] for x in r],
            color="C0",
            alpha=0.2,
        )
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 1)
        ax.set_title(f"{rung}\n{table[rung]['reading']}", fontsize=8)
        ax.set_xlabel("k")
    for ax in list(axes.flat)[len(rungs) :]:
        ax.axis("off")
    axes[0][0].set_ylabel("pass@k")
    axes[0][0].legend(fontsize=7)
    save(fig, path)


__all__ = ["compare_runs", "curve", "gains", "ks_up_to", "pass_counts", "plot", "reading"]
