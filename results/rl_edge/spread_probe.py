"""How many RL groups can have reward spread: the pipeline RL stage's tasks sampled at several
temperatures, and the share of groups of G without spread that the samples imply.

One instance of each depth-2 RL structure (the stage's first cycle, `PipelinePlan.rl_stage`),
`--samples` completions of each at every `--temperatures` value, verified. From c passes of n
samples, a group of G drawn from the same policy is all-pass with probability p^G and all-fail
with (1 - p)^G; the unbiased estimates from the n samples are the hypergeometric

    P(all pass) = C(c, G) / C(n, G)        P(all fail) = C(n - c, G) / C(n, G)

so the expected share of groups without spread is their sum averaged over the structures (for
the stage's order, which meets every structure equally often). Printed as JSON: per
temperature the pass-rate histogram of the structures, the share without spread for each G in
`--groups`, the mean pass rate and the completions' mean length.

    python results/rl_edge/spread_probe.py CHECKPOINT > results/rl_edge/spread_probe.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from math import comb

import torch

from glmflash import checkpoint as ckpt
from glmflash.config.plan import PipelinePlan
from glmflash.data import derive_seed, ladder
from glmflash.generate import generate
from glmflash.machine import machine_record
from glmflash.train.rl import rl_tasks, verify_rows
from glmflash.train.task_sampler import HIST_BINS


def no_spread_share(counts: list[int], n: int, group: int) -> float:
    """Mean over tasks of C(c, G) / C(n, G) + C(n - c, G) / C(n, G) (c passes of n)."""
    total = comb(n, group)
    return sum((comb(c, group) + comb(n - c, group)) / total for c in counts) / len(counts)


def histogram(counts: list[int], n: int, bins: int = HIST_BINS) -> list[int]:
    """Tasks per equal bin of the observed pass rate c / n in [0, 1] (the last bin closed)."""
    out = [0] * bins
    for c in counts:
        out[min(c * bins // n, bins - 1)] += 1
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.8, 1.0, 1.2])
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--groups", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if any(g > args.samples for g in args.groups):
        parser.error("every group size must be at most --samples")
    cfg = PipelinePlan.rl_stage(args.seed)
    model, meta = ckpt.load_model(args.checkpoint, torch.device("cpu"))
    tasks = rl_tasks(cfg)[: len(ladder.structures("rl", 2))]  # the first cycle: each once
    owners = [t for t in tasks for _ in range(args.samples)]
    result = {
        "checkpoint": args.checkpoint,
        "checkpoint_sha256": meta.get("sha256"),
        "structures": len(tasks),
        "samples": args.samples,
        "temperatures": {},
        "machine": machine_record(torch.device("cpu")),
    }
    for temperature in args.temperatures:
        t0 = time.perf_counter()
        completions = generate(
            model,
            [t.prompt for t in owners],
            cfg.max_new_tokens,
            temperature=temperature,
            top_p=cfg.top_p,
            seed=derive_seed("spread-probe", args.seed, str(temperature)),
        )
        verdicts = verify_rows(owners, completions)
        passed = [v.status == "pass" for v in verdicts]
        n = args.samples
        counts = [sum(passed[i * n : (i + 1) * n]) for i in range(len(tasks))]
        result["temperatures"][str(temperature)] = {
            "pass_rate": sum(counts) / (n * len(tasks)),
            "histogram": histogram(counts, n),
            "no_spread_share": {str(g): no_spread_share(counts, n, g) for g in args.groups},
            "mean_len": sum(len(c.ids) for c in completions) / len(completions),
            "seconds": time.perf_counter() - t0,
            "passes": {t.family: c for t, c in zip(tasks, counts, strict=True)},
        }
        print(f"T={temperature}: {result['temperatures'][str(temperature)]}", file=sys.stderr)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
