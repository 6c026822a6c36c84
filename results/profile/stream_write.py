"""The streams' write H' = M H + h_post y, forward and backward on the 25m shapes (32 x 128
tokens, 4 streams of 192), as the model computes it (`streams.mix_write`: a custom autograd
Function) against the same sum as S multiply-adds with autograd's backward. Best of 5 each,
one process, both giving the same values and gradients.

    python results/profile/stream_write.py"""

import json
import time

import torch

from glmflash.machine import machine_record
from glmflash.model.streams import mix_write


def plain(h, y, mix, post):
    out = post[..., None] * y.unsqueeze(-2)
    for m_t, h_t in zip(mix.unbind(-1), h.unbind(-2), strict=True):  # column t of M
        out = out.addcmul(m_t[..., None], h_t.unsqueeze(-2))
    return out


torch.manual_seed(0)
B, T, S, C = 32, 128, 4, 192
inputs = [
    torch.randn(B, T, S, C),
    torch.randn(B, T, C),
    torch.rand(B, T, S, S),
    torch.rand(B, T, S),
]
inputs = [t.requires_grad_() for t in inputs]
g = torch.randn(B, T, S, C)
result, grads = {}, {}
for name, fn in (("plain", plain), ("function", mix_write)):
    best = float("inf")
    for _ in range(6):
        for t in inputs:
            t.grad = None
        t0 = time.perf_counter()
        fn(*inputs).backward(g)
        best = min(best, time.perf_counter() - t0)
    result[f"{name}_ms"] = best * 1e3
    grads[name] = [t.grad.clone() for t in inputs]
result["speedup"] = result["plain_ms"] / result["function_ms"]
result["gradients_agree"] = all(
    torch.allclose(a, b, rtol=1e-4, atol=1e-4) for a, b in zip(*grads.values(), strict=True)
)
result["machine"] = machine_record("cpu")
print(json.dumps(result, indent=1))
