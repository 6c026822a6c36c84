"""Statistics, a Markdown report and plots for each experiment in DIR (`glmflash report DIR`).

For every folder DIR/NAME written by `glmflash experiment` (or DIR itself, if it is one):

    report.md     conditions (mean over seeds, 95% bootstrap interval) and the paired
                  comparisons: difference b - a with a 95% paired bootstrap interval, the exact
                  sign-flip p, Holm's adjusted p across the experiment's comparisons, the
                  number of seeds that agree in sign, and a plain sentence on significance
    results.json  the same numbers, for programs
    curves.png    learning curves per condition: every seed thin, the mean thick
    paired.png    each comparison's seeds as lines from arm a to arm b
    forest.png    each comparison's difference with its interval
    passk_A_vs_B.png  pass@k against k per rung, where the runs sampled it (an RL arm's passk)

Where the runs kept each task's greedy outcome per ladder rung (the RL arms), each comparison
also gets a table per rung: the gain with a hierarchical bootstrap interval (seeds, then tasks)
and Holm's adjustment over the rungs.

Only seeds finished in both arms of a comparison enter it. Holm's correction is applied
within each metric, over that metric's comparisons; the primary metric is the one that decides.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from glmflash.evaluate import pass_curve, stats
from glmflash.experiments.runner import DEFINITION, RUNS, read_run, write_json_atomic
from glmflash.plots import pyplot, save

ALPHA = 0.05


class ReportError(RuntimeError):
    """Nothing to report on, or an unreadable experiment folder."""


def load(folder: Path) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """The definition, the finished runs and the failed runs of one experiment folder."""
    definition = read_run(folder / DEFINITION)
    if definition is None:
        raise ReportError(f"{folder} holds no readable {DEFINITION}")
    records = [r for p in sorted((folder / RUNS).glob("*.json")) if (r := read_run(p))]
    ok = [r for r in records if r.get("status") == "ok"]
    return definition, ok, [r for r in records if r.get("status") != "ok"]


def values_by_seed(runs: list[dict[str, Any]], condition: str, metric: str) -> dict[int, float]:
    return {
        r["seed"]: float(r["metrics"][metric])
        for r in runs
        if r["condition"] == condition and isinstance(r["metrics"].get(metric), (int, float))
    }


def condition_stats(values: dict[int, float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    interval = stats.bootstrap_mean(list(values.values()))
    return {"n": len(values), "mean": interval.estimate, "low": interval.low, "high": interval.high}


def compare_all(
    runs: list[dict[str, Any]], comparisons: list[list[str]], metric: str
) -> list[dict[str, Any]]:
    """Paired comparisons of one metric, with Holm's adjustment over those that have pairs."""
    rows = []
    for a, b in comparisons:
        va, vb = values_by_seed(runs, a, metric), values_by_seed(runs, b, metric)
        seeds = sorted(set(va) & set(vb))
        row: dict[str, Any] = {"a": a, "b": b, "n": len(seeds), "seeds": seeds}
        if seeds:
            c = stats.compare([va[s] for s in seeds], [vb[s] for s in seeds])
            row.update(
                mean_a=c.mean_a,
                mean_b=c.mean_b,
                difference=c.difference.estimate,
                low=c.difference.low,
                high=c.difference.high,
                p=c.p,
                seeds_agree=c.seeds_agree,
                a_values=[va[s] for s in seeds],
                b_values=[vb[s] for s in seeds],
            )
        rows.append(row)
    tested = [r for r in rows if r["n"]]
    if tested:
        for r, adjusted in zip(tested, stats.holm([r["p"] for r in tested]), strict=True):
            r["p_holm"] = adjusted
    return rows


def summarize(folder: Path, alpha: float = ALPHA) -> dict[str, Any]:
    definition, runs, failed = load(folder)
    metric = definition["metric"]
    metrics = [metric, *definition.get("secondary", [])]
    conditions = list(definition["conditions"])
    sessions = definition.get("sessions", [])
    return {
        "experiment": definition["name"],
        "description": definition.get("description", ""),
        "metric": metric,
        "secondary": metrics[1:],
        "alpha": alpha,
        "quick": definition.get("quick", False),
        "seeds": definition.get("seeds", []),
        "conditions": {
            c: {m: condition_stats(values_by_seed(runs, c, m)) for m in metrics} for c in conditions
        },
        "comparisons": {m: compare_all(runs, definition["comparisons"], m) for m in metrics},
        "pass_curves": pass_curves(runs, definition["comparisons"]),
        "rungs": rung_comparisons(runs, definition["comparisons"]),
        "runs_ok": len(runs),
        "failed": [
            {"condition": r["condition"], "seed": r["seed"], "error": r.get("error")}
            for r in failed
        ],
        "compute": {
            "run_seconds": sum(r.get("seconds", 0.0) for r in runs),
            "run_cpu_seconds": sum(r.get("cpu_seconds", 0.0) for r in runs),
            "sessions": sessions,
        },
    }


def rung_comparisons(
    runs: list[dict[str, Any]], comparisons: list[list[str]]
) -> dict[str, dict[str, Any]]:
    """ "A_vs_B" -> {"a", "b", "rows"}: for the comparisons whose runs kept each task's greedy
    outcome (`greedy_passes`, rung -> 0/1 per task, the same tasks in every run), one row per
    rung: the means of a and b over the paired seeds, the gain b - a with a hierarchical
    bootstrap interval (seeds, then tasks: `pass_curve.gains` at k = 1 of one sample), the
    sign-flip p of the seeds' rates, and Holm's adjustment over the rungs of the comparison."""
    out = {}
    for a, b in comparisons:
        by = {
            c: {
                r["seed"]: r["metrics"]["greedy_passes"]
                for r in runs
                if r["condition"] == c and "greedy_passes" in r["metrics"]
            }
            for c in (a, b)
        }
        seeds = sorted(set(by[a]) & set(by[b]))
        if not seeds:
            continue
        rows = []
        for rung in by[a][seeds[0]]:
            before = {s: by[a][s][rung] for s in seeds}
            after = {s: by[b][s][rung] for s in seeds}
            (gain,) = pass_curve.gains(1, before, after, [1])
            rates = [[float(np.mean(x[s])) for s in seeds] for x in (before, after)]
            rows.append(
                {
                    "rung": rung,
                    "n": len(seeds),
                    "tasks": len(before[seeds[0]]),
                    "mean_a": gain["base"],
                    "mean_b": gain["after"],
                    "difference": gain["gain"],
                    "low": gain["low"],
                    "high": gain["high"],
                    "p": stats.sign_flip_test(*rates),
                    "seeds_agree": stats.seeds_agree(*rates)[0],
                }
            )
        for row, adjusted in zip(rows, stats.holm([r["p"] for r in rows]), strict=True):
            row["p_holm"] = adjusted
        out[f"{a}_vs_{b}"] = {"a": a, "b": b, "rows": rows}
    return out


def _rung_lines(entry: dict[str, Any], alpha: float) -> list[str]:
    rows = entry["rows"]
    lines = [
        f"## Per rung: `{entry['b']}` against `{entry['a']}`",
        "",
        "| rung | seeds x tasks | mean a | mean b | gain b - a [95% CI, seeds then tasks] "
        "| p (sign-flip) | p (Holm over rungs) | seeds agree |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['rung']} | {r['n']} x {r['tasks']} | {_num(r['mean_a'])} | "
            f"{_num(r['mean_b'])} | {r['difference']:+.4f} [{r['low']:+.4f}, {r['high']:+.4f}] "
            f"| {_p(r['p'])} | {_p(r['p_holm'])} | {r['seeds_agree']}/{r['n']} |"
        )
    held = [r["rung"] for r in rows if r["p_holm"] <= alpha]
    text = (
        f"Significant after Holm over {len(rows)} rungs: {', '.join(held) or 'none'}. The "
        "interval resamples seeds, then each seed's tasks (greedy pass@1 on the same tasks in "
        "every run); p tests the seeds' rates."
    )
    n, m = min(r["n"] for r in rows), len(rows)
    if (floor := m * 2 / 2**n) > alpha:
        text += (
            f" With {n} seeds the smallest sign-flip p is 2/2^{n}, and Holm over {m} rungs "
            f"multiplies it by {m}: {floor:.3g} > {alpha}, so no rung can pass this test; read "
            "the intervals."
        )
    return [*lines, "", text, ""]


def pass_curves(runs: list[dict[str, Any]], comparisons: list[list[str]]) -> dict[str, Any]:
    """ "A_vs_B" -> {"a": A, "b": B, "rungs": rung -> pass@k gains of B over A at every k}, for
    the comparisons whose runs sampled pass@k (an RL arm's `passk`; `evaluate.pass_curve`)."""
    out = {}
    for a, b in comparisons:
        table = pass_curve.compare_runs(runs, a, b)
        if table is not None:
            out[f"{a}_vs_{b}"] = {"a": a, "b": b, "rungs": table}
    return out


def _pass_curve_lines(entry: dict[str, Any]) -> list[str]:
    a, b, table = entry["a"], entry["b"], entry["rungs"]
    lines = [
        f"## pass@k: `{b}` against `{a}`",
        "",
        "| rung | pass@1 | pass@k | reading |",
        "|---|---|---|---|",
    ]
    for rung, entry in table.items():
        first, last = entry["rows"][0], entry["rows"][-1]
        cells = [
            f"{r['base']:.3f} -> {r['after']:.3f} ({r['gain']:+.3f} [{r['low']:+.3f}, "
            f"{r['high']:+.3f}])"
            for r in (first, last)
        ]
        lines.append(f"| {rung} | {cells[0]} | k={last['k']}: {cells[1]} | {entry['reading']} |")
    return [
        *lines,
        "",
        "Unbiased pass@k on the same tasks for both; gains with hierarchical bootstrap "
        "intervals (seeds, then tasks).",
        "",
    ]


# ---------------------------------------------------------------------------- Markdown


def _num(x: float) -> str:
    return f"{x:.4f}" if abs(x) < 1000 else f"{x:.4g}"


def _p(x: float) -> str:
    return f"{x:.4f}" if x >= 1e-4 else f"{x:.1e}"


def _interval(s: dict[str, Any]) -> str:
    return f"{_num(s['mean'])} [{_num(s['low'])}, {_num(s['high'])}]" if s["n"] else "-"


def verdict(rows: list[dict[str, Any]], metric: str, alpha: float) -> str:
    """The sentence on significance that the report states under the primary comparisons."""
    tested = [r for r in rows if r["n"]]
    if not tested:
        return "No comparison has paired seeds yet."
    names = [f"{r['b']} vs {r['a']}" for r in tested if r["p_holm"] <= alpha]
    m = len(tested)
    if names:
        return (
            f"Significant at alpha = {alpha} after Holm's correction over {m} "
            f"comparison(s) of {metric}: {', '.join(names)}."
        )
    text = (
        f"Nothing is significant: no comparison of {metric} has a Holm-adjusted p below "
        f"{alpha} (over {m} comparison(s))."
    )
    raw = [f"{r['b']} vs {r['a']}" for r in tested if r["p"] <= alpha]
    if raw:
        text += f" Unadjusted p was below {alpha} for {', '.join(raw)}, which the correction "
        text += "does not support."
    n = min(r["n"] for r in tested)
    floor = 2 / 2**n
    if floor > alpha:
        text += (
            f" With {n} paired seeds the smallest possible two-sided sign-flip p is "
            f"2/2^{n} = {floor:.3g}, so no result could reach {alpha}: run more seeds."
        )
    return text


def _comparison_table(rows: list[dict[str, Any]]) -> list[str]:
    out = [
        "| a | b | seeds | mean a | mean b | difference b - a [95% CI] | p (sign-flip) "
        "| p (Holm) | seeds agree |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if not r["n"]:
            out.append(f"| {r['a']} | {r['b']} | 0 | - | - | - | - | - | - |")
            continue
        out.append(
            f"| {r['a']} | {r['b']} | {r['n']} | {_num(r['mean_a'])} | "
            f"{_num(r['mean_b'])} | {r['difference']:+.4f} [{r['low']:+.4f}, "
            f"{r['high']:+.4f}] | {_p(r['p'])} | {_p(r['p_holm'])} | "
            f"{r['seeds_agree']}/{r['n']} |"
        )
    return out


def markdown(summary: dict[str, Any], plots: list[str]) -> str:
    metric, alpha = summary["metric"], summary["alpha"]
    metrics = [metric, *summary["secondary"]]
    lines = [f"# Experiment `{summary['experiment']}`", ""]
    if summary["description"]:
        lines += [summary["description"], ""]
    compute = summary["compute"]
    wall = sum(s.get("wall_seconds", 0.0) for s in compute["sessions"])
    workers = sorted({s.get("workers") for s in compute["sessions"] if s.get("workers")})
    lines += [
        f"Primary metric: `{metric}`. Runs finished: {summary['runs_ok']}; failed: "
        f"{len(summary['failed'])}. Seeds: {', '.join(map(str, summary['seeds']))}.",
        f"Compute: {compute['run_seconds']:.0f} s summed over runs "
        f"({compute['run_cpu_seconds']:.0f} CPU s), {wall:.0f} s wall over "
        f"{len(compute['sessions'])} session(s) with {workers or '?'} worker(s).",
        "",
    ]
    if summary["quick"]:
        lines += [
            "**Quick mode**: fewer seeds and shortened runs, to check that the pipeline "
            "works; not a measurement.",
            "",
        ]
    header = "| condition | seeds | " + " | ".join(f"{m} mean [95% CI]" for m in metrics) + " |"
    lines += ["## Conditions", "", header, "|---|---|" + "---|" * len(metrics)]
    for c, per_metric in summary["conditions"].items():
        cells = " | ".join(_interval(per_metric[m]) for m in metrics)
        lines.append(f"| {c} | {per_metric[metric]['n']} | {cells} |")
    lines += [
        "",
        "Intervals: percentile bootstrap over seeds (10,000 resamples).",
        "",
        f"## Comparisons of `{metric}` (primary)",
        "",
    ]
    lines += _comparison_table(summary["comparisons"][metric])
    lines += [
        "",
        verdict(summary["comparisons"][metric], metric, alpha),
        "",
        "p: exact two-sided paired sign-flip (permutation) test of the mean difference; "
        "Holm: adjusted over this table's comparisons; seeds agree: pairs whose "
        "difference has the sign of the mean difference.",
        "",
    ]
    for m in summary["secondary"]:
        lines += [f"## Comparisons of `{m}` (secondary)", ""]
        lines += _comparison_table(summary["comparisons"][m])
        lines += ["", verdict(summary["comparisons"][m], m, alpha), ""]
    for entry in summary.get("rungs", {}).values():
        lines += _rung_lines(entry, alpha)
    for entry in summary.get("pass_curves", {}).values():
        lines += _pass_curve_lines(entry)
    if plots:
        lines += ["## Plots", ""] + [f"![{Path(p).stem}]({p})" for p in plots] + [""]
    if summary["failed"]:
        lines += (
            ["## Failed runs", ""]
            + [f"- {f['condition']} seed {f['seed']}: {f['error']}" for f in summary["failed"]]
            + [""]
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------- plots


def plot_curves(runs: list[dict[str, Any]], conditions: list[str], metric: str, path: Path) -> bool:
    """Learning curves of `metric` (or the first curve the runs have): seeds thin, mean thick.
    Returns False when no run recorded a curve."""
    keys = [k for r in runs for k in r["metrics"].get("curves", {})]
    if not keys:
        return False
    key = metric if metric in keys else keys[0]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, c in enumerate(conditions):
        curves = [
            r["metrics"]["curves"][key]
            for r in runs
            if r["condition"] == c and key in r["metrics"].get("curves", {})
        ]
        if not curves:
            continue
        color = colors[i % len(colors)]
        for curve in curves:
            ax.plot([p[0] for p in curve], [p[1] for p in curve], color=color, lw=0.6, alpha=0.3)
        steps = sorted(set.intersection(*[{p[0] for p in curve} for curve in curves]))
        mean = [np.mean([dict(map(tuple, curve))[s] for curve in curves]) for s in steps]
        ax.plot(steps, mean, color=color, lw=2.2, label=f"{c} (n={len(curves)})")
    ax.set_xlabel("update")
    ax.set_ylabel(key)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, path, dpi=110)
    return True


def plot_paired(rows: list[dict[str, Any]], metric: str, path: Path) -> bool:
    rows = [r for r in rows if r["n"]]
    if not rows:
        return False
    plt = pyplot()
    cols = min(len(rows), 4)
    nrows = math.ceil(len(rows) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.2 * cols, 3.4 * nrows), squeeze=False)
    for ax, r in zip(axes.flat, rows, strict=False):
        for ya, yb in zip(r["a_values"], r["b_values"], strict=True):
            up = yb > ya
            ax.plot(
                [0, 1],
                [ya, yb],
                "-o",
                ms=3,
                lw=0.9,
                alpha=0.7,
                color="tab:green" if up else ("tab:red" if yb < ya else "tab:gray"),
            )
        ax.plot([0, 1], [r["mean_a"], r["mean_b"]], "-s", color="black", lw=2.2, ms=5)
        ax.set_xticks([0, 1], [r["a"], r["b"]], fontsize=8)
        ax.set_xlim(-0.3, 1.3)
        ax.set_title(f"{r['seeds_agree']}/{r['n']} agree, p={r['p']:.3g}", fontsize=9)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(rows) :]:
        ax.axis("off")
    axes[0, 0].set_ylabel(metric)
    save(fig, path, dpi=110)
    return True


def plot_forest(rows: list[dict[str, Any]], metric: str, path: Path) -> bool:
    rows = [r for r in rows if r["n"]]
    if not rows:
        return False
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(rows) + 1.4))
    y = np.arange(len(rows))[::-1]
    est = np.array([r["difference"] for r in rows])
    err = np.array(
        [[r["difference"] - r["low"] for r in rows], [r["high"] - r["difference"] for r in rows]]
    )
    ax.errorbar(est, y, xerr=err, fmt="o", color="black", capsize=4)
    ax.axvline(0.0, color="tab:red", lw=1, ls="--")
    ax.set_yticks(y, [f"{r['b']} - {r['a']}  (p_Holm={r['p_holm']:.3g})" for r in rows], fontsize=8)
    ax.set_xlabel(f"difference in {metric}\n(b - a, 95% paired bootstrap interval)")
    ax.grid(alpha=0.3, axis="x")
    save(fig, path, dpi=110)
    return True


# ---------------------------------------------------------------------------- entry points


def write_report(folder: str | Path, alpha: float = ALPHA) -> Path:
    """Write report.md, results.json and the PNG plots into an experiment folder."""
    folder = Path(folder)
    summary = summarize(folder, alpha)
    definition, runs, _ = load(folder)
    metric = summary["metric"]
    rows = summary["comparisons"][metric]
    plots = []
    if plot_curves(runs, list(definition["conditions"]), metric, folder / "curves.png"):
        plots.append("curves.png")
    if plot_paired(rows, metric, folder / "paired.png"):
        plots.append("paired.png")
    if plot_forest(rows, metric, folder / "forest.png"):
        plots.append("forest.png")
    for name, entry in summary["pass_curves"].items():
        pass_curve.plot(entry["rungs"], entry["a"], entry["b"], folder / f"passk_{name}.png")
        plots.append(f"passk_{name}.png")
    write_json_atomic(folder / "results.json", summary)
    path = folder / "report.md"
    path.write_text(markdown(summary, plots))
    return path


def experiment_folders(root: Path) -> list[Path]:
    """root itself if it is an experiment folder, else its experiment subfolders."""
    if (root / DEFINITION).is_file():
        return [root]
    return sorted(p for p in root.iterdir() if (p / DEFINITION).is_file()) if root.is_dir() else []
