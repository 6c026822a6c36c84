"""`glmflash rl`: RLOO (or another policy-gradient algorithm) from a checkpoint, against the
sandboxed verifier (`train.rl`)."""

from __future__ import annotations

import argparse
import json

from glmflash.checkpoint import CheckpointError
from glmflash.config import RLConfig
from glmflash.errors import CLIError
from glmflash.flags import add_config_flags, given
from glmflash.train.rl import train_rl
from glmflash.train.runlog import TrainError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--init", required=True, help="checkpoint folder to start from")
    p.add_argument("--out", required=True)
    add_config_flags(p, RLConfig)
    p.add_argument("--device", default="auto")
    p.add_argument("--resume", action="store_true")


def config_from_args(args: argparse.Namespace) -> RLConfig:
    return RLConfig(**given(RLConfig, args))


def run(args: argparse.Namespace) -> int:
    try:
        cfg = config_from_args(args)
        summary = train_rl(args.init, args.out, cfg, args.device, args.resume)
    except (ValueError, TrainError, CheckpointError) as e:
        raise CLIError(str(e)) from None
    print(json.dumps(summary))
    return 0
