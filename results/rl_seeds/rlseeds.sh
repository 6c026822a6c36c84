#!/bin/bash
# RL from the pipeline's pretrained checkpoint with three seeds; confirm evaluations before and after.
set -e
cd "$(dirname "$0")/../.."
G=.venv/bin/glmflash
INIT=runs/pipeline/pretrain/run/checkpoints/step_000200
OUT=runs/rlseeds
mkdir -p $OUT
ev() {  # checkpoint, name
  $G eval --checkpoint $1 --split confirm --families increment,double,even --per-family 8 --mode greedy --seed 0 --out $OUT/$2_greedy24.json > /dev/null
  $G eval --checkpoint $1 --split confirm --families increment,double,even --per-family 64 --mode greedy --seed 0 --out $OUT/$2_greedy192.json > /dev/null
  $G eval --checkpoint $1 --split confirm --per-family 8 --mode sample --samples 8 --temperature 0.8 --seed 0 --out $OUT/$2_pass8.json > /dev/null
}
ev $INIT before
for S in 31415 27182 16180; do
  /usr/bin/time -f "rl seed $S: %e s" $G rl --init $INIT --out $OUT/rl_$S --groups 96 --group-size 16 --tasks-per-step 4 --lr 3e-4 --seed $S --eval-every 24 --dev-per-family 8 2>&1 | grep -v "^rl group" | tail -3
  ev $OUT/rl_$S/best after_$S
done
echo done
