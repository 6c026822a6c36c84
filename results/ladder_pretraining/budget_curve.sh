#!/bin/bash
# How the ladder's base grows with pretraining tokens: the pipeline's pretraining (preset 25m,
# seed 0, Muon, batch 32 x 128, lr 2e-3) stretched to 960 steps (3.93M tokens, 6x the
# pipeline's 655k), a checkpoint every 160 steps, each evaluated greedily on 32 confirm tasks
# per rung (the pipeline's confirm evaluation). The intermediate checkpoints sit mid-schedule
# (cosine over 960 steps), so they are lower bounds for runs that end there. Run from the
# repository root:
#   bash results/ladder_pretraining/budget_curve.sh runs/budget960
set -euo pipefail
out=${1:-runs/budget960}
glmflash pretrain --preset 25m --out "$out/run" --steps 960 --batch-size 32 --seq-len 128 \
    --lr 2e-3 --warmup 10 --eval-every 160 --ckpt-every 160 --keep-checkpoints 6 \
    --eval-tasks 0 --seed 0 --optimizer muon --corpus tasks
for step in 160 320 480 640 800 960; do
    glmflash eval --checkpoint "$out/run/checkpoints/step_$(printf %06d $step)" --rungs all \
        --per-rung 32 --split confirm --out "$out/eval_$step.json"
done
