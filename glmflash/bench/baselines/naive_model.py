"""The straightforward implementation of GLMFlash: the same network, computed the plain way.

    linear attention   a prefix sum of outer products: a [B, H, T, D, D] tensor
    sparse attention   each query's keys gathered into a padded [B, H, T, K, D] tensor
    MoE                one boolean mask per expert to find its tokens
    residual streams   the static mixer (stream_mixer='static'), the reference lab's form,
                       as multiply-adds of whole streams with autograd's backward

Each module is a subclass of the model's own that overrides only the core computation, so
parameters, initialisation and the rest of the network are the model's; with the same weights
the naive model computes the same function as GLMFlash with the static mixer. Continuing from a
decoding state uses the model's own path. The gated delta rule and the lightning indexer have
no naive form here and are kept as they are.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor, nn

from glmflash.bench.baselines.attention import cumsum_linear_attention, gathered_sparse_attention
from glmflash.config import ModelConfig
from glmflash.model.attention_linear import LinearAttention, LinearState, feature_map
from glmflash.model.attention_sparse import KVCache, SparseAttention, positions
from glmflash.model.lm import Block, GLMFlash
from glmflash.model.moe import MoE, swiglu
from glmflash.model.streams import StaticMixer


def split_heads(
    attn: LinearAttention | SparseAttention, x: Tensor, offset: int
) -> tuple[Tensor, Tensor, Tensor]:
    """x [B, T, d_model] -> rotated queries and keys, and values, each [B, H, T, D]."""
    B, T, _ = x.shape
    q, k, v = (
        proj(x).view(B, T, attn.n_heads, attn.head_dim).transpose(1, 2)
        for proj in (attn.q_proj, attn.k_proj, attn.v_proj)
    )
    if attn.rope is not None:
        q, k = attn.rope(q, offset), attn.rope(k, offset)
    return q, k, v


def merge_heads(attn: LinearAttention | SparseAttention, y: Tensor) -> Tensor:
    """y [B, H, T, D] -> the output projection of the concatenated heads [B, T, d_model]."""
    return attn.o_proj(y.transpose(1, 2).flatten(2))


class CumsumLinearAttention(LinearAttention):
    """ELU+1 linear attention with every prefix state S_t materialised by a cumulative sum."""

    def forward(
        self, x: Tensor, state: LinearState | None = None, offset: int = 0
    ) -> tuple[Tensor, LinearState]:
        if state is not None or x.shape[1] == 1:
            return super().forward(x, state, offset)
        q, k, v = split_heads(self, x, offset)
        with torch.no_grad():  # the state after x, for decoding: S = phi(K)^T V, z = phi(K)^T 1
            fk = feature_map(k)
            last = LinearState(fk.transpose(-1, -2) @ v, fk.sum(2))
        return merge_heads(self, cumsum_linear_attention(q, k, v)), last


class GatheredSparseAttention(SparseAttention):
    """Local-window + strided-anchor attention by gathering each query's keys."""

    def forward(
        self, x: Tensor, state: KVCache | None = None, offset: int = 0
    ) -> tuple[Tensor, KVCache]:
        if state is not None or self.indexer is not None:
            return super().forward(x, state, offset)
        q, k, v = split_heads(self, x, offset)
        y = gathered_sparse_attention(q, k, v, self.window, self.stride)
        return merge_heads(self, y), KVCache(
            k, v, positions(offset, x.shape[0], x.shape[1], x.device) + 1
        )


class MaskedMoE(MoE):
    """Routed experts found by a boolean mask per expert, accumulated one expert at a time."""

    def experts(self, x: Tensor, index: Tensor, gates: Tensor, counts: Tensor) -> Tensor:
        y = x.new_zeros(x.shape)  # the masks find each expert's rows: counts go unused
        for e in range(self.n_experts):
            token, slot = torch.where(index == e)
            out = swiglu(x[token], self.w1[e], self.w3[e], self.w2[e])
            y = y.index_add(0, token, out * gates[token, slot, None].to(out.dtype))
        return y


class PlainStaticMixer(StaticMixer):
    """The static mixer written the plain way: H'_s = sum_t M_st H_t + h_post_s y as S
    multiply-adds of whole streams, x as a weighted sum over streams, autograd's backward."""

    def read(self, h: Tensor) -> tuple[Tensor, Any]:
        w = torch.softmax(self.pre, 0)
        return (w[:, None] * h).sum(-2), None

    def write(self, h: Tensor, y: Tensor, ctx: Any) -> Tensor:
        out = self.post[:, None] * y.unsqueeze(-2).to(h.dtype)
        for m_t, h_t in zip(self.mix.unbind(-1), h.unbind(-2), strict=True):  # column t of M
            out = out + m_t[:, None] * h_t.unsqueeze(-2)
        return out


NAIVE_FORMS: dict[type[nn.Module], type[nn.Module]] = {
    LinearAttention: CumsumLinearAttention,
    SparseAttention: GatheredSparseAttention,
    MoE: MaskedMoE,
    StaticMixer: PlainStaticMixer,
}


def naive_form(module: nn.Module, cfg: ModelConfig) -> nn.Module:
    """The naive subclass of `module`'s class, holding the same parameters and buffers."""
    naive = NAIVE_FORMS[type(module)](cfg)
    naive.load_state_dict(module.state_dict())
    return naive.to(next(module.parameters()).device)


def naive_glmflash(cfg: ModelConfig) -> GLMFlash:
    """GLMFlash with the static mixer and every attention and MoE in its naive form."""
    cfg = dataclasses.replace(cfg, stream_mixer="static")
    model = GLMFlash(cfg)
    for block in (m for m in model.modules() if isinstance(m, Block)):
        if type(block.attn) in NAIVE_FORMS:
            block.attn = naive_form(block.attn, cfg)
        block.moe = naive_form(block.moe, cfg)
        block.hc_attn, block.hc_moe = (naive_form(m, cfg) for m in (block.hc_attn, block.hc_moe))
    return model


__all__ = [
    "CumsumLinearAttention",
    "GatheredSparseAttention",
    "MaskedMoE",
    "PlainStaticMixer",
    "naive_form",
    "naive_glmflash",
]
