"""The pipeline's Markdown report: results tables, example generations and plots."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from glmflash.evaluate.stats import proportion_interval
from glmflash.plots import pyplot, save
from glmflash.stages import BeforeAfter, ConfirmEval, PipelineResults

# the reference lab's figures: its pass@k was pass@8 at temperature 0.8, on the 25m scale
REFERENCE = {
    "greedy_pass1_trained": ("0/24", "16/24"),
    "passk_trained": ("9/24", "19/24"),
    "passk_all": ("25/64", "34/64"),
}
REFERENCE_SAMPLING = {"k": 8, "temperature": 0.8}
LABELS = {
    "greedy_pass1_trained": "greedy pass@1, the reference lab's RL families (confirm)",
    "passk_trained": "sampled pass@{k}, the reference lab's RL families (confirm)",
    "passk_all": "sampled pass@{k}, all eight families (confirm)",
}


def fmt(pair: list[float]) -> str:
    k, n = pair
    return f"{k:g}/{n}"


def ci(pair: list[float]) -> str:
    k, n = pair
    iv = proportion_interval(int(round(k)), int(n))
    return f"[{iv.low:.0%}, {iv.high:.0%}]"


def before_after_bars(panels: list[tuple[str, dict[str, BeforeAfter]]], png: Path) -> None:
    """One bar chart per panel (y label, name -> [k, n] before and after): the pass rate of
    each name before and after RL, side by side."""
    plt = pyplot()
    import numpy as np

    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 3.8), squeeze=False)
    for ax, (label, values) in zip(axes[0], panels, strict=True):
        names = list(values)
        x = np.arange(len(names))
        for shift, when in ((-0.2, "before"), (0.2, "after")):
            rates = [rate(getattr(values[n], when)) for n in names]
            ax.bar(x + shift, rates, 0.4, label=f"{when} RL")
        ax.set_xticks(x, names, rotation=30, ha="right")
        ax.set_ylim(0, 1)
        ax.set_ylabel(label)
    axes[0][0].legend()
    save(fig, png, dpi=120)


def family_bars(results: PipelineResults, png: Path) -> None:
    """Per family, before and after RL: sampled pass@k and the share of passing samples."""
    rl = results.rl
    panels = [
        (f"sampled pass@{rl.sampling['k']} (confirm)", rl.per_family),
        ("passing samples (confirm)", rl.per_family_samples),
    ]
    before_after_bars(panels, png)


def rate(pair: list[float] | None) -> float:
    return pair[0] / pair[1] if pair and pair[1] else 0.0


def machine_line(m: dict[str, Any] | None) -> str:
    """The machine under a table of timings, in one sentence."""
    if not m:
        return "Machine: not recorded."
    dtypes = ", ".join(f"{k} {v}" for k, v in m["dtypes"].items()) or "-"
    limits = f", limited by {m['isa_limits']}" if m.get("isa_limits") else ""
    return (
        f"Machine: {m['cpu']}, {m['cores']} cores ({m['threads']} torch threads), CPU "
        f"capability {m['cpu_capability']}{limits}, torch {m['torch']}; a bf16 matmul ran "
        f"{m['bf16_matmul_speedup']:.2g}x as fast as fp32, so the dtypes were: {dtypes}."
    )


RUNG_NOTES = {
    "depth1": "one primitive, phrasings pretraining used",
    "depth1_heldout_phrasings": "one primitive, phrasings nobody trained on",
    "seen_depth2": "two steps, structures in pretraining",
    "rl_only": "structures RL trains on (not in pretraining)",
    "unseen_depth2": "two steps, held out from pretraining and RL",
    "unseen_depth3": "three steps, held out from pretraining and RL",
    "seed_families": "the eight seed families, family-prefixed names",
    "seed_neutral_names": "the same tasks named f_<word>",
    "seed_misleading_names": "the same tasks under another family's prefix",
}


def ladder_section(results: PipelineResults, out: Path) -> list[str]:
    """The ladder table (greedy pass@1 per rung, before and after RL) and its plot."""
    ladder = results.ladder
    if not ladder:
        return []
    before_after_bars([("greedy pass@1 (confirm)", ladder)], out / "ladder.png")
    lines = [
        "## The task ladder (confirm split, greedy pass@1)",
        "",
        "| rung | what it asks | before RL | after RL | change | 95% interval after |",
        "|---|---|---|---|---|---|",
    ]
    for rung, v in ladder.items():
        change = f"{100 * (rate(v.after) - rate(v.before)):+.0f} pts" if v.after else "-"
        lines.append(
            f"| {rung} | {RUNG_NOTES.get(rung, '')} | {fmt(v.before)} | "
            f"{fmt(v.after) if v.after else '-'} | {change} | "
            f"{ci(v.after) if v.after else '-'} |"
        )
    bar = results.competence_bar
    lines += [
        "",
        f"Competence bar before RL ({', '.join(f'{r} {c}' for r, c in bar.bar.items())}): "
        f"{'cleared' if bar.cleared_on_confirm else 'not cleared'} after "
        f"{results.pretrain.tokens:,} pretraining tokens.",
    ]
    return lines + ["", "![ladder](ladder.png)", ""]


def family_section(results: PipelineResults) -> list[str]:
    """The seed families before and after RL, beside the reference lab where comparable."""
    rl = results.rl
    k, temperature = rl.sampling["k"], rl.sampling["temperature"]
    comparable = results.preset == "25m" and rl.sampling == REFERENCE_SAMPLING
    lines = [
        "## Seed families",
        "",
        "| result | before RL | after RL | 95% interval after | reference lab |",
        "|---|---|---|---|---|",
    ]
    for key, label in LABELS.items():
        ref = " -> ".join(REFERENCE[key]) if comparable else "-"
        score: BeforeAfter = getattr(rl, key)
        lines.append(
            f"| {label.format(k=k)} | {fmt(score.before)} | "
            f"{fmt(score.after)} | {ci(score.after)} | {ref} |"
        )
    v = results.vision.heldout_correct
    lines += [
        f"| vision, held-out renderings | | {fmt(v)} | {ci(v)} | 40/100 (inside the 25M model) |",
        "",
        f"Intervals are Clopper-Pearson for k of n tasks. pass@{k} counts a task solved "
        f"when any of {k} samples (temperature {temperature:g}) passes every hidden case.",
        "",
        f"## Per family (confirm, {k} samples per task at temperature {temperature:g})",
        "",
        f"| family | pass@{k} before | pass@{k} after | passing samples before | after |",
        "|---|---|---|---|---|",
    ]
    for fam, p in rl.per_family.items():
        s = rl.per_family_samples.get(fam, BeforeAfter(None, None))
        lines.append(
            f"| {fam} | {fmt(p.before)} | {fmt(p.after)} | "
            f"{fmt(s.before) if s.before else '-'} | {fmt(s.after) if s.after else '-'} |"
        )
    return [*lines, "", "![per family](families.png)", ""]


def time_section(results: PipelineResults) -> list[str]:
    """Seconds per stage, the machine, memory and RL's rate."""
    rl = results.rl
    lines = ["## Time and memory", "", "| stage | seconds |", "|---|---|"]
    lines += [f"| {stage} | {s:.0f} |" for stage, s in results.wall_seconds.items()]
    return [
        *lines,
        "",
        machine_line(results.machine),
        "",
        f"Peak memory: {results.peak_memory_bytes / 2**30:.2f} GiB. "
        f"RL trained {rl.trainable_parameters:,} parameters at "
        f"{rl.rollouts_per_s:.1f} rollouts/s.",
        "",
        *decoding_lines(results.decoding),
    ]


def decoding_lines(decoding: BeforeAfter) -> list[str]:
    """The check of cached decoding against full recomputation, before and after RL."""
    checks = {k: v for k, v in (("before", decoding.before), ("after", decoding.after)) if v}
    if not checks:
        return []
    parts = [
        f"{when} RL {c['identical']}/{c['prompts']} identical ({c['new_tokens']} new tokens, "
        f"{c['speedup']:.1f}x faster cached)"
        for when, c in checks.items()
    ]
    return [
        "Greedy completions of trained-family prompts, cached decoding against recomputing "
        "every prefix: " + "; ".join(parts) + ".",
        "",
    ]


def examples_section(before: ConfirmEval, after: ConfirmEval) -> list[str]:
    """The same greedy confirm tasks before and after RL, completion under completion."""
    lines = ["## Example generations (greedy, confirm split)", ""]
    after_by_name = {r["name"]: r for r in after.examples}
    for r in before.examples:
        a = after_by_name.get(r["name"])
        lines += [
            f"**{r['name']}**: before `{r['status']}`, after `{a['status'] if a else '?'}`",
            "",
            "```text",  # a transcript of two completions, not one program
            r["prompt"] + r["completion"] + "# --- after RL:",
            a["completion"] if a else "",
            "```",
            "",
        ]
    return lines


def write_pipeline_report(
    out: Path, results: PipelineResults, before: ConfirmEval, after: ConfirmEval
) -> Path:
    """report.md: the ladder first, then the seed families, time and memory, the curves and
    example generations; the plots beside it."""
    for src, name in (
        (out / "pretrain" / "run" / "loss.png", "loss.png"),
        (out / "rl" / "run" / "rl.png", "reward.png"),
    ):
        if src.is_file():
            shutil.copy(src, out / name)
    family_bars(results, out / "families.png")
    lines = [
        f"# glmflash pipeline report (preset {results.preset}, seed {results.seed})",
        "",
        *ladder_section(results, out),
        *family_section(results),
        *time_section(results),
        "## Curves",
        "",
        "![loss](loss.png)",
        "",
        "![reward](reward.png)",
        "",
        *examples_section(before, after),
    ]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
