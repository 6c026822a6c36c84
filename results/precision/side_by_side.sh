#!/usr/bin/env bash
# Pretraining speed of Muon against AdamW, side by side on this machine, natively and under the
# environment of an AVX2-only CPU (torch, oneDNN and MKL limited to AVX2: bf16 matmuls emulated).
# Each run: 8 steps of the 25m preset at 32 x 128, fp32; tokens/s is the run's own figure
# (summary.json), its machine in run.json. Writes results/precision/side_by_side.json.
set -euo pipefail
out=${OUT:-runs/precision}
rm -rf "$out"; mkdir -p "$out"
run() {  # name, optimizer, extra environment
    env $3 glmflash pretrain --out "$out/$1" --optimizer "$2" --steps 8 --warmup 2 \
        --eval-every 1000 --ckpt-every 1000 --eval-tasks 0 --device cpu >/dev/null 2>&1
}
avx2="ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2"
for isa in native avx2; do
    for opt in adamw muon; do
        extra=""; [ "$isa" = avx2 ] && extra=$avx2
        run "${isa}_$opt" "$opt" "$extra"
    done
done
python - "$out" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
rows = {}
for d in sorted(out.iterdir()):
    s = json.loads((d / "summary.json").read_text())
    m = json.loads((d / "run.json").read_text())["machines"][-1]
    rows[d.name] = {"tokens_per_s": round(s["tokens_per_s"], 1), "machine": m}
for isa in ("native", "avx2"):
    rows[f"{isa}_muon_vs_adamw"] = round(rows[f"{isa}_muon"]["tokens_per_s"]
                                         / rows[f"{isa}_adamw"]["tokens_per_s"], 3)
Path("results/precision/side_by_side.json").write_text(json.dumps(rows, indent=2))
print(json.dumps({k: v if not isinstance(v, dict) else v["tokens_per_s"] for k, v in rows.items()}))
PY
