#!/bin/bash
# RL at the edge of competence (results/rl_edge): every study starts from the pipeline's own
# pretrained checkpoint (CKPT, default: the one `glmflash pipeline --out $PIPELINE` selected,
# PIPELINE=runs/pipeline), two single-threaded runs at a time; each study resumes where it
# stopped.
# SEEDS=1,2 runs those seeds instead of the experiment's own.
#   bash results/rl_edge/run.sh [scope-lr|composition|passk|remedies|overfit|structures|sampler|meetings|stage-variants] ...
# 1. scope-lr: the edge sampler on the whole model at lr 1e-5, 3e-5, 1e-4 and on the last
#    block and head at 1e-4, and the untrained checkpoint, dev split, seeds 1-2 (a screen);
#    its report sets RL_LR in glmflash/config/plan.py (by hand; the experiments' ALL_LR).
# 2. composition: the checkpoint and four arms, 8 paired seeds, the confirm split opened once.
# 3. passk: pass@k for k = 1..64 of the checkpoint and of the winning arm, 16 tasks per rung.
# 4. remedies: edge_all against the same on the depth-2 RL structures alone, twice as long,
#    and with the spread weight and discounted counts; dev split, seeds 1-2.
# 5. overfit: overfit.py on the whole model at 3e-5, seeds 1-2: 8 fixed tasks met 12 times each
#    (24 updates), and a fresh instance of the same 8 structures at every meeting (48 updates,
#    24 meetings a structure), each read on new instances of its structures and on 16 untrained
#    ones; one process at a time, the machine's threads.
# 6. structures: every depth-2 RL structure met 16 times (a new instance each), whole model
#    3e-5, against the checkpoint; confirm split, 64 tasks a rung, seeds 1-8.
# 7. sampler: the edge sampler on the depth-2 pool, pass rates estimated per task against per
#    structure: the share of groups without spread; dev split, seeds 1-2.
# 8. meetings: rl-structures' arm with each structure met 4 times (lr 3e-5 and 1e-4) and 8
#    times: the budget of the pipeline's RL stage; dev split, seeds 1-2.
# 9. stage-variants: the pipeline's stage, the same with rollouts at temperature 1.0, and that
#    with the edge sampler; dev split, seeds 1-2 (results/rl_edge/spread_probe.py: the share
#    of groups without spread at each temperature).
set -euo pipefail
PIPELINE=${PIPELINE:-runs/pipeline}
CKPT=${CKPT:-$(python3 -c "import json; print(json.load(open('$PIPELINE/pretrain/stage.json'))['selected'])")}
OUT=results/rl_edge
studies=("$@")
[ ${#studies[@]} -eq 0 ] && studies=(scope-lr composition passk)
overfit() {  # seed, then overfit.py's own flags; the JSON is named by the flags
    local seed=$1 tag=all_3e-5
    shift
    [[ " $* " == *" --fresh "* ]] && tag=fresh_all_3e-5
    [ "$seed" != 1 ] && tag=${tag}_seed$seed
    [ -f "$OUT/overfit_$tag.json" ] && return
    python "$OUT/overfit.py" --init "$CKPT" --scope all --lr 3e-5 --seed "$seed" "$@" \
        --out "$OUT/overfit_$tag.json"
}
for study in "${studies[@]}"; do
    if [ "$study" = overfit ]; then
        for seed in 1 2; do
            overfit "$seed" --steps 24
            overfit "$seed" --steps 48 --eval-every 16 --fresh --siblings 2
        done
        continue
    fi
    resume=
    [ -d "$OUT/rl-$study/runs" ] && resume=--resume
    glmflash experiment "rl-$study" --out "$OUT" --workers 2 --set "init=$CKPT" $resume \
        ${SEEDS:+--seeds "$SEEDS"}
done
