"""`glmflash vision`: teach the language model to read rendered digits (`train.vision`)."""

from __future__ import annotations

import argparse
import json
import sys

from glmflash.checkpoint import CheckpointError
from glmflash.config import ConfigError, VisionConfig, VisionTrainError
from glmflash.errors import CLIError
from glmflash.flags import add_config_flags, given
from glmflash.train.vision import train_vision


def add_arguments(p: argparse.ArgumentParser) -> None:
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--init", metavar="CHECKPOINT", help="start from this LM checkpoint")
    source.add_argument(
        "--from-scratch",
        action="store_true",
        help="start from a randomly initialised LM of --preset",
    )
    p.add_argument("--out", required=True, help="output folder")
    add_config_flags(p, VisionConfig)
    p.add_argument("--device", default="auto", help="auto | cpu | mps | cuda")


def run(args: argparse.Namespace) -> int:
    if args.preset is not None and args.init is not None:
        raise CLIError("--preset applies only with --from-scratch (the checkpoint has its own)")
    try:
        results = train_vision(
            args.out, VisionConfig(**given(VisionConfig, args)), init=args.init, device=args.device
        )
    except (VisionTrainError, CheckpointError, ConfigError, ValueError) as e:
        raise CLIError(str(e)) from None
    keys = (
        "heldout_correct",
        "far_correct",
        "train_correct",
        "trainable_parameters",
        "train_seconds",
        "wall_seconds",
    )
    print(json.dumps({k: results[k] for k in keys}), file=sys.stdout)
    return 0
