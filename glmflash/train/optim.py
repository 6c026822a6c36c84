"""The pretraining optimizer: parameter groups (weight decay on matrices only) and the choice
between AdamW and Muon."""

from __future__ import annotations

import torch

from glmflash.config import PretrainConfig
from glmflash.model.lm import GLMFlash


def make_optimizer(
    model: GLMFlash, cfg: PretrainConfig, ns_dtype: torch.dtype | None = None
) -> torch.optim.Optimizer:
    """AdamW; weight decay on matrices (ndim >= 2) only, never on norms, gains or biases.
    With Muon, `ns_dtype` fixes its Newton-Schulz dtype (default: measured on this machine)."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": rest, "weight_decay": 0.0},
    ]
    if cfg.optimizer == "muon":
        from glmflash.train.muon import MuonWithAdamW

        return MuonWithAdamW(model, cfg, ns_dtype)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), fused=False)


__all__ = ["make_optimizer"]
