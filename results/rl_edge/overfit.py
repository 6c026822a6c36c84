"""Can the RL update raise the pass rate of tasks it trains on, again and again, and does the
gain reach the structure behind them?

The composition study and the remedies screen move almost nothing, so this asks the question
beneath them on the smallest case: 8 depth-2 RL structures the base solves sometimes (a probe
instance passes 2-11 of 16 samples), trained in turns of 4 (a group of 16 each, the RL stage's
update), for `--steps` updates. Two ways to meet them:

    fixed   (default) the 8 probe instances themselves, again and again: can it learn a task?
    --fresh a new instance of the structure every time (new constants, arguments, phrasing and
            name): can it learn a structure from the reward alone?

Every `--eval-every` updates it reads, greedy and as the share of 16 samples that pass: the
trained instances (fixed only), `--siblings` new instances of each of the 8 structures (dev
names: does a gain carry past the instance?), and 16 instances of depth-2 RL structures it
never trains (does it carry past the structure?). One process, the machine's threads:

    python results/rl_edge/overfit.py --init CKPT [--scope all --lr 3e-5] [--steps 24]
        [--fresh] [--out results/rl_edge/overfit_all_3e-05.json]

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


def reading(model, sets: dict[str, list[CodeTask]], seed: int) -> dict:
    out = {}
    for name, tasks in sets.items():
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


def instances(names: list[str], rng: random.Random, split: str) -> list[CodeTask]:
    """A new instance of each depth-2 RL structure named: new constants, arguments, phrasing
    and a name of `split`."""
    by_name = {s.name: s for s in ladder.structures("rl", 2)}
    return [ladder.make_ladder_task(by_name[n], random_name(rng, split), rng) for n in names]


def untrained(names: list[str], n: int, seed: int) -> list[CodeTask]:
    """n dev instances of the depth-2 RL structures not in `names`, one structure each."""
    rest = [s.name for s in ladder.structures("rl", 2) if s.name not in names]
    rng = random.Random(seed)
    return instances(rng.sample(rest, n), rng, "dev")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--init", required=True, help="pretrained checkpoint directory")
    p.add_argument("--scope", default="last-block-head")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--steps", type=int, default=24, help="updates of 4 groups of 16")
    p.add_argument("--eval-every", type=int, default=8)
    p.add_argument("--tasks", type=int, default=8)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--fresh", action="store_true", help="a new instance at every meeting")
    p.add_argument("--siblings", type=int, default=1, help="read instances per structure")
    p.add_argument("--untrained", type=int, default=16, help="untrained structures read")
    p.add_argument("--out", default=None, help="JSON file of the curve")
    args = p.parse_args()

    model, _ = ckpt.load_model(args.init)
    trained, probe = choose(model, args.tasks, args.seed)
    names = [t.family for t in trained]
    sib_rng = random.Random(args.seed)
    siblings = [t for _ in range(args.siblings) for t in instances(names, sib_rng, "dev")]
    sets = {"siblings": siblings, "untrained": untrained(names, args.untrained, args.seed)}
    if not args.fresh:
        sets = {"trained": trained, **sets}
    turn_rng = random.Random(args.seed + 2000)
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
    curve = [{"step": 0, **reading(model, sets, args.seed + 1000)}]
    steps = []
    print(json.dumps({k: curve[-1][k]["sampled_rate"] for k in sets}), flush=True)
    with tempfile.TemporaryDirectory(prefix="rl-overfit-") as tmp:
        learner = make_learner(model, cfg, Path(tmp), amp=None)  # fp32, as it was measured
        for s in range(args.steps):
            half = (s % (len(trained) // PER_STEP)) * PER_STEP
            turn = trained[half : half + PER_STEP]
            if args.fresh:
                turn = instances([t.family for t in turn], turn_rng, "rl")
            stats = rl_step(learner, turn, PER_STEP * s)
            steps.append(
                {k: stats.get(k) for k in ("pass_rate", "kl", "entropy", "grad_norm", "no_spread")}
            )
            print(json.dumps({"step": s + 1, **steps[-1]}), flush=True)
            if (s + 1) % args.eval_every == 0 or s + 1 == args.steps:
                curve.append({"step": s + 1, **reading(model, sets, args.seed + 1000 + s + 1)})
                print(json.dumps({"step": s + 1, "eval": curve[-1]}), flush=True)
    result = {
        "command": " ".join(["python", *sys.argv]),
        "tasks": [
            {"name": t.name, "structure": t.family, "probe_rate": r}
            for t, r in zip(trained, probe, strict=True)
        ],
        "fresh": args.fresh,
        "read": {k: [t.name for t in v] for k, v in sets.items()},
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
