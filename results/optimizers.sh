#!/bin/bash
# AdamW fp32 vs AdamW bf16 vs Muon fp32, 25m, the same 60-step budget and data.
cd "$(dirname "$0")/.."
for v in "adamw fp32" "adamw bf16" "muon fp32"; do set -- $v
  rm -rf runs/opt_$1_$2
  /usr/bin/time -f "$1 $2: %e s" .venv/bin/glmflash pretrain --preset 25m --out runs/opt_$1_$2 --steps 60 --batch-size 32 --seq-len 128 --lr 2e-3 --warmup 10 --seed 0 --eval-every 30 --ckpt-every 60 --eval-tasks 0 --optimizer $1 --precision $2 2>&1 | grep -v "^step" | tail -2
done
echo done
