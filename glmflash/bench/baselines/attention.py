"""Straightforward forms of our attention kernels, for benchmarks and as test references.

Both give the same outputs as the model's kernels, at a much higher cost in time or memory.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from glmflash.model.attention_linear import EPS, feature_map


def cumsum_linear_attention(q: Tensor, k: Tensor, v: Tensor, eps: float = EPS) -> Tensor:
    """ELU+1 linear attention by a prefix sum of outer products.

    Materialises S_t = sum_{s<=t} phi(k_s) v_s^T for every t: a [B, H, T, D, Dv] tensor.
    q, k [B, H, T, D], v [B, H, T, Dv] -> [B, H, T, Dv].
    """
    fq, fk = feature_map(q), feature_map(k)
    S = (fk[..., :, None] * v[..., None, :]).cumsum(dim=2)
    num = torch.einsum("bhtd,bhtde->bhte", fq, S)
    den = (fq * fk.cumsum(dim=2)).sum(-1, keepdim=True)
    return num / (den + eps)


def gathered_sparse_attention(q: Tensor, k: Tensor, v: Tensor, window: int, stride: int) -> Tensor:
    """Local-window + strided-anchor attention by gathering each query's keys.

    Query i attends to key j iff j <= i and (i - j < window or j % stride == 0). The allowed
    keys of every query are gathered into a padded [B, H, T, K, D] tensor (K = the largest
    count), then softmax over the valid entries. q, k, v [B, H, T, D] -> [B, H, T, D].
    """
    T = q.shape[2]
    i = torch.arange(T, device=q.device)[:, None]
    j = torch.arange(T, device=q.device)[None, :]
    allowed = (j <= i) & ((i - j < window) | (j % stride == 0))
    K = int(allowed.sum(-1).max())
    # Allowed key indices first in each row (a stable sort keeps them in order), padded.
    index = torch.sort(allowed.int(), dim=-1, descending=True, stable=True).indices[:, :K]
    valid = torch.gather(allowed, 1, index)  # [T, K]
    kg, vg = k[:, :, index], v[:, :, index]  # [B, H, T, K, D]
    scores = (q[:, :, :, None, :] * kg).sum(-1) / math.sqrt(q.shape[-1])
    weights = scores.masked_fill(~valid, float("-inf")).softmax(dim=-1)
    return (weights[..., None] * vg).sum(dim=-2)


__all__ = ["cumsum_linear_attention", "gathered_sparse_attention"]
