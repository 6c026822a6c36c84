"""`glmflash experiment NAME --out DIR`: run an experiment's grid of conditions x seeds, then
write its report (see glmflash.experiments.registry for how to define one)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from glmflash.errors import CLIError
from glmflash.experiments import registry
from glmflash.experiments.report import ReportError, write_report
from glmflash.experiments.runner import RunnerError, run_experiment
from glmflash.flags import split_setting


def parse_seeds(text: str) -> tuple[int, ...]:
    """'0,1,2' or '0-9' or a mix ('0-4,7') -> distinct seeds in the order given."""
    seeds: list[int] = []
    try:
        for part in text.split(","):
            lo, sep, hi = part.strip().partition("-")
            seeds += range(int(lo), int(hi) + 1) if sep and lo else [int(part)]
    except ValueError:
        raise ValueError(f"bad --seeds {text!r}: expected e.g. 0,1,2 or 0-9") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"bad --seeds {text!r}: seeds must be distinct and non-empty")
    return tuple(seeds)


def parse_settings(items: list[str]) -> dict[str, Any]:
    """['init=runs/x', 'groups=24'] -> {'init': 'runs/x', 'groups': 24}, split as every
    KEY=VALUE is (`flags.split_setting`). An experiment's conditions are plain dicts, not typed
    configs, so each value is read as JSON when it parses (numbers, true, null, lists), as a
    plain string otherwise; the condition's own code validates it."""
    settings: dict[str, Any] = {}
    for item in items:
        try:
            key, text = split_setting(item)
        except ValueError as e:
            raise ValueError(f"bad --set: {e}") from None
        try:
            settings[key] = json.loads(text)
        except json.JSONDecodeError:
            settings[key] = text
    return settings


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="the experiment, e.g. data-diversity or curriculum")
    p.add_argument("--out", required=True, help="results folder; runs go to OUT/NAME/runs")
    p.add_argument(
        "--seeds",
        default=None,
        help="paired seeds, e.g. 0,1,2 or 0-9 (default: the experiment's own)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="worker processes, one thread each (default 1: in this process)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="skip runs already finished in OUT/NAME; retry failed ones",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a short check of the pipeline: fewer seeds, shortened runs",
    )
    p.add_argument(
        "--module",
        action="append",
        default=[],
        metavar="MODULE_OR_FILE",
        help="import this module or .py file first, for the experiments it defines",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="replace a setting of every condition, e.g. --set init=runs/ckpt",
    )
    p.add_argument(
        "--backend",
        choices=("local", "ray"),
        default="local",
        help="local: this machine's processes; ray: one Ray task per run "
        "(extra [ray]), on a local instance or the cluster at --address",
    )
    p.add_argument(
        "--address",
        default=None,
        help="Ray cluster address (e.g. HEAD_IP:6379 after `ray start --head`)",
    )
    p.add_argument(
        "--gpus-per-run",
        type=float,
        default=0.0,
        help="GPUs each Ray task reserves (default 0: one CPU each)",
    )
    p.add_argument("--no-report", action="store_true", help="do not write the report")


def run(args: argparse.Namespace) -> int:
    try:
        for module in args.module:
            registry.load_module(module)
        experiment = registry.get(args.name)
        seeds = parse_seeds(args.seeds) if args.seeds else None
        summary = run_experiment(
            experiment,
            Path(args.out),
            seeds=seeds,
            workers=args.workers,
            resume=args.resume,
            quick=args.quick,
            overrides=parse_settings(args.set),
            backend=args.backend,
            address=args.address,
            gpus_per_run=args.gpus_per_run,
        )
        if not args.no_report:
            print(write_report(summary.folder))
    except (RunnerError, ReportError, ValueError) as e:
        raise CLIError(str(e)) from None
    if summary.failed:
        print(
            f"{summary.failed} run(s) failed; see the 'error' field of their files under "
            f"{summary.folder / 'runs'}; rerun with --resume to retry them"
        )
        return 1
    return 0
