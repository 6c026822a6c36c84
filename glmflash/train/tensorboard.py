"""TensorBoard event files beside every run's metrics.jsonl: `tensorboard --logdir runs`.

metrics.jsonl stays the record; the events repeat its numeric fields as scalars with the
row's step as the x-axis (rows that carry a "stage", as vision's do, are tagged
"<stage>/<field>"). Written only where the `tensorboard` package is installed (the extra
`[tensorboard]`); elsewhere `Scalars` does nothing, so training never depends on it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


class Scalars:
    """A run folder's TensorBoard writer. On resume from step s, `purge_step=s` hides the
    events a killed run wrote past s, as trim_metrics drops those rows from metrics.jsonl;
    `fresh` removes old event files of a run that starts over."""

    def __init__(self, folder: Path, purge_step: int | None = None, fresh: bool = False):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # tensorboard not installed: metrics.jsonl alone
            self.writer = None
            return
        if fresh:
            for old in Path(folder).glob("events.out.tfevents.*"):
                old.unlink()
        self.writer = SummaryWriter(str(folder), purge_step=purge_step or None)

    def add(self, row: dict[str, Any], step_key: str = "step") -> None:
        if self.writer is None:
            return
        prefix = f"{row['stage']}/" if "stage" in row else ""
        for key, value in row.items():
            if key in (step_key, "stage") or isinstance(value, bool):
                continue
            if isinstance(value, (int, float)) and math.isfinite(value):
                self.writer.add_scalar(prefix + key, value, int(row[step_key]))
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def write_curves(folder: Path, metrics: dict[str, Any]) -> None:
    """An experiment run's learning curves ({name: [[step, value], ...]}) and its final
    figures (tagged final/<name>, at the last step) as events in `folder`."""
    curves = metrics.get("curves") or {}
    last = max((int(s) for points in curves.values() for s, _ in points), default=0)
    scalars = Scalars(folder, fresh=True)
    try:
        for name, points in curves.items():
            for step, value in points:
                scalars.add({"step": step, name: value})
        scalars.add(
            {"step": last, **{f"final/{k}": v for k, v in metrics.items() if k != "curves"}}
        )
    finally:
        scalars.close()
