#!/bin/bash
# Tokens to the competence bar (dev split) for the recipes of the table: each one stable wsd run
# to the largest budget and a decay branch for every other (glmflash competence), seed by seed.
# Rows resume where they stopped, and larger budgets extend a row's stable run rather than
# retrain it; run from the repository root:
#   bash results/competence/harness.sh [ROW ...]
# ROW is NAME:SEED. Settings are changes to the pipeline's plan (glmflash pipeline's
# PipelinePlan.full), so "baseline" undoes what the plan adopted from the screen. A recipe's own
# --budgets or --per-rung replaces the default: "pipeline_128" reads the pipeline's recipe at its
# two largest budgets on 128 dev tasks a rung, where 32 tasks cannot tell an unseen-depth-3 rate
# of ~8% from zero (0.92^32 = 7% of draws hold no pass).
set -euo pipefail
budgets=160,320,480,640,800
declare -A RECIPES=(
    [baseline]="--set row_start=anywhere --set lr=2e-3"
    [pipeline]=""
    [delta]="--set model.linear_kind=delta"
    [pipeline_128]="--budgets 640,800 --per-rung 128"
)
rows=("$@")
[ ${#rows[@]} -eq 0 ] && rows=(pipeline:0 pipeline:1 baseline:0 baseline:1)
for row in "${rows[@]}"; do
    name=${row%%:*}
    seed=${row##*:}
    # shellcheck disable=SC2086
    glmflash competence --out results/competence --name "$name" --seed "$seed" \
        --budgets "$budgets" ${RECIPES[$name]}
done
