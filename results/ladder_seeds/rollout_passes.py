"""Where RL's reward comes from: per RL run, the groups (one prompt, its samples) and the
rollouts that passed, split into the seed families and the ladder's RL structures.

    .venv/bin/python results/ladder_seeds/rollout_passes.py [--name NAME] RUN_DIR [RUN_DIR ...]

Each RUN_DIR is a `glmflash rl` output folder (its rollouts.jsonl holds every sample). A group
in which nothing passes gives RLOO no signal about correctness (only about validity, through
the -0.1 of invalid programs), so the share of groups with a pass says what RL can learn.
Then where the steps' time went: the mean seconds of sampling, verification and update per
RL step over all the runs (from their metrics.jsonl; steps logged before those timings
existed are left out).
Writes rollout_passes.md (or NAME.md) next to this file.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

from glmflash.pipeline import TRAINED

HERE = Path(__file__).parent


def count(run: Path) -> dict[str, list[int]]:
    """kind -> [groups, groups with a pass, rollouts, passes]."""
    groups: dict[tuple[int, str], list[dict]] = defaultdict(list)
    with open(run / "rollouts.jsonl") as f:
        for line in f:
            r = json.loads(line)
            groups[(r["step"], r["task"])].append(r)
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for rollouts in groups.values():
        kind = "seed families" if rollouts[0]["family"] in TRAINED else "ladder RL structures"
        passes = sum(r["status"] == "pass" for r in rollouts)
        row = out[kind]
        row[0] += 1
        row[1] += passes > 0
        row[2] += len(rollouts)
        row[3] += passes
    return out


def step_phases(runs: list[str]) -> dict[str, float]:
    """Mean sample/verify/update seconds per RL step over the runs' logged steps."""
    rows = [json.loads(line) for run in runs for line in open(Path(run) / "metrics.jsonl")]
    rows = [r for r in rows if "sample_seconds" in r]
    if not rows:
        return {}
    out = {
        p: sum(r[f"{p}_seconds"] for r in rows) / len(rows) for p in ("sample", "verify", "update")
    }
    return out


def main(runs: list[str], name: str = "rollout_passes") -> None:
    lines = [
        "| run | tasks | groups | groups with a pass | rollouts | passes |",
        "|---|---|---|---|---|---|",
    ]
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for run in runs:
        for kind, (g, gp, n, p) in sorted(count(Path(run)).items()):
            label = "/".join(Path(run).parts[-2:])
            lines.append(
                f"| {label} | {kind} | {g} | {gp} ({gp / g:.0%}) | {n} | {p} ({p / n:.1%}) |"
            )
            totals[kind] = [a + b for a, b in zip(totals[kind], (g, gp, n, p), strict=True)]
    for kind, (g, gp, n, p) in sorted(totals.items()):
        lines.append(f"| all | {kind} | {g} | {gp} ({gp / g:.0%}) | {n} | {p} ({p / n:.1%}) |")
    phases = step_phases(runs)
    if phases:
        lines += [
            "",
            "Mean seconds per RL step: " + ", ".join(f"{k} {v:.2f}" for k, v in phases.items()),
        ]
    text = "\n".join(lines) + "\n"
    (HERE / f"{name}.md").write_text(text)
    print(text, end="")


if __name__ == "__main__":
    args = sys.argv[1:]
    name = "rollout_passes"
    if args[:1] == ["--name"]:
        name, args = args[1], args[2:]
    if not args:
        sys.exit(__doc__)
    main(args, name)
