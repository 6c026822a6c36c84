"""The seed study on the task ladder: RL from one pretrained checkpoint with several seeds,
greedy pass@1 per rung before and after, statistics at the level of seeds.

    .venv/bin/python results/ladder_seeds/study.py --init CKPT [--seeds 1 2 3 4 5]
        [--per-rung 48] [--jobs 2] [--work runs/ladder_seeds] [--passk-tasks 12] [--groups 96]
        [--reward binary|partial] [--stage pipeline|first]

Each seed runs the pipeline's RL stage (`PipelinePlan.full(seed).rl`; --stage first: the stage
the pipeline had before, RLConfig's defaults; --groups changes its length) with its own seed;
its dev-selected checkpoint is evaluated on the same confirm tasks as the starting checkpoint.
Per rung, the gain of seed s on task t is pass_after(s, t) - pass_before(t); the mean gain
gets a hierarchical bootstrap interval (seeds, then tasks within seeds) and an exact
sign-flip test over the seeds' mean gains. With --passk-tasks, pass@k for k = 1..64 (64
samples per task) before and after RL (the first seed), per rung, as passk.png.
Work is kept under --work (rerunning skips what is done); the summary goes next to this file:
summary.json ({rung: {gain, ci, seeds, p_signflip, ...}}), summary.md, passk.json, passk.png
(--name NAME: NAME.json, NAME.md, passk_NAME.*).
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from glmflash.config import RLConfig
from glmflash.config.plan import PipelinePlan
from glmflash.verify.rewards import REWARD_MODES

HERE = Path(__file__).parent
PASSK_SAMPLES = 64
PASSK_LABELS = ("before", "after")  # the starting checkpoint, the first seed's RL checkpoint
TRAINED = ("rl_only_depth2",)  # the depth-2 RL structures: new instances of what the stage trains


def task_passes(result_json: dict[str, Any]) -> dict[str, list[int]]:
    """rung -> per-task pass (0/1) of a greedy evaluation, in task order."""
    out: dict[str, list[int]] = {}
    for r in result_json["records"]:
        out.setdefault(r["group"], []).append(int(r["status"] == "pass"))
    return out


def evaluate(checkpoint: str, path: Path, per_rung: int) -> dict[str, list[int]]:
    """Greedy pass per task of every pipeline rung (`path`) and of the structures the stage
    trains (`path`'s stem + _trained.json: new instances of them), each file written once."""
    from glmflash.checkpoint import load_model
    from glmflash.evaluate.rungs import RUNGS, evaluate_rungs

    out, model = {}, None
    for rungs, file in ((RUNGS, path), (TRAINED, path.with_name(f"{path.stem}_trained.json"))):
        if not file.is_file():
            model = model or load_model(checkpoint)[0]
            result = evaluate_rungs(model, rungs, "confirm", per_rung)["greedy"]
            file.write_text(json.dumps(result.to_json()))
        out.update(task_passes(json.loads(file.read_text())))
    return out


STAGES = {  # --stage: the RL stage every seed runs
    "pipeline": lambda seed: PipelinePlan.full(seed).rl,  # each depth-2 RL structure 4 times
    "first": lambda seed: RLConfig(seed=seed),  # seed families and the ladder: summary_stage96
}


def one_seed(
    init: str, seed: int, work: Path, per_rung: int, threads: int | None, cfg: RLConfig
) -> None:
    """RL with `seed` (resuming an interrupted run), then the confirm evaluation."""
    import torch

    from glmflash.train.rl import train_rl

    if threads:
        torch.set_num_threads(threads)
    run = work / f"rl_{seed}"
    if not (run / "summary.json").is_file():
        train_rl(
            init,
            run,
            cfg,
            "cpu",
            resume=(run / "run.json").is_file(),
            progress=False,
            log=lambda m: print(f"[seed {seed}] {m}", file=sys.stderr),
        )
    evaluate(str(run / "best"), work / f"after_{seed}.json", per_rung)


def summarise(
    before: dict[str, list[int]],
    after: dict[int, dict[str, list[int]]],
) -> dict[str, Any]:
    from glmflash.evaluate.stats import hierarchical_bootstrap, sign_flip_test

    summary = {}
    for rung, base in before.items():
        b = np.array(base, dtype=float)
        gains = [np.array(a[rung], dtype=float) - b for a in after.values()]
        iv = hierarchical_bootstrap(gains, seed=0)
        seed_means = [float(g.mean()) for g in gains]
        summary[rung] = {
            "gain": iv.estimate,
            "ci": [iv.low, iv.high],
            "seeds": len(gains),
            "p_signflip": sign_flip_test(np.zeros(len(gains)), seed_means),
            "before": [int(b.sum()), len(b)],
            "after_per_seed": [int(b.sum() + g.sum()) for g in gains],
            "seed_gains": seed_means,
        }
    return summary


def passk_curves(checkpoints: dict[str, str], work: Path, n_tasks: int) -> dict[str, Any]:
    """rung -> {label: [pass@k for k = 1..64]}, 64 samples per task at temperature 0.8."""
    from glmflash.checkpoint import load_model
    from glmflash.config import Sampling
    from glmflash.evaluate.passk import mean_pass_at_k
    from glmflash.evaluate.rungs import RUNGS, evaluate_rungs

    curves: dict[str, Any] = {}
    for label, ckpt in checkpoints.items():
        path = work / f"passk_{label}.json"
        if not path.is_file():
            model, _ = load_model(ckpt)
            draws = Sampling("sample", PASSK_SAMPLES)
            res = evaluate_rungs(model, RUNGS, "confirm", n_tasks, draws)["sampled"]
            path.write_text(json.dumps(res.to_json()))
        for rung, passed in task_pass_counts(path).items():
            ns = [PASSK_SAMPLES] * len(passed)
            curves.setdefault(rung, {})[label] = [
                mean_pass_at_k(ns, passed, k) for k in range(1, PASSK_SAMPLES + 1)
            ]
    return curves


def task_pass_counts(path: Path) -> dict[str, list[int]]:
    """rung -> passing samples of each of its tasks in a pass@k file (PASSK_SAMPLES a task,
    consecutive)."""
    rows = task_passes(json.loads(path.read_text()))
    return {
        rung: [sum(passes[i : i + PASSK_SAMPLES]) for i in range(0, len(passes), PASSK_SAMPLES)]
        for rung, passes in rows.items()
    }


def passk_gains(work: Path) -> dict[str, dict[str, list[float]]]:
    """rung -> {"pass@1", "pass@64": [gain, low, high]}: after - before on the same tasks, with
    a 95% bootstrap interval over the tasks (one seed's policy: tasks are the only level)."""
    from glmflash.evaluate.passk import pass_at_k
    from glmflash.evaluate.rungs import RUNGS
    from glmflash.evaluate.stats import hierarchical_bootstrap

    gains: dict[str, dict[str, list[float]]] = {}
    counts = [task_pass_counts(work / f"passk_{x}.json") for x in PASSK_LABELS]
    for rung in RUNGS:
        before, after = (np.array(c[rung]) for c in counts)
        for k in (1, PASSK_SAMPLES):
            d = pass_at_k(PASSK_SAMPLES, after, k) - pass_at_k(PASSK_SAMPLES, before, k)
            iv = hierarchical_bootstrap([d], seed=0)
            gains.setdefault(rung, {})[f"pass@{k}"] = [iv.estimate, iv.low, iv.high]
    return gains


def reading(gain: dict[str, list[float]]) -> str:
    """New solutions when pass@64's interval is above 0; sharpening when only pass@1's is."""
    if gain[f"pass@{PASSK_SAMPLES}"][1] > 0:
        return "new solutions"
    return "sharpening" if gain["pass@1"][1] > 0 else "no change the design detects"


def plot_passk(curves: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 3, figsize=(12, 9), sharex=True, sharey=True)
    ks = np.arange(1, PASSK_SAMPLES + 1)
    for ax, (rung, by_label) in zip(axes.flat, curves.items(), strict=False):
        for label, ys in by_label.items():
            ax.plot(ks, ys, label=label)
        ax.set_xscale("log", base=2)
        ax.set_title(rung)
        ax.set_ylim(0, 1)
    axes[0][0].legend()
    for ax in axes[-1]:
        ax.set_xlabel("k")
    for ax in axes[:, 0]:
        ax.set_ylabel("pass@k (confirm)")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def markdown(summary: dict[str, Any], curves: dict[str, Any] | None, args) -> str:
    lines = [
        f"# RL seed study on the task ladder ({len(args.seeds)} seeds from {args.init}, "
        f"the {args.stage} RL stage, {config(args, 0).groups} groups each, {args.reward} reward)",
        "",
        f"Greedy pass@1 on {args.per_rung} confirm tasks per rung. Gain: mean over seeds "
        "and tasks of after - before, in points; interval: hierarchical bootstrap "
        "(seeds, then tasks within seeds), 95%; p: exact sign-flip test over the seeds' "
        f"mean gains (smallest possible with {len(args.seeds)} seeds: "
        f"{2 / 2 ** len(args.seeds):.4g}).",
        "",
        "| rung | before | after, per seed | gain (points) | 95% interval | p |",
        "|---|---|---|---|---|---|",
    ]
    for rung, s in summary.items():
        lines.append(
            f"| {rung} | {s['before'][0]}/{s['before'][1]} | "
            f"{', '.join(map(str, s['after_per_seed']))} | {100 * s['gain']:+.1f} | "
            f"[{100 * s['ci'][0]:+.1f}, {100 * s['ci'][1]:+.1f}] | "
            f"{s['p_signflip']:.3g} |"
        )
    if curves:
        lines += [
            "",
            "## pass@k, k = 1..64, before and after RL",
            "",
            f"{PASSK_SAMPLES} samples of {args.passk_tasks} tasks a rung at temperature 0.8, the "
            f"first seed's policy; gains after - before with a 95% bootstrap interval over tasks.",
            "",
            "| rung | pass@1 before / after | pass@8 | pass@64 | pass@1 gain | pass@64 gain | "
            "reading |",
            "|---|---|---|---|---|---|---|",
        ]
        gains = passk_gains(args.work)
        for rung, c in curves.items():
            b, a = c["before"], c["after"]
            g1, g64 = (gains[rung][f"pass@{k}"] for k in (1, PASSK_SAMPLES))
            lines.append(
                f"| {rung} | {b[0]:.3f} / {a[0]:.3f} | {b[7]:.3f} / {a[7]:.3f} | "
                f"{b[63]:.3f} / {a[63]:.3f} | {g1[0]:+.3f} [{g1[1]:+.3f}, {g1[2]:+.3f}] | "
                f"{g64[0]:+.3f} [{g64[1]:+.3f}, {g64[2]:+.3f}] | {reading(gains[rung])} |"
            )
        lines += ["", f"![pass@k]({'passk' if args.name is None else f'passk_{args.name}'}.png)"]
    return "\n".join(lines) + "\n"


def config(args: argparse.Namespace, seed: int) -> RLConfig:
    """The stage's settings for this seed, with --groups and --reward."""
    cfg = STAGES[args.stage](seed)
    return replace(cfg, groups=args.groups or cfg.groups, reward=args.reward)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--init", required=True, help="the pretrained checkpoint RL starts from")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    p.add_argument("--per-rung", type=int, default=48)
    p.add_argument("--jobs", type=int, default=1, help="seeds at once (one thread each if > 1)")
    p.add_argument("--work", type=Path, default=Path("runs/ladder_seeds"))
    p.add_argument("--passk-tasks", type=int, default=0, help="tasks per rung for pass@k")
    p.add_argument("--stage", choices=STAGES, default="pipeline", help="each seed's RL stage")
    p.add_argument("--groups", type=int, help="RL groups per seed (default: the stage's)")
    p.add_argument(
        "--reward",
        choices=REWARD_MODES,
        default=RLConfig.reward,
        help="binary (the pipeline's) or partial: the share of hidden cases "
        "passed; the summary of a partial run is written as summary_partial.*",
    )
    p.add_argument(
        "--name",
        default=None,
        help="the summary's files NAME.json/.md (and passk_NAME.*) beside this script "
        "(default: summary, or summary_partial with --reward partial)",
    )
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    per_rung = args.per_rung
    before = evaluate(args.init, args.work / "before.json", per_rung)
    threads = 1 if args.jobs > 1 else None
    with ProcessPoolExecutor(args.jobs) as pool:
        for f in [
            pool.submit(one_seed, args.init, s, args.work, per_rung, threads, config(args, s))
            for s in args.seeds
        ]:
            f.result()
    after = {
        s: evaluate(str(args.work / f"rl_{s}" / "best"), args.work / f"after_{s}.json", per_rung)
        for s in args.seeds
    }
    summary = summarise(before, after)
    curves = None
    if args.passk_tasks:
        rl = str(args.work / f"rl_{args.seeds[0]}" / "best")
        checkpoints = dict(zip(PASSK_LABELS, (args.init, rl), strict=True))
        curves = passk_curves(checkpoints, args.work, args.passk_tasks)
    name = args.name or ("summary" if args.reward == "binary" else f"summary_{args.reward}")
    passk = "passk" if args.name is None else f"passk_{args.name}"
    if curves:
        plot_passk(curves, HERE / f"{passk}.png")
    (HERE / f"{name}.json").write_text(json.dumps(summary, indent=2))
    if curves:
        (HERE / f"{passk}.json").write_text(json.dumps(curves, indent=2))
    (HERE / f"{name}.md").write_text(markdown(summary, curves, args))
    print((HERE / f"{name}.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
