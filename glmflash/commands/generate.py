"""`glmflash generate`: complete prompts with a checkpoint, greedy or sampled."""

from __future__ import annotations

import argparse

from glmflash.checkpoint import CheckpointError, load_model
from glmflash.device import resolve_device
from glmflash.errors import CLIError
from glmflash.generate import generate


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--prompt", required=True, action="append", help="may be given several times")
    p.add_argument("--samples", type=int, default=1, help="completions per prompt")
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto")


def run(args: argparse.Namespace) -> int:
    try:
        model, _ = load_model(args.checkpoint, resolve_device(args.device))
    except (CheckpointError, ValueError) as e:
        raise CLIError(str(e)) from None
    prompts = [p.encode().decode("unicode_escape") for p in args.prompt]  # allow "\n" escapes
    outs = generate(
        model,
        [p for p in prompts for _ in range(args.samples)],
        args.max_new_tokens,
        args.temperature,
        args.top_p,
        args.seed,
    )
    for i, c in enumerate(outs):
        print(f"--- prompt {i // args.samples} sample {i % args.samples} (stop: {c.stop})")
        print(prompts[i // args.samples] + c.text)
    return 0
