"""The optimizer update every trainer shares: pretraining, the vision stages, the small-LM
experiments and the RL policy update each build their own loss and hand it here."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import Tensor, nn
from torch.profiler import record_function

from glmflash.model.moe import MoE
from glmflash.train.distributed import DistInfo, all_reduce_gradients

SINGLE = DistInfo()  # one process, no gradient averaging
PROFILE_SCOPE = "glmflash::"  # prefix of the profiler ranges placed here and by bench profile


def update(
    optimizer: torch.optim.Optimizer,
    loss: Tensor,
    params: Sequence[nn.Parameter],
    grad_clip: float,
    balance: Iterable[tuple[MoE, Tensor]] = (),
    dist: DistInfo = SINGLE,
) -> float:
    """One step on `loss`: gradients of `params` (averaged over ranks), their global norm
    clipped to `grad_clip`, the optimizer's step; then each MoE's selection bias moves by
    its expert load of this step (`balance`: (moe, load) pairs; under data parallelism the
    caller passes the load averaged over ranks, so every rank moves the same). Returns the
    gradient norm before clipping."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    all_reduce_gradients(params, dist)
    with record_function(PROFILE_SCOPE + "gradient clipping"):
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, grad_clip))
    with record_function(PROFILE_SCOPE + "optimizer"):
        optimizer.step()
    for moe, load in balance:
        moe.update_bias(load)
    return grad_norm


__all__ = ["PROFILE_SCOPE", "SINGLE", "update"]
