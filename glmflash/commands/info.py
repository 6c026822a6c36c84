"""`glmflash info`: total and active parameters per component, the layer pattern, the options
(counted from the config alone by `glmflash.info`, so no torch)."""

from __future__ import annotations

import argparse
import json

from glmflash.config import PRESETS, ConfigError, model_config
from glmflash.errors import CLIError
from glmflash.info import COMPONENTS, parameter_counts


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="25m", help=f"one of {', '.join(PRESETS)}")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    try:
        cfg = model_config(args.preset)
    except ConfigError as e:
        raise CLIError(str(e)) from None
    counts = parameter_counts(cfg)
    if args.json:
        print(
            json.dumps(
                {
                    "preset": args.preset,
                    "layer_kinds": cfg.layer_kinds,
                    "parameters": counts,
                    "config": cfg.to_dict(),
                }
            )
        )
        return 0
    print(
        f"glmflash preset {args.preset}: {counts['total']['all'] / 1e6:.2f}M parameters, "
        f"{counts['active']['all'] / 1e6:.2f}M active per token"
    )
    print(
        f"layers: {cfg.layer_kinds} (L = {cfg.linear_kind} linear attention, "
        f"S = {cfg.sparse_kind} sparse attention)"
    )
    print(f"{'component':<16}{'total':>12}{'active':>12}")
    for c in (*COMPONENTS, "all"):
        if counts["total"][c] or c == "all":
            print(f"{c:<16}{counts['total'][c]:>12,}{counts['active'][c]:>12,}")
    opts = ", ".join(f"{k}={v}" for k, v in cfg.to_dict().items())
    print(f"options: {opts}")
    return 0
