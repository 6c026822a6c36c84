#!/usr/bin/env bash
# Where a 25m pretraining step's time goes, and the train step against the straightforward
# implementation, on this machine. Each command prints the machine beside its figures.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-results/profile}
.venv/bin/glmflash bench profile --steps 2 --json > "$OUT/profile_25m.json"
.venv/bin/glmflash bench model --json --repeats 2 --naive-repeats 1 --no-bf16 > "$OUT/bench_model.json"
