"""`glmflash export`: a checkpoint as a self-contained Hugging Face folder (`export.hf`)."""

from __future__ import annotations

import argparse

from glmflash.checkpoint import CheckpointError
from glmflash.errors import CLIError
from glmflash.export.hf import ExportError, export_hf


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", required=True, help="a checkpoint folder")
    p.add_argument("--out", required=True, help="the Hugging Face folder to write")
    p.add_argument("--force", action="store_true", help="replace --out if it is not empty")


def run(args: argparse.Namespace) -> int:
    try:
        out = export_hf(args.checkpoint, args.out, args.force)
    except (CheckpointError, ExportError) as e:
        raise CLIError(str(e)) from None
    print(
        f"wrote {out}: AutoModelForCausalLM.from_pretrained({str(out)!r}, "
        f"trust_remote_code=True) (needs transformers: pip install 'glmflash[hf]')"
    )
    return 0
