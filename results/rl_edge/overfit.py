"""Can the RL update raise the pass rate of tasks it trains on, again and again?

The composition study and the remedies screen move almost nothing, so this asks the question
beneath them on the smallest case: 8 fixed depth-2 RL tasks the base solves sometimes (2-11 of
16 samples in a probe), trained in turns of 4 (a group of 16 each, the RL stage's update), for
`--steps` updates. Every `--eval-every` updates it reads the 8 trained tasks and 8 siblings (the
same structures, other constants, names and phrasings: does a gain carry past the instance?),
greedy and as the share of 16 samples that pass. One process, the machine's threads:

    python results/rl_edge/overfit.py --init CKPT [--scope all --lr 3e-5] [--steps 24]
        [--out results/rl_edge/overfit_all_3e-05.json]

Reading: the sampled pass rate of the trained tasks climbing well above the probe's says the
update works; flat with KL near 1e-3 says it is too weak (raise lr, widen the scope); falling
while KL grows would point at a sign or alignment error.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

from glmflash import checkpoint as ckpt
from glmflash.config import RLConfig, Sampling
from glmflash.data import ladder
from glmflash.data.code_tasks import CodeTask, random_name
from glmflash.evaluate.coding import evaluate_tasks
from glmflash.machine import machine_record
from glmflash.train.rl import make_learner, rl_step

SAMPLES = 16
PER_STEP = 4


def sampled_rates(model, tasks: list[CodeTask], seed: int) -> list[float]:
    """Each task's share of SAMPLES draws (temperature 0.8) that pass."""
    result = evaluate_tasks(
        model,
        tasks,
        Sampling(mode="sample", samples=SAMPLES, seed=seed),
        groups=[t.name for t in tasks],
    )
    counts = result.passing_samples()
    return [counts[t.name][0] / counts[t.name][1] for t in tasks]


def greedy_passes(model, tasks: list[CodeTask]) -> list[int]:
    result = evaluate_tasks(model, tasks, groups=[t.name for t in tasks])
    return [int(result.per_family[t.name][0]) for t in tasks]


def reading(model, trained: list[CodeTask], siblings: list[CodeTask], seed: int) -> dict:
    out = {}
    for name, tasks in (("trained", trained), ("siblings", siblings)):
        rates = sampled_rates(model, tasks, seed)
        out[name] = {
            "sampled_rate": sum(rates) / len(rates),
            "per_task": rates,
            "greedy": sum(greedy_passes(model, tasks)),
        }
    return out


def choose(model, n: int, seed: int) -> tuple[list[CodeTask], list[float]]:
    """n depth-2 RL tasks the base passes 2-11 times in 16 samples (the edge of competence)."""
    pool = ladder.rl_ladder_tasks("rl", 6 * n, seed, depths=(2,))
    rates = sampled_rates(model, pool, seed)
    picked = [(t, r) for t, r in zip(pool, rates, strict=True) if 2 <= r * SAMPLES <= 11][:n]
    if len(picked) < n:
        raise SystemExit(f"only {len(picked)} tasks at the edge among {len(pool)}")
    return [t for t, _ in picked], [r for _, r in picked]


def siblings_of(tasks: list[CodeTask], seed: int) -> list[CodeTask]:
    """The same structures with new constants, arguments, phrasing and a dev name."""
    rng = random.Random(seed)
    by_name = {s.name: s for s in ladder.structures("rl", 2)}
    return [ladder.make_ladder_task(by_name[t.family], random_name(rng, "dev"), rng) for t in tasks]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--init", required=True, help="pretrained checkpoint directory")
    p.add_argument("--scope", default="last-block-head")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--steps", type=int, default=24, help="updates of 4 groups of 16")
    p.add_argument("--eval-every", type=int, default=8)
    p.add_argument("--tasks", type=int, default=8)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default=None, help="JSON file of the curve")
    args = p.parse_args()

    model, _ = ckpt.load_model(args.init)
    trained, probe = choose(model, args.tasks, args.seed)
    siblings = siblings_of(trained, args.seed)
    cfg = RLConfig(
        families=(),
        ladder_share=1.0,
        ladder_depths=(2,),
        groups=args.steps * PER_STEP,
        tasks_per_step=PER_STEP,
        lr=args.lr,
        scope=args.scope,
        seed=args.seed,
    )
    curve = [{"step": 0, **reading(model, trained, siblings, args.seed + 1000)}]
    steps = []
    print(json.dumps(curve[-1]["trained"] | {"step": 0}), flush=True)
    with tempfile.TemporaryDirectory(prefix="rl-overfit-") as tmp:
        learner = make_learner(model, cfg, Path(tmp))
        for s in range(args.steps):
            half = (s % (len(trained) // PER_STEP)) * PER_STEP
            stats = rl_step(learner, trained[half : half + PER_STEP], PER_STEP * s)
            steps.append(
                {k: stats.get(k) for k in ("pass_rate", "kl", "entropy", "grad_norm", "no_spread")}
            )
            print(json.dumps({"step": s + 1, **steps[-1]}), flush=True)
            if (s + 1) % args.eval_every == 0 or s + 1 == args.steps:
                curve.append(
                    {"step": s + 1, **reading(model, trained, siblings, args.seed + 1000 + s + 1)}
                )
                print(json.dumps({"step": s + 1, "eval": curve[-1]}), flush=True)
    result = {
        "command": " ".join(["python", *sys.argv]),
        "tasks": [
            {"name": t.name, "structure": t.family, "probe_rate": r}
            for t, r in zip(trained, probe, strict=True)
        ],
        "siblings": [t.name for t in siblings],
        "rl": {
            "scope": cfg.scope,
            "lr": cfg.lr,
            "group_size": cfg.group_size,
            "temperature": cfg.temperature,
        },
        "steps": steps,
        "curve": curve,
        "machine": machine_record("cpu"),
    }
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
