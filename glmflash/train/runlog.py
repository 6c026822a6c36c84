"""A training run's folder and logs: metrics as JSON lines (appended as they are made, trimmed
back to a checkpoint on resume) and the machine each part of a run trained on."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from glmflash.flags import changed_settings

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


__all__ = ["METRICS", "TrainError", "append_jsonl", "note_machine", "read_jsonl", "trim_metrics"]
