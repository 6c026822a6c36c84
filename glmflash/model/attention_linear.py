"""Causal linear attention with ELU+1 feature maps, computed chunkwise.

With phi(u) = elu(u) + 1 (positive, so the normaliser never vanishes):

    S_t = sum_{s<=t} phi(k_s) v_s^T        [D, D]
    z_t = sum_{s<=t} phi(k_s)              [D]
    y_t = phi(q_t)^T S_t / (phi(q_t)^T z_t + eps)

Decoding keeps only (S, z): O(1) memory per token. Training uses the chunkwise-parallel form:
the sequence is cut into chunks of C tokens; inside a chunk the causal product
(phi(Q) phi(K)^T ⊙ tril) V is a small dense matmul, and everything before the chunk enters
through phi(Q) S_prev, where S_prev is the state at the chunk's start. Only one [D, D] state per
chunk is formed (an exclusive cumsum over chunks), never one per token.

The denominator phi(q_t)^T z_t is a plain cumsum of phi(k) (O(T D)), kept in float32 even under
bf16 autocast: it is a sum of up to `context` positive terms, and its rounding would otherwise
bias every output. The state (S, z) is kept in float32 (or float64 for float64 inputs).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from glmflash.config import ModelConfig
from glmflash.model.rope import RotaryEmbedding

EPS = 1e-6


class LinearState(NamedTuple):
    """Recurrent state of one linear-attention layer: S = sum phi(k) v^T, z = sum phi(k)."""

    S: Tensor  # [B, H, D, Dv]
    z: Tensor  # [B, H, D]


def feature_map(u: Tensor) -> Tensor:
    """phi(u) = elu(u) + 1 > 0."""
    return F.elu(u) + 1


def empty_state(q: Tensor, v: Tensor) -> LinearState:
    """The zero state for queries q [B, H, ..., D] and values v [B, H, ..., Dv]."""
    B, H, D, Dv = q.shape[0], q.shape[1], q.shape[-1], v.shape[-1]
    dtype = torch.promote_types(q.dtype, torch.float32)
    return LinearState(q.new_zeros(B, H, D, Dv, dtype=dtype), q.new_zeros(B, H, D, dtype=dtype))


def elu_linear_attention_step(q: Tensor, k: Tensor, v: Tensor, state: LinearState | None = None,
                              eps: float = EPS) -> tuple[Tensor, LinearState]:
    """One token: q, k [B, H, D], v [B, H, Dv] -> y [B, H, Dv] and the updated state."""
    S, z = state if state is not None else empty_state(q, v)
    fq, fk = feature_map(q), feature_map(k)
    S = S + fk.to(S.dtype)[..., :, None] * v.to(S.dtype)[..., None, :]
    z = z + fk.to(z.dtype)
    num = torch.einsum("bhd,bhde->bhe", fq, S.to(fq.dtype))
    den = (fq.to(z.dtype) * z).sum(-1, keepdim=True)
    return (num.to(den.dtype) / (den + eps)).to(v.dtype), LinearState(S, z)


def elu_linear_attention_recurrent(q: Tensor, k: Tensor, v: Tensor,
                                   state: LinearState | None = None,
                                   eps: float = EPS) -> tuple[Tensor, LinearState]:
    """Reference: the recurrence applied token by token. q, k [B, H, T, D], v [B, H, T, Dv]."""
    ys = []
    for t in range(q.shape[2]):
        y, state = elu_linear_attention_step(q[:, :, t], k[:, :, t], v[:, :, t], state, eps)
        ys.append(y)
    if state is None:
        state = empty_state(q, v)
    return torch.stack(ys, dim=2) if ys else v.clone(), state


def elu_linear_attention_chunked(q: Tensor, k: Tensor, v: Tensor,
                                 state: LinearState | None = None, chunk: int = 32,
                                 eps: float = EPS) -> tuple[Tensor, LinearState]:
    """Chunkwise-parallel form of `elu_linear_attention_recurrent` (same arguments and result).

    q, k [B, H, T, D] (already rotated), v [B, H, T, Dv]; any T >= 1, any chunk >= 1.
    """
    B, H, T, D = q.shape
    Dv = v.shape[-1]
    S0, z0 = state if state is not None else empty_state(q, v)
    fq, fk = feature_map(q), feature_map(k)

    # Denominator phi(q_t)^T (z0 + sum_{s<=t} phi(k_s)), in the state's precision.
    z = z0[:, :, None] + fk.to(z0.dtype).cumsum(dim=2)
    den = (fq.to(z.dtype) * z).sum(-1, keepdim=True)

    # Pad with zero *features* (phi(0) = 1 would leak), then cut into N chunks of C.
    C = min(chunk, T)
    N = -(-T // C)
    pad = N * C - T
    fq, fk, vc = (F.pad(u, (0, 0, 0, pad)).view(B, H, N, C, -1) for u in (fq, fk, v))

    # Intra-chunk: (phi(Q) phi(K)^T ⊙ tril) V.
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    scores = (fq @ fk.transpose(-1, -2)).masked_fill(~causal, 0)
    num = scores @ vc

    # Inter-chunk: phi(Q) S_prev, S_prev = S0 + sum of earlier chunks' phi(K)^T V.
    kv = (fk.transpose(-1, -2) @ vc).to(S0.dtype).cumsum(dim=2)  # [B, H, N, D, Dv], inclusive
    S_prev = torch.cat((S0[:, :, None], S0[:, :, None] + kv[:, :, :-1]), dim=2)
    num = num + fq @ S_prev.to(fq.dtype)

    num = num.view(B, H, N * C, Dv)[:, :, :T]
    y = num.to(den.dtype) / (den + eps)
    return y.to(v.dtype), LinearState(S0 + kv[:, :, -1], z[:, :, -1])


class LinearAttention(nn.Module):
    """Multi-head ELU+1 linear attention: projections, RoPE before phi (unless nope_main)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.n_heads, self.head_dim, self.chunk = cfg.n_heads, cfg.head_dim, cfg.linear_chunk
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)
        self.rope = None if cfg.nope_main else RotaryEmbedding(cfg.head_dim, cfg.context,
                                                               cfg.rope_theta)

    def forward(self, x: Tensor, state: LinearState | None = None,
                offset: int = 0) -> tuple[Tensor, LinearState]:
        """x [B, T, d_model] at positions offset.. -> (y [B, T, d_model], state after x)."""
        B, T, d = x.shape
        q, k, v = (proj(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))
        if self.rope is not None:
            q, k = self.rope(q, offset), self.rope(k, offset)
        if T == 1:
            y, state = elu_linear_attention_step(q[:, :, 0], k[:, :, 0], v[:, :, 0], state)
            y = y[:, :, None]
        else:
            y, state = elu_linear_attention_chunked(q, k, v, state, self.chunk)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, d)), state


__all__ = ["LinearAttention", "LinearState", "elu_linear_attention_chunked",
           "elu_linear_attention_recurrent", "elu_linear_attention_step", "feature_map"]
