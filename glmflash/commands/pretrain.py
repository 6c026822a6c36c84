"""`glmflash pretrain`: pretrain from random weights on the synthetic corpus (`train.pretrain`)."""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path
from typing import Any

from glmflash.checkpoint import CheckpointError
from glmflash.config import ConfigError, ModelConfig, PretrainConfig, model_config
from glmflash.errors import CLIError
from glmflash.flags import add_config_flags, field_value, given, split_setting
from glmflash.train.pretrain import RUN, pretrain
from glmflash.train.runlog import TrainError


def model_overrides(settings: list[str], model_options: list[str]) -> dict[str, Any]:
    """model.KEY=VALUE settings (and --model-option KEY=VALUE, the older spelling, with a
    warning) -> typed ModelConfig overrides."""
    items = []
    for item in settings:
        key, value = split_setting(item)
        if not key.startswith("model."):
            raise ValueError(f"expected model.KEY=VALUE, got {item!r}")
        items.append((key.removeprefix("model."), value))
    if model_options:
        warnings.warn("--model-option KEY=VALUE is now --set model.KEY=VALUE", stacklevel=1)
        items += [split_setting(item) for item in model_options]
    return {key: field_value(ModelConfig, key, value) for key, value in items}


def add_model_option_alias(p: argparse.ArgumentParser) -> None:
    """--model-option KEY=VALUE, the older spelling of --set model.KEY=VALUE."""
    p.add_argument(
        "--model-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="the older spelling of --set model.KEY=VALUE",
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="run folder (checkpoints, metrics, plots)")
    add_config_flags(p, PretrainConfig)
    p.add_argument("--device", default="auto", help="auto | cpu | mps | cuda")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="model.KEY=VALUE",
        help="a model option changed from the preset, e.g. --set model.linear_kind=delta",
    )
    add_model_option_alias(p)
    p.add_argument(
        "--resume", action="store_true", help="continue the run in --out from its latest checkpoint"
    )
    p.add_argument(
        "--branch-from",
        metavar="CHECKPOINT",
        help="start from another run's training checkpoint (a wsd decay branch)",
    )


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    base: dict[str, Any] = {}
    branch_from = args.branch_from
    try:
        overrides = model_overrides(args.set, args.model_option)
        if args.resume and (out / RUN).is_file():
            saved = json.loads((out / RUN).read_text())
            base = saved["pretrain"]
            branch_from = branch_from or saved.get("branch_from")
            preset_model = model_config(saved["pretrain"]["preset"]).to_dict()
            overrides = {
                **{
                    k: v
                    for k, v in saved["model"].items()
                    if preset_model.get(k) != v and k != "context"
                },
                **overrides,
            }
        cfg = PretrainConfig(**{**base, **given(PretrainConfig, args)})
        summary = pretrain(
            cfg,
            out,
            device=args.device,
            resume=args.resume,
            model_overrides=overrides,
            branch_from=branch_from,
        )
    except (TrainError, ConfigError, CheckpointError, ValueError) as e:
        raise CLIError(str(e)) from None
    print(
        json.dumps(
            {
                k: summary.get(k)
                for k in ("steps", "loss", "dev_loss", "dev_pass1", "tokens_per_s", "wall_seconds")
            }
        )
    )
    return 0
