"""A training run's folder and logs: metrics as JSON lines (appended as they are made, trimmed
back to a checkpoint on resume), the machine each part of a run trained on, and the dtypes the
run chose at its first start, which a resume reads back (`run_autocast`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from glmflash.device import autocast_dtype
from glmflash.flags import changed_settings
from glmflash.train.distributed import DistInfo, all_reduce_mean

METRICS = "metrics.jsonl"


class TrainError(RuntimeError):
    """A problem with the run's inputs or its output folder, for the user to fix."""


def check_resume(run_file: Path, settings: dict[str, Any]) -> None:
    """Refuse a resume unless `run_file` exists and records the same `settings` (its sections,
    e.g. {"rl": ...}; the file's other entries, such as the machines, may differ), naming
    every setting that changed."""
    out = run_file.parent
    if not run_file.is_file():
        raise TrainError(f"nothing to resume in {out}: {run_file} not found")
    saved = json.loads(run_file.read_text())
    diff = changed_settings({k: saved.get(k, {}) for k in settings}, settings)
    if diff:
        raise TrainError(
            f"--resume with settings that differ from the run in {out}: {', '.join(diff)}"
        )


def append_jsonl(path: Path, row: dict[str, Any]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                yield json.loads(line)


def trim_metrics(path: Path, step: int) -> None:
    """Drop metric rows past `step` (written after the checkpoint a resume starts from)."""
    if path.is_file():
        rows = [r for r in read_jsonl(path) if r.get("step", 0) <= step]
        tmp = path.with_suffix(".tmp")  # a kill mid-write must not lose the kept rows
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tmp.replace(path)


def note_machine(run_file: Path, start_step: int, machine: dict[str, Any]) -> None:
    """Add the machine this (part of the) run trains on to run.json's `machines`, with the step
    it starts from, so every timing in metrics.jsonl can be traced to its CPU."""
    record = json.loads(run_file.read_text())
    record.setdefault("machines", []).append({"start_step": start_step, **machine})
    tmp = run_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2))
    tmp.replace(run_file)


def recorded_dtypes(run_file: Path) -> dict[str, torch.dtype | None]:
    """The dtypes the run recorded in `run_file` chose at its first start: "autocast" (None for
    none) and Muon's "newton_schulz", where recorded; {} for a run not yet started."""
    machines = json.loads(run_file.read_text()).get("machines", []) if run_file.is_file() else []
    if not machines:
        return {}
    dtypes = machines[0]["dtypes"]
    return {k: None if v == "none" else getattr(torch, v) for k, v in dtypes.items()}


def run_autocast(
    dev: torch.device, precision: str, chosen: dict[str, torch.dtype | None], dist: DistInfo
) -> torch.dtype | None:
    """The run's autocast dtype. `auto` is decided once per run, at its first start (bf16 only
    where every rank measured it fast), and read back (`chosen`, from run.json) when the run
    resumes or a branch continues it: a calibration taken on a busy machine cannot switch a
    run's precision half-way."""
    if precision != "auto":
        return autocast_dtype(dev, precision)
    if "autocast" in chosen:
        return chosen["autocast"]
    amp = autocast_dtype(dev, "auto")
    fast = torch.tensor(float(amp is not None), device=dev)
    return amp if float(all_reduce_mean(fast, dist)) == 1.0 else None


__all__ = [
    "METRICS",
    "TrainError",
    "append_jsonl",
    "note_machine",
    "read_jsonl",
    "recorded_dtypes",
    "run_autocast",
    "trim_metrics",
]
