"""`glmflash eval`: greedy pass@1 or sampled pass@k of a checkpoint, on task families, on the
task ladder's rungs (--rungs), or on your own tasks or HumanEval (--tasks, --benchmark)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from glmflash.checkpoint import CheckpointError, load_model
from glmflash.config.evaluation import Sampling
from glmflash.data.code_tasks import FAMILIES, CodeTask, tasks
from glmflash.device import resolve_device
from glmflash.errors import CLIError
from glmflash.evaluate.coding import evaluate_tasks
from glmflash.evaluate.rungs import evaluate_rungs, parse_rungs, rung_table
from glmflash.evaluate.user_tasks import evaluate_saved, humaneval_tasks, load_tasks
from glmflash.flags import add_config_flags, given


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--split", choices=("dev", "rl", "confirm"), default="dev")
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--per-family", type=int, default=8)
    p.add_argument(
        "--rungs",
        nargs="?",
        const="all",
        default=None,
        help="evaluate the task ladder per rung instead of the families: `all` "
        "(the default when the flag is given alone) or names separated by "
        "commas; greedy pass@1 and, with --mode sample, sampled pass@k",
    )
    p.add_argument("--per-rung", type=int, default=24, help="tasks per rung")
    p.add_argument(
        "--tasks",
        default=None,
        metavar="FILE.jsonl",
        help="evaluate your own tasks: one JSON object a line, {prompt, entry_point, "
        "cases: [{args, expected}] or test: 'def check(candidate): ...', "
        "group}; scores per group and overall (needs --out)",
    )
    p.add_argument(
        "--benchmark",
        choices=("humaneval",),
        default=None,
        help="HumanEval's 164 problems through the sandbox (extra [humaneval]; needs --out)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="with --tasks or --benchmark: skip the tasks whose records --out already holds",
    )
    add_config_flags(p, Sampling)  # --seed also draws the tasks
    p.add_argument("--device", default="auto")
    p.add_argument("--out", default=None, help="JSON file for every prompt, completion, verdict")


def run_user_tasks(
    model, todo: list[CodeTask], sampling: Sampling, args: argparse.Namespace
) -> dict[str, Any]:
    """--tasks FILE or --benchmark humaneval: records beside --out (OUT.records.jsonl), saved as
    they are made, so --resume evaluates nothing twice."""
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    records = out.with_suffix(".records.jsonl")
    summary = evaluate_saved(model, todo, records, args.resume, sampling)
    return {
        "checkpoint": str(args.checkpoint),
        "tasks": args.tasks or args.benchmark,
        **summary,
        "records": str(records),
    }


def run(args: argparse.Namespace) -> int:
    if args.tasks and args.benchmark:
        raise CLIError("give --tasks or --benchmark, not both")
    if args.resume and not (args.tasks or args.benchmark):
        raise CLIError("--resume applies to --tasks and --benchmark")
    try:
        sampling = Sampling(**given(Sampling, args))
        rungs = parse_rungs(args.rungs) if args.rungs is not None else None
        if args.tasks or args.benchmark:
            if not args.out:
                raise ValueError(
                    "--tasks and --benchmark need --out FILE.json (records are "
                    "saved beside it as they are made)"
                )
            todo = load_tasks(args.tasks) if args.tasks else humaneval_tasks()
            model, _ = load_model(args.checkpoint, resolve_device(args.device))
            summary = run_user_tasks(model, todo, sampling, args)
            Path(args.out).write_text(json.dumps(summary, indent=2))
            print(json.dumps(summary))
            return 0
        model, _ = load_model(args.checkpoint, resolve_device(args.device))
        if rungs is not None:
            results = evaluate_rungs(model, rungs, args.split, args.per_rung, sampling)
        else:
            todo = tasks(
                args.split,
                [f for f in args.families.split(",") if f],
                per_family=args.per_family,
                seed=sampling.seed,
            )
            result = evaluate_tasks(model, todo, sampling)
    except (CheckpointError, ValueError, FileNotFoundError) as e:
        raise CLIError(str(e)) from None
    if rungs is not None:
        data = {
            "checkpoint": str(args.checkpoint),
            "split": args.split,
            "rungs": rung_table(results),
            **{mode: r.to_json() for mode, r in results.items()},
        }
        summary = {k: v for k, v in data.items() if k not in ("greedy", "sampled")}
    else:
        data = {"checkpoint": str(args.checkpoint), "split": args.split, **result.to_json()}
        summary = {k: v for k, v in data.items() if k != "records"}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(data, indent=2))
    print(json.dumps(summary))
    return 0
