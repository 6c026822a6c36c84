"""The training curve of rl-structures, cycle by cycle: the arm meets the 63 depth-2 RL
structures in a shuffled cycle, each once per cycle with an instance it has never seen, so the
pass rate of a cycle's rollouts (sampled at temperature 0.8, before the update on them) is the
policy's pass rate on new instances of the structures it trains, read as it goes; a rising then
flat curve says where training flattens.

    python results/rl_edge/structures_cycles.py [results/rl_edge/rl-structures]

Writes cycles.png and cycles.json beside the runs and prints the table (per seed and the mean).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from glmflash.data import ladder
from glmflash.plots import pyplot, save

ARM = "fresh16"


def cycle_rates(curve: list[list[float]], cycle: int) -> list[float]:
    """Mean pass rate of each full cycle of `cycle` groups, from [groups so far, the step's
    pass rate] pairs; a step that straddles two cycles counts toward the one its last group
    falls in."""
    by_cycle: dict[int, list[float]] = {}
    for groups, rate in curve:
        by_cycle.setdefault((int(groups) - 1) // cycle, []).append(rate)
    full = int(curve[-1][0]) // cycle if curve else 0
    return [sum(by_cycle[c]) / len(by_cycle[c]) for c in range(full) if c in by_cycle]


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "results/rl_edge/rl-structures")
    cycle = len(ladder.structures("rl", 2))
    seeds = {}
    for path in sorted((folder / "runs").glob(f"{ARM}__seed*.json")):
        record = json.loads(path.read_text())
        if record["status"] != "ok":
            continue
        curve = record["metrics"]["curves"]["pass_rate"]
        seeds[record["seed"]] = cycle_rates(curve, cycle)
    if not seeds:
        raise SystemExit(f"no finished {ARM} run under {folder / 'runs'}")
    n = min(len(v) for v in seeds.values())
    mean = [sum(v[c] for v in seeds.values()) / len(seeds) for c in range(n)]
    (folder / "cycles.json").write_text(json.dumps({"seeds": seeds, "mean": mean}, indent=1))
    print("cycle " + " ".join(f"seed {s:>2}" for s in seeds) + "   mean")
    for c in range(n):
        print(
            f"{c + 1:5d} " + " ".join(f"{v[c]:7.3f}" for v in seeds.values()) + f" {mean[c]:6.3f}"
        )
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for s, v in seeds.items():
        ax.plot(range(1, len(v) + 1), v, lw=0.8, alpha=0.5, label=f"seed {s}")
    ax.plot(range(1, n + 1), mean, "k-o", lw=2, ms=3, label="mean")
    ax.set_xlabel(f"cycle (each of the {cycle} depth-2 RL structures met once, a new instance)")
    ax.set_ylabel("pass rate of the cycle's rollouts")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, folder / "cycles.png")


if __name__ == "__main__":
    main()
