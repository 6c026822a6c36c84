"""Causal linear attention with ELU+1 feature maps, computed chunkwise.

With phi(u) = elu(u) + 1 (positive, so the normaliser never vanishes):

    S_t = sum_{s<=t} phi(k_s) v_s^T        [D, D]
    z_t = sum_{s<=t} phi(k_s)              [D]
    y_t = phi(q_t)^T S_t / (phi(q_t)^T z_t + eps)

Decoding keeps only (S, z): O(1) memory per token. Training uses the chunkwise form: the
sequence is cut into chunks of C tokens; inside a chunk the causal product
(phi(Q) phi(K)^T ⊙ tril) V is a small dense matmul, and everything before the chunk enters
through phi(Q) S, with S the state at the chunk's start, carried from chunk to chunk. No
per-token [D, D] state is ever formed; a loop over T / C chunks costs little Python time.

The kernels run in float32 (float64 for float64 inputs) with autocast switched off, and return
the values' dtype. The normaliser phi(q_t)^T z_t is a sum of up to `context` positive terms whose
bf16 rounding would bias every output; and on CPUs without native bf16 the float32 kernel is
also several times faster. The state (S, z) is always kept in that precision.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from glmflash.config.model import ModelConfig
from glmflash.model.heads import HeadProjections
from glmflash.model.short_conv import causal_conv, conv_weight

EPS = 1e-6


class LinearState(NamedTuple):
    """Recurrent state of one linear-attention layer: S = sum phi(k) v^T, z = sum phi(k), and
    with the short convolution on, its last K-1 inputs."""

    S: Tensor  # [B, H, D, Dv]
    z: Tensor  # [B, H, D]
    conv: Tensor | None = None  # [B, K-1, 3 d_model] (elu_conv)


def feature_map(u: Tensor) -> Tensor:
    """phi(u) = elu(u) + 1 > 0."""
    return F.elu(u) + 1


def empty_state(q: Tensor, v: Tensor) -> LinearState:
    """The zero state for queries q [B, H, ..., D] and values v [B, H, ..., Dv]."""
    B, H, D, Dv = q.shape[0], q.shape[1], q.shape[-1], v.shape[-1]
    dtype = torch.promote_types(q.dtype, torch.float32)
    return LinearState(q.new_zeros(B, H, D, Dv, dtype=dtype), q.new_zeros(B, H, D, dtype=dtype))


Kernel = Callable[..., tuple[Tensor, LinearState]]


def full_precision(kernel: Kernel) -> Kernel:
    """Run kernel(q, k, v, state, ...) in >= float32 without autocast; y comes back in v's dtype."""

    @functools.wraps(kernel)
    def wrapped(
        q: Tensor, k: Tensor, v: Tensor, state: LinearState | None = None, *args, **kwargs
    ) -> tuple[Tensor, LinearState]:
        dtype = torch.promote_types(q.dtype, torch.float32)
        if state is not None:
            state = LinearState(state.S.to(dtype), state.z.to(dtype))
        with torch.autocast(q.device.type, enabled=False):
            y, state = kernel(q.to(dtype), k.to(dtype), v.to(dtype), state, *args, **kwargs)
        return y.to(v.dtype), state

    return wrapped


@full_precision
def elu_linear_attention_step(
    q: Tensor, k: Tensor, v: Tensor, state: LinearState | None = None, eps: float = EPS
) -> tuple[Tensor, LinearState]:
    """One token: q, k [B, H, D], v [B, H, Dv] -> y [B, H, Dv] and the updated state."""
    S, z = (state if state is not None else empty_state(q, v))[:2]
    fq, fk = feature_map(q), feature_map(k)
    S = S + fk[..., :, None] * v[..., None, :]
    z = z + fk
    num = torch.einsum("bhd,bhde->bhe", fq, S)
    den = (fq * z).sum(-1, keepdim=True)
    return num / (den + eps), LinearState(S, z)


def elu_linear_attention_recurrent(
    q: Tensor, k: Tensor, v: Tensor, state: LinearState | None = None, eps: float = EPS
) -> tuple[Tensor, LinearState]:
    """Reference: the recurrence applied token by token. q, k [B, H, T, D], v [B, H, T, Dv]."""
    ys = []
    for t in range(q.shape[2]):
        y, state = elu_linear_attention_step(q[:, :, t], k[:, :, t], v[:, :, t], state, eps)
        ys.append(y)
    if state is None:
        state = empty_state(q, v)
    return torch.stack(ys, dim=2) if ys else v.clone(), state


@full_precision
def elu_linear_attention_chunked(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    state: LinearState | None = None,
    chunk: int = 32,
    eps: float = EPS,
) -> tuple[Tensor, LinearState]:
    """Chunkwise form of `elu_linear_attention_recurrent` (same arguments and result).

    q, k [B, H, T, D] (already rotated), v [B, H, T, Dv]; any T >= 1, any chunk >= 1 (the last
    chunk may be shorter). For each chunk, with (S, z) the state at its start:
        A   = phi(Q) phi(K)^T ⊙ tril                        [C, C]
        num = A V + phi(Q) S,   den = A 1 + phi(Q) z
        S  += phi(K)^T V,       z  += phi(K)^T 1
    """
    S, z = (state if state is not None else empty_state(q, v))[:2]
    ys = []
    for start in range(0, q.shape[2], chunk):
        fq, fk = (feature_map(u[:, :, start : start + chunk]) for u in (q, k))
        vc = v[:, :, start : start + chunk]
        A = (fq @ fk.transpose(-1, -2)).tril()
        num = A @ vc + fq @ S
        den = A.sum(-1, keepdim=True) + fq @ z[..., None]
        ys.append(num / (den + eps))
        S = S + fk.transpose(-1, -2) @ vc
        z = z + fk.sum(dim=2)
    return torch.cat(ys, dim=2), LinearState(S, z)


class LinearAttention(HeadProjections):
    """Multi-head ELU+1 linear attention: projections, with `elu_conv` a short causal
    convolution on q, k, v (short_conv.py), RoPE before phi (unless nope_main)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.chunk = cfg.linear_chunk
        self.conv_weight = conv_weight(3 * cfg.d_model, cfg.conv_size) if cfg.elu_conv else None

    def forward(
        self, x: Tensor, state: LinearState | None = None, offset: int | Tensor = 0
    ) -> tuple[Tensor, LinearState]:
        """x [B, T, d_model] at positions offset.. -> (y [B, T, d_model], state after x)."""
        conv, mix = None, None
        if self.conv_weight is not None:
            K = self.conv_weight.shape[1]
            past = x.new_zeros(x.shape[0], K - 1, 3 * x.shape[2]) if state is None else state.conv

            def mix(u: Tensor) -> Tensor:
                nonlocal conv
                u, conv = causal_conv(u, past, self.conv_weight)
                return u

        q, k, v = self.heads(x, offset, mix)
        if x.shape[1] == 1:
            y, state = elu_linear_attention_step(q[:, :, 0], k[:, :, 0], v[:, :, 0], state)
            y = y[:, :, None]
        else:
            y, state = elu_linear_attention_chunked(q, k, v, state, self.chunk)
        return self.merge(y), state._replace(conv=conv)


__all__ = [
    "LinearAttention",
    "LinearState",
    "elu_linear_attention_chunked",
    "elu_linear_attention_recurrent",
    "elu_linear_attention_step",
    "feature_map",
]
