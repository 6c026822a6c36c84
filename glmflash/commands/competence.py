"""`glmflash competence`: pretraining tokens until the task ladder clears the competence bar,
one configuration at several budgets, as a row of OUT/table.json (`experiments.competence`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from glmflash.commands.pretrain import add_model_option_alias, model_overrides
from glmflash.config import ConfigError, PipelinePlan
from glmflash.errors import CLIError
from glmflash.experiments.competence import TABLE, measure, plot_table, update_table
from glmflash.flags import split_setting, with_setting
from glmflash.train.runlog import TrainError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="folder of table.json and its figure")
    p.add_argument(
        "--runs",
        default="runs/competence",
        help="folder of the training runs (checkpoints: large), one NAME_sSEED folder each",
    )
    p.add_argument("--name", required=True, help="the configuration's row name")
    p.add_argument("--budgets", required=True, help="step counts, comma-separated")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a pretraining setting changed from the pipeline's plan, e.g. lr=4e-3, or a model "
        "option changed from the preset, e.g. model.linear_kind=delta",
    )
    add_model_option_alias(p)
    p.add_argument("--per-rung", type=int, default=32, help="dev tasks per rung")


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    try:
        plan = PipelinePlan.full(args.seed)
        model = [item for item in args.set if item.startswith("model.")]
        for item in args.set:
            if item not in model:
                key, value = split_setting(item)
                plan = with_setting(plan, f"pretrain.{key}", value)
        budgets = [int(b) for b in args.budgets.split(",") if b.strip()]
        options = model_overrides(model, args.model_option)
        row = measure(
            plan.pretrain,
            budgets,
            Path(args.runs) / f"{args.name}_s{args.seed}",
            options,
            args.per_rung,
        )
    except (ConfigError, TrainError, ValueError) as e:
        raise CLIError(str(e)) from None
    rows = update_table(out / TABLE, args.name, row)
    plot_table(rows, out / "tokens_to_bar.png")
    keys = ("tokens_to_bar", "tokens_to_margin")
    print(json.dumps({"name": args.name, "seed": args.seed, **{k: row[k] for k in keys}}))
    return 0
