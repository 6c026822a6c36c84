"""The projections the linear and sparse attention share: q, k, v from d_model into n_heads
heads of head_dim, RoPE on q and k (unless nope_main), and o from the heads back to d_model.

    q, k, v = RoPE(x W_q), RoPE(x W_k), x W_v        [B, H, T, D], positions offset..
    y       = concat_h(attention(q, k, v)_h) W_o      [B, T, d_model]

Each variant subclasses HeadProjections and supplies the attention between `heads` and
`merge`; the init of the four projections lives here once.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from glmflash.config.model import ModelConfig
from glmflash.model.rope import RotaryEmbedding


class HeadProjections(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.n_heads, self.head_dim = cfg.n_heads, cfg.head_dim
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)
        self.rope = (
            None if cfg.nope_main else RotaryEmbedding(cfg.head_dim, cfg.context, cfg.rope_theta)
        )

    def init_weights(self, std: float, out_std: float) -> None:
        """q, k, v ~ N(0, std); o, which writes into the residual streams, ~ N(0, out_std)."""
        for proj in (self.q_proj, self.k_proj, self.v_proj):
            nn.init.normal_(proj.weight, std=std)
        nn.init.normal_(self.o_proj.weight, std=out_std)

    def heads(
        self, x: Tensor, offset: int | Tensor, mix: Callable[[Tensor], Tensor] | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """x [B, T, d_model] at positions offset.. (one int, or one per row) -> q, k, v
        [B, H, T, D], q and k rotated; `mix`, when given, maps the three projections side by
        side [B, T, 3 d_model] before they are split into heads (a short convolution)."""
        B, T, _ = x.shape
        projected = [proj(x) for proj in (self.q_proj, self.k_proj, self.v_proj)]
        if mix is not None:
            projected = mix(torch.cat(projected, dim=-1)).chunk(3, dim=-1)
        q, k, v = (u.reshape(B, T, self.n_heads, self.head_dim).transpose(1, 2) for u in projected)
        if self.rope is not None:
            q, k = self.rope(q, offset), self.rope(k, offset)
        return q, k, v

    def merge(self, y: Tensor) -> Tensor:
        """y [B, H, T, D] -> the heads side by side through o: [B, T, d_model]."""
        B, H, T, D = y.shape
        return self.o_proj(y.transpose(1, 2).reshape(B, T, H * D))


__all__ = ["HeadProjections"]
