"""`glmflash pretrain`: pretrain from random weights on the synthetic corpus (`train.pretrain`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from glmflash.checkpoint import CheckpointError
from glmflash.config import ConfigError, ModelConfig, PretrainConfig, model_config
from glmflash.errors import CLIError
from glmflash.flags import add_config_flags, given
from glmflash.train.pretrain import RUN, pretrain
from glmflash.train.runlog import TrainError


def parse_model_options(items: list[str]) -> dict[str, Any]:
    """KEY=VALUE strings -> typed model overrides (types from ModelConfig's defaults)."""
    defaults = ModelConfig().to_dict()
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in defaults:
            raise TrainError(
                f"bad --model-option {item!r}: expected KEY=VALUE with KEY one of "
                f"{', '.join(defaults)}"
            )
        kind = type(defaults[key])
        try:
            out[key] = (value.lower() in ("1", "true", "yes")) if kind is bool else kind(value)
        except ValueError:
            raise TrainError(
                f"bad --model-option {item!r}: {key} needs a {kind.__name__}"
            ) from None
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="run folder (checkpoints, metrics, plots)")
    add_config_flags(p, PretrainConfig)
    p.add_argument("--device", default="auto", help="auto | cpu | mps | cuda")
    p.add_argument(
        "--model-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a model config field, e.g. linear_kind=delta",
    )
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
        overrides = parse_model_options(args.model_option)
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
