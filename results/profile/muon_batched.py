"""Muon's Newton-Schulz on the 25m model's hidden matrices: one call per parameter (what
Muon.step does) against one call per shape (the same-shaped matrices of every layer stacked
into a few batched calls), alternating rounds in one process, in the dtype Muon picks on this
machine. The batched form did not pay (results/profile/muon_batched.json: the iteration's
matmuls, not the calls, take the time), so Muon.step keeps one call per parameter.

Usage: .venv/bin/python results/profile/muon_batched.py > results/profile/muon_batched.json
"""

import json
import time

import torch

from glmflash.config import PretrainConfig, model_config
from glmflash.machine import fast_matmul_dtype, machine_record
from glmflash.model.lm import GLMFlash
from glmflash.train.muon import MuonWithAdamW, newton_schulz

torch.manual_seed(0)
dtype = fast_matmul_dtype(torch.device("cpu"))
params = MuonWithAdamW(GLMFlash(model_config("25m")), PretrainConfig()).muon.param_groups[0]
grads = [torch.randn_like(p) for p in params["params"]]


def per_parameter() -> None:
    for g in grads:
        newton_schulz(g, dtype=dtype)


def per_shape() -> None:
    shapes: dict[tuple[int, int], list[torch.Tensor]] = {}
    for g in grads:
        shapes.setdefault(tuple(g.shape[-2:]), []).append(g.reshape(-1, *g.shape[-2:]))
    for stack in shapes.values():
        newton_schulz(torch.cat(stack), dtype=dtype)


times: dict[str, list[float]] = {"per_parameter": [], "per_shape": []}
for _ in range(4):
    for name, fn in (("per_parameter", per_parameter), ("per_shape", per_shape)):
        t = time.perf_counter()
        fn()
        times[name].append(time.perf_counter() - t)
best = {k: min(v[1:]) for k, v in times.items()}
print(
    json.dumps(
        {
            "seconds_per_step": best,
            "speedup": best["per_parameter"] / best["per_shape"],
            "matrices": sum(g.numel() // (g.shape[-2] * g.shape[-1]) for g in grads),
            "shapes": len({tuple(g.shape[-2:]) for g in grads}),
            "machine": machine_record("cpu", newton_schulz=dtype),
        },
        indent=1,
    )
)
