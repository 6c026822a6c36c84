"""`glmflash pipeline`: random weights -> pretrain -> RL -> vision -> report, in one command
(the stages and their folders: `glmflash.pipeline`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from glmflash.checkpoint import CheckpointError
from glmflash.config import PipelinePlan
from glmflash.errors import CLIError
from glmflash.flags import with_setting
from glmflash.pipeline import Pipeline
from glmflash.train.runlog import TrainError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="25m", choices=("25m", "tiny"))
    p.add_argument("--out", default="runs/pipeline")
    p.add_argument("--device", default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--quick",
        action="store_true",
        help="the same stages on the tiny preset, with minimal budgets (about a minute)",
    )
    p.add_argument(
        "--one-process",
        action="store_true",
        help="run every stage in this process, not each in a fresh one (for a debugger or a "
        "profiler; the later stages then run slower)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="STAGE.FIELD=VALUE",
        help="change one setting of the plan, e.g. --set rl.lr=3e-4 --set "
        "pretrain.steps=200 --set evaluation.sampling.samples=16 (recorded in OUT/plan.json)",
    )


def plan_from_args(args: argparse.Namespace) -> PipelinePlan:
    """The full or quick plan with the --set changes applied in order."""
    plan = (
        PipelinePlan.quick(args.seed)
        if args.quick or args.preset == "tiny"
        else PipelinePlan.full(args.seed)
    )
    for item in args.set:
        path, sep, value = item.partition("=")
        if not sep or not path.strip():
            raise ValueError(f"bad --set {item!r}: expected STAGE.FIELD=VALUE")
        plan = with_setting(plan, path.strip(), value.strip())
    return plan


def run(args: argparse.Namespace) -> int:
    try:
        plan = plan_from_args(args)
        results = Pipeline(args.out, plan, args.device, fresh_processes=not args.one_process).run()
    except (TrainError, CheckpointError, ValueError) as e:
        raise CLIError(str(e)) from None
    data = results.to_json()
    rl = {k: v for k, v in data["rl"].items() if k != "per_family"}
    summary = {"out": args.out, "wall_seconds": results.wall_seconds, "rl": rl}
    print(json.dumps({**summary, "vision": data["vision"]}))
    print(f"report: {Path(args.out) / 'report.md'}", file=sys.stderr)
    return 0
