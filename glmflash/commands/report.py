"""`glmflash report DIR`: statistics, a Markdown report and plots for each experiment in DIR
(`experiments.report`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from glmflash.errors import CLIError
from glmflash.experiments.report import ALPHA, ReportError, experiment_folders, write_report
from glmflash.experiments.runner import DEFINITION, RUNS


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", help="an experiment's --out folder (or one experiment's folder)")
    p.add_argument("--alpha", type=float, default=ALPHA, help=f"default {ALPHA}")


def run(args: argparse.Namespace) -> int:
    folders = experiment_folders(Path(args.dir))
    if not folders:
        raise CLIError(
            f"no experiment found in {args.dir} (no {DEFINITION} in it or in its subfolders)"
        )
    if not 0 < args.alpha < 1:
        raise CLIError(f"--alpha must lie in (0, 1), got {args.alpha}")
    for folder in folders:
        if not any((folder / RUNS).glob("*.json")):  # a committed report stays as it is
            if len(folders) == 1:
                raise CLIError(f"{folder}: no runs under {RUNS}/ to report on")
            print(f"skipped {folder}: no runs under {RUNS}/", file=sys.stderr)
            continue
        try:
            print(write_report(folder, args.alpha))
        except (ReportError, KeyError, ValueError) as e:
            raise CLIError(f"{folder}: {e}") from None
    return 0
