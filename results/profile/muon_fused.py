"""Newton-Schulz written with fused multiply-add matmuls (`muon.baddbmm`) against the textbook
form `a X + (b A + c A^2) X`, on the 25m model's hidden matrices, in one process:

    python results/profile/muon_fused.py [--out FILE.json]

Both run Muon's 5 iterations on random gradients of every matrix Muon updates; each figure is
the best of 5 passes over all of them, in fp32 and in bf16."""

import argparse
import json
import time

import torch

from glmflash.config import model_config
from glmflash.machine import machine_record
from glmflash.model.lm import GLMFlash
from glmflash.train.muon import newton_schulz


def textbook(g: torch.Tensor, steps: int = 5, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g.to(dtype)
    transpose = x.shape[-2] > x.shape[-1]
    x = x.mT if transpose else x
    x = x / (x.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        A = x @ x.mT
        x = a * x + (b * A + c * A @ A) @ x
    return (x.mT if transpose else x).to(g.dtype)


def best_of(fn, grads, dtype, repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for g in grads:
            fn(g, 5, dtype)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=None)
    args = p.parse_args()
    model = GLMFlash(model_config("25m"))
    grads = [
        torch.randn_like(p)
        for n, p in model.named_parameters()
        if p.ndim >= 2 and not n.startswith(("embedding", "output"))
    ]
    result = {"matrices": len(grads)}
    for dtype in (torch.float32, torch.bfloat16):
        name = str(dtype).removeprefix("torch.")
        old, new = best_of(textbook, grads, dtype), best_of(newton_schulz, grads, dtype)
        result[name] = {"textbook_s": old, "fused_s": new, "speedup": old / new}
    result["machine"] = machine_record("cpu")
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
