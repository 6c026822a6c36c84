"""Muon for the hidden matrices, AdamW for everything else.

Muon (Jordan et al. 2024) takes the momentum of the gradient and replaces it by its nearest
semi-orthogonal matrix, approximated by a quintic Newton-Schulz iteration:
    X <- a X + (b A + c A^2) X,  A = X X^T,  (a, b, c) = (3.4445, -4.7750, 2.0315).
The update is scaled by 0.2 * sqrt(max(rows, cols)) so its RMS matches AdamW's and one learning
rate serves both (Liu et al. 2025). Stacked expert weights [E, rows, cols] are orthogonalised
per expert. The iteration only has to bring the singular values near 1, so it may run in bf16,
as in Jordan's implementation, where bf16 is fast: `machine.fast_matmul_dtype` measures that
once per process. On an AVX-512 CPU with bf16 instructions bf16 halves the optimizer's time
(results/muon_ns.py: 0.73 -> 0.38 s per 25m step, most of it the 288 expert matrices); on an
AVX2-only CPU a bf16 matmul is about 50x slower than fp32 and the iteration stays in fp32.
The embedding (also the tied head) stays with AdamW, as Muon prescribes.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn


def newton_schulz(g: Tensor, steps: int = 5, dtype: torch.dtype = torch.float32) -> Tensor:
    """Approximately orthogonalise the last two dims of g (U V^T of its SVD), computing in dtype."""
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g.to(dtype)
    transpose = x.shape[-2] > x.shape[-1]
    if transpose:
        x = x.mT
    x = x / (x.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        A = x @ x.mT
        B = baddbmm(A, A, A, beta=b, alpha=c)  # b A + c A^2
        x = baddbmm(x, B, x, beta=a)  # a X + B X
    return (x.mT if transpose else x).to(g.dtype)


def baddbmm(bias: Tensor, m1: Tensor, m2: Tensor, beta: float = 1.0, alpha: float = 1.0) -> Tensor:
    """beta * bias + alpha * m1 @ m2 for matrices or batches of them, in one fused call that
    writes the result once, where `a * X + B @ X` makes three passes (Newton-Schulz for the
    25m model: results/profile/muon_fused.py)."""
    if bias.ndim == 2:
        return torch.addmm(bias, m1, m2, beta=beta, alpha=alpha)
    out = torch.baddbmm(
        bias.flatten(0, -3), m1.flatten(0, -3), m2.flatten(0, -3), beta=beta, alpha=alpha
    )
    return out.view(bias.shape)


class Muon(torch.optim.Optimizer):
    def __init__(
        self,
        params,
        lr: float,
        momentum: float = 0.95,
        weight_decay: float = 0.0,
        ns_steps: int = 5,
        ns_dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__(
            params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, ns_steps=ns_steps)
        )
        self.ns_dtype = ns_dtype

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                buf = self.state[p].setdefault("momentum", torch.zeros_like(p))
                buf.mul_(group["momentum"]).add_(p.grad)
                update = p.grad.add(buf, alpha=group["momentum"])  # Nesterov
                update = newton_schulz(update, group["ns_steps"], self.ns_dtype)
                scale = 0.2 * max(p.shape[-2], p.shape[-1]) ** 0.5
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(update, alpha=-group["lr"] * scale)


class MuonWithAdamW:
    """Two optimizers behind one interface (step, zero_grad, param_groups, state dicts).
    Newton-Schulz runs in `ns_dtype`, by default the faster matmul dtype of the model's device."""

    def __init__(self, model: nn.Module, cfg: Any, ns_dtype: torch.dtype | None = None) -> None:
        from glmflash.machine import fast_matmul_dtype

        hidden = [
            p
            for n, p in model.named_parameters()
            if p.ndim >= 2 and not n.startswith(("embedding", "output"))
        ]
        ids = {id(p) for p in hidden}
        rest = [p for p in model.parameters() if id(p) not in ids]
        if ns_dtype is None:
            ns_dtype = fast_matmul_dtype(next(model.parameters()).device)
        self.muon = Muon(hidden, lr=cfg.lr, weight_decay=cfg.weight_decay, ns_dtype=ns_dtype)
        self.adamw = torch.optim.AdamW(
            [
                {"params": [p for p in rest if p.ndim >= 2], "weight_decay": cfg.weight_decay},
                {"params": [p for p in rest if p.ndim < 2], "weight_decay": 0.0},
            ],
            lr=cfg.lr,
            betas=(cfg.beta1, cfg.beta2),
        )

    @property
    def ns_dtype(self) -> torch.dtype:
        return self.muon.ns_dtype

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.muon.param_groups + self.adamw.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.muon.zero_grad(set_to_none)
        self.adamw.zero_grad(set_to_none)

    def step(self) -> None:
        self.muon.step()
        self.adamw.step()

    def state_dict(self) -> dict[str, Any]:
        return {"muon": self.muon.state_dict(), "adamw": self.adamw.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.muon.load_state_dict(state["muon"])
        self.adamw.load_state_dict(state["adamw"])
