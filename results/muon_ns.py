"""Time Muon's Newton-Schulz step in fp32 and bf16 on the 25m model's hidden matrices.

Usage: .venv/bin/python results/muon_ns.py   (one optimizer step's worth of iterations each)
"""

import time

import torch

from glmflash.config import PretrainConfig, model_config
from glmflash.model.lm import GLMFlash
from glmflash.train.muon import MuonWithAdamW, newton_schulz

torch.manual_seed(0)
hidden = MuonWithAdamW(GLMFlash(model_config("25m")), PretrainConfig()).muon.param_groups[0]
grads = [torch.randn_like(p) for p in hidden["params"]]
experts = sum(g.shape[0] for g in grads if g.ndim == 3)
print(
    f"{len(grads)} Muon parameters ({experts} stacked expert matrices), "
    f"torch threads {torch.get_num_threads()}"
)
for dtype in (torch.float32, torch.bfloat16):
    times = []
    for _ in range(3):
        t = time.perf_counter()
        for g in grads:
            newton_schulz(g, dtype=dtype)
        times.append(time.perf_counter() - t)
    print(f"{str(dtype).removeprefix('torch.')}: {min(times):.3f} s per optimizer step (best of 3)")
