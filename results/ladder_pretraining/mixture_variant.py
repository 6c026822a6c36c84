"""Pretrain with another ladder mixture (the pipeline's pretraining settings otherwise):

    python results/ladder_pretraining/mixture_variant.py NAME EXPRESSION_SHARE D1 D2 D3 \
        [LADDER_SHARE]

EXPRESSION_SHARE: share of ladder documents whose body is one expression (the rest step by
step); D1-D3: the depths of their structures; LADDER_SHARE: the ladder's share of the tasks
corpus. Writes runs/NAME; evaluate it with the default constants (a fresh process), so that
the confirm tasks are those of the pipeline:
    glmflash eval --checkpoint runs/NAME/checkpoints/step_000160 --rungs all --per-rung 32 \
        --split confirm --mode sample --out NAME_eval.json
"""

import sys

from glmflash.cli import main
from glmflash.data import ladder, stream

name, expr = sys.argv[1], float(sys.argv[2])
d1, d2, d3 = map(float, sys.argv[3:6])
ladder.EXPRESSION_SHARE = expr
ladder.DOCUMENT_DEPTHS = {1: d1, 2: d2, 3: d3}
stream.LADDER_SHARE = float(sys.argv[6]) if len(sys.argv) > 6 else stream.LADDER_SHARE
sys.exit(
    main(
        [
            "pretrain",
            "--preset",
            "25m",
            "--out",
            f"runs/{name}",
            "--steps",
            "160",
            "--batch-size",
            "32",
            "--seq-len",
            "128",
            "--lr",
            "2e-3",
            "--warmup",
            "10",
            "--eval-every",
            "40",
            "--ckpt-every",
            "40",
            "--eval-tasks",
            "0",
            "--seed",
            "0",
            "--optimizer",
            "muon",
            "--corpus",
            "tasks",
        ]
    )
)
