"""Rotary position embedding (RoPE) with a position offset for incremental decoding.

For position p and frequency w_i = theta^(-2i/D), channel pair (x_i, x_{i+D/2}) is rotated by
angle p * w_i:  x_i' = x_i cos - x_{i+D/2} sin,  x_{i+D/2}' = x_{i+D/2} cos + x_i sin.
Dot products of rotated queries and keys then depend only on the position difference.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class RotaryEmbedding(nn.Module):
    def __init__(self, dim: int, max_len: int, theta: float = 10000.0) -> None:
        super().__init__()
        if dim % 2:
            raise ValueError(f"RoPE needs an even dimension, got {dim}")
        self.dim, self.theta = dim, theta
        inv_freq = theta ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._build(max_len)

    @torch.inference_mode(False)  # tables built while decoding serve training too
    def _build(self, length: int) -> None:
        positions = torch.arange(length, dtype=torch.float64, device=self.inv_freq.device)
        angles = torch.outer(positions, self.inv_freq)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, x: Tensor, offset: int | Tensor = 0) -> Tensor:
        """Rotate x of shape [..., T, D] for positions offset .. offset + T - 1. The offset is
        one int, or one per batch row (a tensor [B] for x [B, ..., T, D]: rows of different
        lengths decoded together)."""
        T = x.shape[-2]
        ragged = isinstance(offset, Tensor)
        end = int(offset.max()) + T if ragged else offset + T
        if end > self.cos.shape[0]:
            self._build(2 * end)  # on inv_freq's device: the module's
        if ragged:
            at = offset[:, None] + torch.arange(T, device=offset.device)  # [B, T]
            shape = (x.shape[0], *[1] * (x.dim() - 3), T, self.dim // 2)
            cos, sin = self.cos[at].view(shape).to(x.dtype), self.sin[at].view(shape).to(x.dtype)
        else:
            cos = self.cos[offset : offset + T].to(x.dtype)
            sin = self.sin[offset : offset + T].to(x.dtype)
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
