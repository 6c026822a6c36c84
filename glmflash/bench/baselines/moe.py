"""The straightforward MoE dispatch: for each expert, find its tokens with a boolean mask.

Gives the same output as `MoE.forward` (the same router, gates and shared experts), only the
routed experts are computed differently: one masked gather/accumulate per expert instead of one
sort of all assignments.
"""

from __future__ import annotations

import torch
from torch import Tensor

from glmflash.model.moe import MoE, swiglu


def masked_moe(moe: MoE, x: Tensor) -> Tensor:
    """x [B, T, C] -> y [B, T, C], looping over experts with `where(index == e)`."""
    flat = x.reshape(-1, x.shape[-1])
    index, gates, _ = moe.route(flat)
    y = None
    for e in range(moe.n_experts):
        token, slot = torch.where(index == e)
        out = swiglu(flat[token], moe.w1[e], moe.w3[e], moe.w2[e])
        out = out * gates[token, slot, None].to(out.dtype)
        y = (out.new_zeros(flat.shape) if y is None else y).index_add(0, token, out)
    if moe.shared is not None:
        y = y + moe.shared(flat)
    return y.view(x.shape)


__all__ = ["masked_moe"]
