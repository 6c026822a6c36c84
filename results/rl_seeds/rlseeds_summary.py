"""Summarise a folder of rlseeds.sh (default runs/rlseeds): per seed and pooled gains with
paired intervals, and the passing samples of each family before and after."""

import json
import sys

import numpy as np

from glmflash.evaluate import stats

D = sys.argv[1] if len(sys.argv) > 1 else "runs/rlseeds"
SEEDS = (31415, 27182, 16180)


def load(name):
    return json.load(open(f"{D}/{name}.json"))


def per_task(r):  # task name -> solved (greedy: pass; sampled: unbiased pass@8 = any pass)
    out = {}
    for rec in r["records"]:
        out.setdefault(rec["name"], []).append(rec["status"] == "pass")
    return {k: float(any(v)) for k, v in out.items()}


for kind in ("greedy24", "greedy192", "pass8"):
    before = per_task(load(f"before_{kind}"))
    names = sorted(before)
    b = np.array([before[n] for n in names])
    gains = []
    for s in SEEDS:
        try:
            after = per_task(load(f"after_{s}_{kind}"))
        except FileNotFoundError:
            continue
        a = np.array([after[n] for n in names])
        c = stats.paired_bootstrap(b, a)
        m = stats.mcnemar_exact(b.astype(bool), a.astype(bool))
        fam = load(f"after_{s}_{kind}")["per_family"]
        print(
            f"{kind} seed {s}: before {int(b.sum())}/{len(b)} after {int(a.sum())}/{len(a)} "
            f"gain {a.mean() - b.mean():+.3f} CI {c} mcnemar {m} per_family {fam}"
        )
        gains.append(a - b)
    if gains:
        g = np.mean(gains, axis=0)  # per task, mean over seeds
        print(
            f"{kind} pooled over {len(gains)} seeds: mean gain {g.mean():+.3f} "
            f"bootstrap over tasks {stats.bootstrap_mean(g)}"
        )
    print(f"{kind} before per family {load(f'before_{kind}')['per_family']}")


def samples(r):  # family -> [passing samples, samples]
    out = {}
    for rec in r["records"]:
        e = out.setdefault(rec["family"], [0, 0])
        e[0] += rec["status"] == "pass"
        e[1] += 1
    return out


before = samples(load("before_pass8"))
print("passing samples per family (of 64): before", {f: v[0] for f, v in before.items()})
for s in SEEDS:
    try:
        after = samples(load(f"after_{s}_pass8"))
    except FileNotFoundError:
        continue
    change = {f: round(100 * (after[f][0] - v[0]) / v[1]) for f, v in before.items()}
    print(f"  seed {s}: after", {f: v[0] for f, v in after.items()}, "change in points", change)
