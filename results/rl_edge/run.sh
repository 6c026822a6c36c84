#!/bin/bash
# RL at the edge of competence (results/rl_edge): every study starts from the pipeline's own
# pretrained checkpoint (CKPT, default: the one `glmflash pipeline --out $PIPELINE` selected,
# PIPELINE=runs/pipeline), two single-threaded runs at a time; each study resumes where it
# stopped.
#   bash results/rl_edge/run.sh [scope-lr|composition|passk|remedies] ...
# 1. scope-lr: the edge sampler on the whole model at lr 1e-5, 3e-5, 1e-4 and on the last
#    block and head at 1e-4, and the untrained checkpoint, dev split, seeds 1-2 (a screen);
#    its report sets ALL_LR in glmflash/experiments/rl_composition.py (by hand).
# 2. composition: the checkpoint and four arms, 8 paired seeds, the confirm split opened once.
# 3. passk: pass@k for k = 1..64 of the checkpoint and of the winning arm, 16 tasks per rung.
# 4. remedies: edge_all against the same on the depth-2 RL structures alone, twice as long,
#    and with the spread weight and discounted counts; dev split, seeds 1-2.
set -euo pipefail
PIPELINE=${PIPELINE:-runs/pipeline}
CKPT=${CKPT:-$(python3 -c "import json; print(json.load(open('$PIPELINE/pretrain/stage.json'))['selected'])")}
OUT=results/rl_edge
studies=("$@")
[ ${#studies[@]} -eq 0 ] && studies=(scope-lr composition passk)
for study in "${studies[@]}"; do
    resume=
    [ -d "$OUT/rl-$study/runs" ] && resume=--resume
    glmflash experiment "rl-$study" --out "$OUT" --workers 2 --set "init=$CKPT" $resume
done
