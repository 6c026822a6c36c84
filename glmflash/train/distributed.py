"""Data parallelism under `torchrun`: gloo on the CPU, nccl on CUDA.

Each rank computes the gradient of its slice of the global batch; the gradients are then
averaged with one all-reduce of a flat buffer, exactly what DDP's reducer does, but without
DDP's bookkeeping of unused parameters (an expert that received no tokens on one rank simply
contributes a zero gradient there). All ranks start from the same weights and take the same
optimizer step, so they stay identical.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device: torch.device) -> DistInfo:
    """Join the process group that torchrun describes in the environment (if any)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return DistInfo()
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return DistInfo(dist.get_rank(), dist.get_world_size())


def shutdown_distributed() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_gradients(params: Iterable[nn.Parameter], info: DistInfo) -> None:
    """Average the gradients of `params` over ranks. A parameter with a gradient on some rank
    gets zeros where it has none; one with no gradient anywhere stays without (the optimizer
    skips it, as it would in a single process)."""
    if info.world_size == 1:
        return
    params = [p for p in params if p.requires_grad]
    has = torch.tensor([p.grad is not None for p in params], dtype=torch.float32)
    dist.all_reduce(has, op=dist.ReduceOp.MAX)
    params = [p for p, h in zip(params, has.tolist(), strict=True) if h]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    dist.all_reduce(flat)
    flat /= info.world_size
    offset = 0
    for p in params:
        n = p.numel()
        p.grad.copy_(flat[offset : offset + n].view_as(p.grad))
        offset += n


def all_reduce_mean(t: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Mean of a tensor over ranks (metrics, expert loads)."""
    if info.world_size == 1:
        return t
    t = t.detach().clone()
    dist.all_reduce(t)
    return t / info.world_size
