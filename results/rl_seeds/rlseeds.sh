#!/bin/bash
# RL from the pipeline's pretrained checkpoint with three seeds (glmflash rl's defaults are the
# pipeline's RL stage); confirm evaluations before and after. Settings by environment: OUT
# (default runs/rlseeds), INIT, RLARGS (extra rl flags, e.g. "--ptx 1"), JOBS (seeds run at
# once, one thread each; default 1, with all threads).
set -e
cd "$(dirname "$0")/../.."
G=.venv/bin/glmflash
INIT=${INIT:-runs/pipeline/pretrain/run/checkpoints/step_000160}
OUT=${OUT:-runs/rlseeds}
JOBS=${JOBS:-1}
mkdir -p $OUT
[ "$JOBS" -gt 1 ] && export OMP_NUM_THREADS=1
ev() {  # checkpoint, name
  $G eval --checkpoint $1 --split confirm --families increment,double,even --per-family 8 --mode greedy --seed 0 --out $OUT/$2_greedy24.json > /dev/null
  $G eval --checkpoint $1 --split confirm --families increment,double,even --per-family 64 --mode greedy --seed 0 --out $OUT/$2_greedy192.json > /dev/null
  $G eval --checkpoint $1 --split confirm --per-family 8 --mode sample --samples 8 --temperature 0.8 --seed 0 --out $OUT/$2_pass8.json > /dev/null
}
one() {  # seed
  rm -rf $OUT/rl_$1
  /usr/bin/time -f "rl seed $1: %e s" $G rl --init $INIT --out $OUT/rl_$1 --seed $1 $RLARGS 2>&1 | grep -v "^rl group" | tail -3
  ev $OUT/rl_$1/best after_$1
}
[ -f $OUT/before_pass8.json ] || ev $INIT before &
for S in 31415 27182 16180; do
  one $S &
  while [ "$(jobs -r | wc -l)" -ge "$JOBS" ]; do wait -n; done
done
wait
echo done
