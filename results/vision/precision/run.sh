#!/usr/bin/env bash
# The vision stage from one pretrained checkpoint in fp32 and in bf16 autocast, one after the
# other on an idle machine: wall seconds and held-out accuracy, machine record inside each
# results.json. Usage: bash results/vision/precision/run.sh CHECKPOINT (the pipeline's
# runs/pipeline/pretrain/run/checkpoints/step_000160 gave fp32.json and bf16.json here).
set -euo pipefail
ckpt=$1
for p in fp32 bf16; do
    glmflash vision --init "$ckpt" --out "runs/vision_$p" --precision "$p"
    cp "runs/vision_$p/results.json" "results/vision/precision/$p.json"
done
