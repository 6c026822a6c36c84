#!/bin/bash
# Screening the levers at one short budget, one seed: today's pipeline recipe (preset 25m, Muon,
# batch 32 x 128, lr 2e-3) under the wsd schedule to 160 steps (655k tokens), one lever changed
# per row, each checkpoint evaluated greedily on 32 dev tasks per ladder rung. Rows run one
# after another (never two at once). Run from the repository root:
#   bash results/competence/screen.sh runs/screen [NAME ...]
# Without names every row runs; a row whose eval file exists is skipped. EXTRA adds flags to
# every row, e.g. EXTRA="--compile blocks" (the pipeline's compiled blocks; the second batch,
# screen_pipe.md, ran so).
set -euo pipefail
out=${1:-runs/screen}
shift || true
# Rows named doc+X change lever X on top of row_start=document, the first clear winner; rows
# named pipe+X on top of the pipeline's recipe (row_start=document, lr 4e-3).
D="--row-start document"
P="$D --lr 4e-3"
declare -A LEVERS=(
    [baseline]=""
    [row_start_document]="$D"
    [delta]="--set model.linear_kind=delta"
    [doc+lr4e-3]="$D --lr 4e-3"
    [doc+lr8e-3]="$D --lr 8e-3"
    [doc+elu_conv]="$D --set model.elu_conv=true"
    [doc+wide_constants]="$D --ladder-constants wide"
    [doc+window128]="$D --set model.sparse_window=128"
    [doc+batch16]="$D --batch-size 16 --steps 320"
    [doc+mtp]="$D --set model.mtp=true"
    [doc+indexer]="$D --set model.sparse_kind=indexer"
    [doc+delta]="$D --set model.linear_kind=delta"
    # on top of the pipeline's recipe (row start at a document, lr 4e-3; its row: doc+lr4e-3)
    [pipe+delta]="$P --set model.linear_kind=delta"
    [pipe+window64]="$P --set model.sparse_window=64"
    [pipe+indexer]="$P --set model.sparse_kind=indexer"
    [pipe+lr8e-3]="$P --lr 8e-3"
    [pipe+warmup40]="$P --warmup 40"
    [pipe+batch64]="$P --batch-size 64 --steps 80"
    [pipe+mtp]="$P --set model.mtp=true"
)
names=("$@")
[ ${#names[@]} -eq 0 ] && names=(baseline row_start_document doc+lr4e-3 doc+elu_conv
    doc+wide_constants doc+window128 pipe+delta pipe+window64 pipe+indexer pipe+lr8e-3
    pipe+warmup40 pipe+batch64 pipe+mtp)
for name in "${names[@]}"; do
    run="$out/$name"
    [ -f "$run/eval.json" ] && continue
    rm -rf "$run/run"
    # shellcheck disable=SC2086
    glmflash pretrain --preset 25m --out "$run/run" --steps 160 --batch-size 32 --seq-len 128 \
        --lr 2e-3 --warmup 10 --schedule wsd --eval-every 160 --ckpt-every 160 \
        --keep-checkpoints 1 --eval-tasks 0 --seed 0 --optimizer muon --precision auto \
        ${EXTRA:-} ${LEVERS[$name]}
    ckpt=$(ls -d "$run"/run/checkpoints/step_* | tail -1)
    glmflash eval --checkpoint "$ckpt" --split dev --per-rung 32 \
        --rungs depth1,depth1_heldout_phrasings,seen_depth2,rl_only,unseen_depth2,unseen_depth3,seed_neutral_names \
        --out "$run/eval.json.tmp" > "$run/eval_summary.json"
    mv "$run/eval.json.tmp" "$run/eval.json"
done
