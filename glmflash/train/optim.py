"""The pretraining optimizer: parameter groups (weight decay on matrices only) and the choice
between AdamW and Muon."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from glmflash.config import PretrainConfig
from glmflash.model.lm import GLMFlash


def adamw(
    params: Iterable[nn.Parameter],
    lr: float,
    weight_decay: float,
    betas: tuple[float, float] = (0.9, 0.95),
) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices (ndim >= 2) only, never on norms, gains or biases."""
    params = list(params)
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, fused=False)


def make_optimizer(
    model: GLMFlash, cfg: PretrainConfig, ns_dtype: torch.dtype | None = None
) -> torch.optim.Optimizer:
    """cfg.optimizer for the whole model: `adamw`, or Muon on the hidden matrices with AdamW
    on the rest, whose Newton-Schulz dtype `ns_dtype` fixes (default: measured on this
    machine)."""
    if cfg.optimizer == "muon":
        from glmflash.train.muon import MuonWithAdamW

        return MuonWithAdamW(model, cfg, ns_dtype)
    return adamw(model.parameters(), cfg.lr, cfg.weight_decay, (cfg.beta1, cfg.beta2))


__all__ = ["adamw", "make_optimizer"]
