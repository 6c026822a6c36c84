#!/usr/bin/env bash
# Does bf16 autocast train like fp32? The pipeline's pretraining (25m, 160 steps of 32 x 128,
# Muon, lr 2e-3, warm-up 10) in each precision for seeds 0 and 1 (SEEDS="0 1 2" for more).
# The two precisions of a seed run side by side with one thread each (never two 2-thread runs
# at once), so their tokens/s are comparable with each other but not with an idle 2-thread
# run. Writes
# results/precision/bf16_curves.{json,png}: train-loss curves, the dev loss at each evaluation,
# and the final dev losses' difference against the seed-to-seed spread.
set -euo pipefail
out=${OUT:-runs/bf16_curves}
seeds=${SEEDS:-"0 1"}
mkdir -p "$out"
run() {  # precision seed
    OMP_NUM_THREADS=1 glmflash pretrain --out "$out/$1_seed$2" --precision "$1" --seed "$2" \
        --steps 160 --lr 2e-3 --warmup 10 --optimizer muon --eval-every 40 --eval-tasks 0 \
        --ckpt-every 1000 --device cpu > "$out/$1_seed$2.log" 2>&1
}
for s in $seeds; do
    [ -f "$out/fp32_seed$s/summary.json" ] || run fp32 "$s" &
    [ -f "$out/bf16_seed$s/summary.json" ] || run bf16 "$s" &
    wait
done
python - "$out" "$seeds" <<'PY'
import json, statistics, sys
from pathlib import Path

from glmflash.plots import pyplot, save

out, seeds = Path(sys.argv[1]), [int(s) for s in sys.argv[2].split()]
result = {"runs": {}, "setting": "pipeline pretraining, 25m, 160 steps, muon, 1 thread per run"}
plt = pyplot()
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
for p, colour in (("fp32", "tab:blue"), ("bf16", "tab:orange")):
    for s in seeds:
        run = out / f"{p}_seed{s}"
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        machine = json.loads((run / "run.json").read_text())["machines"][-1]
        dev = [(r["step"], r["dev_loss"]) for r in rows if "dev_loss" in r]
        result["runs"][f"{p}_seed{s}"] = {
            "final_dev_loss": dev[-1][1],
            "final_train_loss": rows[-1]["loss"],
            "tokens_per_s": rows[-1]["tokens_per_s"],
            "dev_loss": dev,
            "dtypes": machine["dtypes"],
        }
        label = p if s == seeds[0] else None
        axes[0].plot([r["step"] for r in rows], [r["loss"] for r in rows], colour, lw=0.8,
                     alpha=0.8, label=label)
        axes[1].plot(*zip(*dev), colour, marker="o", lw=1, label=label)
    result["machine"] = {k: v for k, v in machine.items() if k != "dtypes"}
final = {p: [result["runs"][f"{p}_seed{s}"]["final_dev_loss"] for s in seeds]
         for p in ("fp32", "bf16")}
diffs = [b - f for b, f in zip(final["bf16"], final["fp32"])]
result["final_dev_loss"] = {
    p: {"mean": statistics.mean(v), "sd_over_seeds": statistics.stdev(v) if len(v) > 1 else None}
    for p, v in final.items()
}
result["bf16_minus_fp32_per_seed"] = diffs
speed = {p: statistics.mean(result["runs"][f"{p}_seed{s}"]["tokens_per_s"] for s in seeds)
         for p in ("fp32", "bf16")}
result["bf16_vs_fp32_tokens_per_s"] = speed["bf16"] / speed["fp32"]
for ax, title in zip(axes, ("train loss", "dev loss")):
    ax.set_xlabel("step"); ax.set_title(title); ax.legend(); ax.grid(alpha=0.3)
axes[0].set_yscale("log")
save(fig, "results/precision/bf16_curves.png")
Path("results/precision/bf16_curves.json").write_text(json.dumps(result, indent=2))
print(json.dumps({k: result[k] for k in ("final_dev_loss", "bf16_minus_fp32_per_seed",
                                          "bf16_vs_fp32_tokens_per_s")}, indent=2))
PY
