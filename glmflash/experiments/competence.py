"""Tokens to competence: how many pretraining tokens a recipe needs before the task ladder has
headroom for RL.

The competence bar (`evaluate.rungs.COMPETENCE_BAR`) is read on the dev split, greedy pass@1.
One configuration is measured at several budgets
B_1 < ... < B_n (optimizer steps) with the warmup-stable-decay schedule (schedule.py): one
stable run to B_n, whose own decay gives the last point, and for every other budget a branch
from the stable run's checkpoint at decay_start(B_i) that only decays. Each point is thus a run
fully decayed at its budget, as if trained to it from scratch (check_branch refuses a branch
for which that would not hold), for the price of the stable run plus decay_fraction of the
other budgets.

Each budget's model gets the ladder on the dev split (the confirm split stays for the final
report) and the teacher-forced loss of each rung's reference bodies (a smooth signal beside
the counts). The pipeline's budget needs more than clearing the bar once: `tokens_to_margin` is
the first budget whose dev reading would miss the bar on a fresh confirm draw less than 5% of the
time (`evaluate.rungs.miss_chance`). One row per (name, seed) goes to `table.json` in the output
folder:

    glmflash competence --out results/competence --name baseline --budgets 80,160,240,320
    glmflash competence --out results/competence --name delta --budgets 80,160,240,320 \\
        --model-option linear_kind=delta
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from glmflash.checkpoint import load_model
from glmflash.config import PretrainConfig
from glmflash.config.evaluation import EvalConfig
from glmflash.data import ladder
from glmflash.evaluate.rungs import COMPETENCE_BAR as BAR
from glmflash.evaluate.rungs import MARGIN, clears_bar, evaluate_rungs, miss_chance, rung_tasks
from glmflash.model.lm import GLMFlash
from glmflash.pipeline import resumable
from glmflash.plots import pyplot, save
from glmflash.tokenizer import encode
from glmflash.train.pretrain import RUN, pretrain
from glmflash.train.schedule import Schedule, decay_start

RUNGS = (*ladder.RUNGS, "seed_neutral_names")  # the ladder, and one seed-family control
TABLE = "table.json"
CONFIRM_TASKS = EvalConfig().per_rung  # tasks per rung of the pipeline's confirm reading


def tokens_to_bar(points: Sequence[dict[str, Any]], bar: dict = BAR) -> int | None:
    """The fewest tokens among the points (each {"tokens", "rungs"}) that clear the bar."""
    cleared = [p["tokens"] for p in points if clears_bar(p["rungs"], bar)]
    return min(cleared) if cleared else None


def tokens_to_margin(
    points: Sequence[dict[str, Any]], n: int = CONFIRM_TASKS, bar: dict = BAR
) -> int | None:
    """The fewest tokens among the points whose reading would miss the bar on a fresh draw of
    `n` tasks per rung (the confirm reading) less than MARGIN of the time (`miss_chance`)."""
    kept = [p["tokens"] for p in points if miss_chance(p["rungs"], n, bar) < MARGIN]
    return min(kept) if kept else None


@torch.no_grad()
def body_loss(model: GLMFlash, rung: str, split: str, n: int, seed: int = 0) -> float:
    """Mean next-byte loss (nats) of the reference bodies of `n` tasks of `rung`, each read
    after its prompt and cut at the model's context: how far the model is from writing them,
    smoother than pass@1. NaN when no prompt fits the context."""
    was, device = model.training, next(model.parameters()).device
    model.eval()
    total, count = 0.0, 0
    for task in rung_tasks(rung, split, n, seed):
        prompt = encode(task.prompt, bos=True)
        ids = (prompt + encode(task.reference, eos=True))[: model.cfg.context + 1]
        if len(ids) <= len(prompt):
            continue
        x, y = torch.tensor([ids[:-1]], device=device), torch.tensor(ids[len(prompt) :])
        logits = model(x).logits[0, len(prompt) - 1 :].float().cpu()
        total += float(torch.nn.functional.cross_entropy(logits, y, reduction="sum"))
        count += len(y)
    model.train(was)
    return total / count if count else float("nan")


def branch_points(cfg: PretrainConfig, budgets: Sequence[int]) -> dict[int, int]:
    """budget -> the stable run's step that its decay branch starts from."""
    return {b: decay_start(Schedule.of(replace(cfg, steps=b))) for b in budgets}


def measure(
    cfg: PretrainConfig,
    budgets: Sequence[int],
    out: Path,
    model_options: dict[str, Any] | None = None,
    per_rung: int = 32,
    rungs: Sequence[str] = RUNGS,
    log: Callable[[str], None] = lambda m: print(m, file=sys.stderr),
    bar: dict = BAR,
) -> dict[str, Any]:
    """Train the stable run and its branches into `out`, evaluate every budget, and return the
    table row. Every piece is skipped once done, so an interrupted call resumes."""
    budgets = sorted(set(budgets))
    if not budgets or budgets[0] <= cfg.warmup:
        raise ValueError(f"--budgets needs step counts above the warm-up ({cfg.warmup} steps)")
    cfg = replace(cfg, schedule="wsd", steps=budgets[-1])
    starts = branch_points(cfg, budgets)
    saves = sorted({s for b, s in starts.items() if b != budgets[-1]} | {budgets[-1]})
    every = math.gcd(*saves)
    stable = replace(
        cfg, ckpt_every=every, keep_checkpoints=budgets[-1] // every + 1, eval_every=budgets[-1]
    )
    log(f"stable run to {budgets[-1]} steps, branches from steps {sorted(starts.values())}")
    summary = _train(stable, out / "stable", model_options, extend(out, stable))
    asked = {"per_rung": per_rung, "rungs": list(rungs)}
    points = []
    for budget in reversed(budgets):  # the stable run's own point first, then its branches
        if budget == budgets[-1]:
            run_dir, run_summary = out / "stable", summary
        else:
            run_dir = out / f"budget_{budget:06d}"
            source = checkpoint_at(out, starts[budget])
            branch = replace(cfg, steps=budget, eval_every=budget, ckpt_every=budget)
            finished = run_dir / "summary.json"  # a branch's, or an extended stable run's
            if (run_dir / "checkpoints" / f"step_{budget:06d}").is_dir() and finished.is_file():
                run_summary = json.loads(finished.read_text())
            else:
                run_summary = _train(branch, run_dir, model_options, source)
        point_file = run_dir / "point.json"
        if not point_file.is_file() or json.loads(point_file.read_text())["asked"] != asked:
            model, _ = load_model(run_dir / "checkpoints" / f"step_{budget:06d}")
            evals = evaluate_rungs(model, rungs, split="dev", per_rung=per_rung)
            point = {
                "asked": asked,
                "steps": budget,
                "tokens": budget * cfg.batch_size * cfg.seq_len,
                "dev_loss": run_summary.get("dev_loss"),
                "rungs": {r: list(c) for r, c in evals["greedy"].per_family.items()},
                "body_loss": {r: body_loss(model, r, "dev", per_rung) for r in rungs},
            }
            point_file.write_text(json.dumps(point, indent=2))
        points.insert(0, json.loads(point_file.read_text()))
        log(f"{budget} steps: {points[0]['rungs']}")
    record = json.loads((out / "stable" / RUN).read_text())
    judged = set(bar) <= set(rungs)  # a margin needs every rung of the bar read
    return {
        "seed": cfg.seed,
        "tokens_to_bar": tokens_to_bar(points, bar),
        "tokens_to_margin": tokens_to_margin(points, bar=bar) if judged else None,
        "miss_chance": [float(miss_chance(p["rungs"], CONFIRM_TASKS, bar)) for p in points]
        if judged
        else None,  # per point: the chance a confirm reading at its budget misses the bar
        "tokens_per_s": summary.get("tokens_per_s"),
        "machine": record.get("machines", [{}])[0],
        "pretrain": cfg.to_dict(),
        "model_options": model_options or {},
        "points": points,
    }


def extend(out: Path, stable: PretrainConfig) -> Path | None:
    """Where the stable run of `stable` starts when `out` already holds a shorter one: that run
    becomes its own budget's point (folder budget_N, as a branch would be), and the longer
    stable run continues from its last checkpoint before its decay, where both schedules are
    still at the stable learning rate (check_branch verifies that). The same answer on every
    call, so an interrupted extension resumes as a branch; None when nothing was extended.
    So asking for larger budgets costs only the steps not yet trained."""
    old = out / "stable" / RUN
    if old.is_file():
        steps = json.loads(old.read_text())["pretrain"]["steps"]
        if steps < stable.steps:  # (a longer one is refused by name when it resumes)
            (out / "stable").rename(out / f"budget_{steps:06d}")
    stable_ends = [
        (decay_start(Schedule.of(replace(stable, steps=int(d.name.removeprefix("budget_"))))), d)
        for d in out.glob("budget_*")
    ]
    found = [
        (step, d / "checkpoints" / f"step_{step:06d}")
        for limit, d in stable_ends
        for step in range(limit, 0, -1)
        if (d / "checkpoints" / f"step_{step:06d}").is_dir()
    ]
    return max(found)[1] if found else None


def checkpoint_at(out: Path, step: int) -> Path:
    """The stable run's checkpoint at `step`: in the stable run's folder, or, for a step before
    an extension (see `extend`), in the shorter stable run's."""
    for run_dir in (out / "stable", *sorted(out.glob("budget_*"))):
        path = run_dir / "checkpoints" / f"step_{step:06d}"
        if path.is_dir():
            return path
    return out / "stable" / "checkpoints" / f"step_{step:06d}"  # pretraining names it missing


def _train(
    cfg: PretrainConfig,
    run_dir: Path,
    model_options: dict[str, Any] | None,
    branch_from: Path | None = None,
) -> dict[str, Any]:
    """Run one pretraining run, or resume it from its last checkpoint (pretraining refuses a
    resume whose settings differ); a run killed before its first checkpoint starts afresh."""
    return pretrain(
        cfg,
        run_dir,
        resume=resumable(run_dir),
        model_overrides=model_options,
        branch_from=branch_from,
    )


def update_table(path: Path, name: str, row: dict[str, Any]) -> list[dict[str, Any]]:
    """Put `row` (named `name`) in the table file, replacing the row of the same name and
    seed; returns the table."""
    rows = json.loads(path.read_text()) if path.is_file() else []
    rows = [r for r in rows if (r["name"], r["seed"]) != (name, row["seed"])]
    rows.append({"name": name, **row})
    path.write_text(json.dumps(rows, indent=2))
    return rows


def plot_table(rows: list[dict[str, Any]], png: Path) -> None:
    """One panel per bar rung: pass@1 against tokens, a line per configuration and seed."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(BAR), figsize=(4 * len(BAR), 3.6), sharex=True)
    for ax, (rung, (_, share)) in zip(axes, BAR.items(), strict=True):
        for row in rows:
            xs = [p["tokens"] / 1e6 for p in row["points"]]
            ys = [100 * p["rungs"][rung][0] / p["rungs"][rung][1] for p in row["points"]]
            ax.plot(xs, ys, "o-", ms=3, label=f"{row['name']} s{row['seed']}")
        ax.axhline(100 * share, color="k", lw=0.8, ls="--")
        ax.set_title(rung.replace("_", " "))
        ax.set_xlabel("pretraining tokens (M)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("greedy pass@1, dev (%)")
    axes[-1].legend(fontsize=7)
    save(fig, png, dpi=110)
