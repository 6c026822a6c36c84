#!/bin/bash
# The pipeline's pretraining (preset 25m, seed 0, 160 Muon steps of 32 x 128 tokens) with the
# sparse layers' local window widened from 32 to 128 tokens, so that every position of a
# training row sees the whole row (a task's comment included) through softmax attention,
# then greedy pass@1 on 32 confirm tasks per rung. Run from the repository root:
#   bash results/ladder_pretraining/sparse_window.sh runs/sparse_window_128
set -euo pipefail
out=${1:-runs/sparse_window_128}
glmflash pretrain --preset 25m --out "$out/run" --steps 160 --batch-size 32 --seq-len 128 \
    --lr 2e-3 --warmup 10 --eval-every 40 --ckpt-every 40 --keep-checkpoints 3 --eval-tasks 0 \
    --seed 0 --optimizer muon --corpus tasks --set model.sparse_window=128
glmflash eval --checkpoint "$out/run/checkpoints/step_000160" --rungs all --per-rung 32 \
    --split confirm --out "$out/eval.json"
