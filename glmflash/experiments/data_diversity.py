"""Data diversity: does training on more distinct structures generalise better to unseen ones?

The small model (small_lm.py, 253K parameters) trains on compositions of either 8 structures
repeated or all 88 training structures, for 50, 100 or 200 updates: each length is its own
run with its own warmup + cosine schedule. Metric: teacher-forced byte accuracy on the answers
of the 32 held-out structures (greedy exact match beside it). Seed k gives both arms the same
initial weights and the same evaluation set. The reference lab found no gain at 50 updates
and +3.2 points at 200 (60.2% vs 57.0%, p = 0.0137, 10 paired seeds).
"""

from __future__ import annotations

import dataclasses

from glmflash.experiments.registry import Experiment, register
from glmflash.experiments.small_lm import SmallRun, train_and_evaluate

LENGTHS = (50, 100, 200)
ARMS = ("repeated", "diverse")

EXPERIMENT = register(
    Experiment(
        name="data-diversity",
        description=(
            "8 repeated vs 88 diverse training structures at 50, 100 and 200 updates; "
            "held-out-structure answer byte accuracy (teacher forced) and greedy exact "
            "match, 10 paired seeds."
        ),
        conditions={
            f"{arm}@{n}": dataclasses.asdict(SmallRun(schedule=arm, steps=n))
            for n in LENGTHS
            for arm in ARMS
        },
        seeds=tuple(range(10)),
        run=train_and_evaluate,
        metric="heldout_byte_acc",
        secondary=("heldout_exact", "seen_byte_acc"),
        comparisons=[(f"repeated@{n}", f"diverse@{n}") for n in LENGTHS],
        quick={"scale": 0.25},
        quick_seeds=(0, 1, 2),
    )
)
