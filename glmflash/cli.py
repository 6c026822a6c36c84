"""The `glmflash` command line. Each subcommand lives in its own module, imported on use.

Command NAME is the module `glmflash.commands.NAME`, which exposes `add_arguments(parser)` and
`run(args) -> int`; register it in COMMANDS below. Errors meant for the user are raised as
`CLIError` and printed as one line.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from glmflash.errors import CLIError  # re-exported: commands raise it, main prints it

COMMANDS: dict[str, str] = {
    # name (the module glmflash.commands.<name>): one-line help
    "pipeline": "random weights -> pretrain -> RL -> vision -> report",
    "info": "parameter counts per component, layer pattern and options",
    "verify": "check candidate code against a task's hidden cases",
    "generate": "complete prompts with a checkpoint",
    "export": "a checkpoint as a Hugging Face folder (trust_remote_code)",
    "eval": "greedy pass@1 or sampled pass@k on a task split",
    "rl": "RLOO post-training against the sandboxed verifier",
    "vision": "teach the model to read rendered digits",
    "experiment": "run a built-in experiment over paired seeds",
    "report": "Markdown report with statistics and plots",
    "bench": "benchmarks against naive baselines, as ratios",
    "pretrain": "pretrain from random weights on the synthetic corpus",
    "competence": "pretraining tokens until the task ladder clears the competence bar",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or with `only`, of that command alone: a command's module
    is imported just to add its arguments, so `glmflash verify` never loads torch."""
    parser = argparse.ArgumentParser(prog="glmflash", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, help_text in COMMANDS.items():
        module = f"glmflash.commands.{name}"
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        if only is None or name == only:
            importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    chosen = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(chosen if chosen in COMMANDS else "")
    args = parser.parse_args(argv)
    try:
        return int(importlib.import_module(args._module).run(args) or 0)
    except CLIError as err:
        print(f"glmflash {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"glmflash {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
