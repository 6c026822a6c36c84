"""The short causal convolution of the linear-attention layers (H3, Based, DeltaNet, KDA):
a depthwise filter of K taps over time on each q / k / v channel, then SiLU,

    y_t = SiLU( sum_{j<K} w_j * x_{t-K+1+j} )       (x before the sequence: the `past` inputs)

so that a token's key and query already mix its few predecessors: what associative recall
(finding the token after an earlier occurrence of this one) needs and a bare linear-attention
state does not provide. Decoding carries the last K-1 inputs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def causal_conv(u: Tensor, past: Tensor, weight: Tensor) -> tuple[Tensor, Tensor]:
    """SiLU(causal depthwise conv) of u [B, T, C] after the K-1 earlier inputs `past`
    [B, K-1, C], with `weight` [C, K]; returns the result and the next call's `past`."""
    T, K = u.shape[1], weight.shape[1]
    xs = torch.cat((past.to(u.dtype), u), dim=1)  # [B, K - 1 + T, C]
    w = weight.to(u.dtype)
    # K shifted multiply-adds (a grouped conv1d is much slower on CPU, its backward above all)
    y = sum(xs[:, j : j + T] * w[:, j] for j in range(K))
    return F.silu(y), xs[:, xs.shape[1] - (K - 1) :]


def conv_weight(channels: int, taps: int) -> torch.nn.Parameter:
    """A depthwise filter bank [channels, taps] ~ U(-1/sqrt(K), 1/sqrt(K)) (conv1d's default)."""
    return torch.nn.Parameter(torch.empty(channels, taps).uniform_(-(taps**-0.5), taps**-0.5))


__all__ = ["causal_conv", "conv_weight"]
