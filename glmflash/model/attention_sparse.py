"""Sparse softmax attention: a fixed local+strided pattern, or keys chosen by a lightning indexer.

Both kinds compute softmax(q k^T / sqrt(D)) V through `scaled_dot_product_attention` with a
boolean mask (True = may attend); every query always sees itself, never the future.

fixed:   query i sees key j iff j <= i and (i - j < window or j % stride == 0). The mask depends
         only on (query length, key length, offset) and is cached.

indexer: a `LightningIndexer` (DeepSeek-V3.2 / GLM style) scores every causal key from the
         detached input, I[t, s] = sum_h w_h(x_t) relu(q^I_{t,h} . k^I_s), and each query keeps
         its top-k keys (itself always included). See `LightningIndexer` for IndexPool.

Training the indexer (indexer kind only):
  * in training mode, forward stores `indexer_kl`, the mean over batch and queries of
    KL(p || softmax(I)), where p is the dense causal main attention distribution averaged over
    heads (float32, detached, summed within each key group under IndexPool) and softmax(I) runs
    over the query's causal keys (groups); the model sums it over its sparse layers into
    `ModelOutput.indexer_kl`, as it sums the MoE balance losses. Its gradient reaches only the
    indexer's parameters: the target is detached and the indexer reads x.detach(). In
    evaluation mode (and for the fixed kind) `indexer_kl` is None.
  * `dense_warmup = True` (`GLMFlash.set_indexer_warmup`): main attention is dense causal and
    the selection is not used, while the indexer learns from the KL alone.
  The main loss never trains the indexer (the selection is a boolean mask).

Decoding: `KVCache` holds the rotated keys and values of the previous positions, the slot of
each (its position + 1; 0 marks padding), and the indexer's rotated keys; forward on
consecutive pieces chained through it equals one forward. Rows of different lengths decode
together (fixed kind) over caches padded on the left, each row at its own position: a chained
forward masks by the keys' slots (`slot_mask`). A decoding step needs no key that no later
query can see: `GLMFlash.step` drops them (fixed kind; `still_visible`, `evict`) once a window's
worth can go, so a row's cache holds fewer than 2 window + L / stride keys instead of L, and
each step's concatenation copies that much rather than the whole prefix (merged rows at
different positions keep the anchors of each).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from glmflash.config.model import ModelConfig
from glmflash.model.heads import HeadProjections
from glmflash.model.rope import RotaryEmbedding


class KVCache(NamedTuple):
    """What a sparse layer keeps of what it has seen: rotated keys and values, each key's slot
    (position + 1; 0 is the left padding `merge_states` adds), and the indexer's keys."""

    k: Tensor  # [B, H, L, D]
    v: Tensor  # [B, H, L, D]
    slots: Tensor  # [B, L] long
    index_k: Tensor | None = None  # [B, L, indexer_dim], indexer kind only


def positions(offset: int | Tensor, batch: int, T: int, device: torch.device) -> Tensor:
    """[B, T] positions of T tokens at offset.. (one int, or one per row)."""
    start = torch.as_tensor(offset, device=device).reshape(-1, 1)
    return (start + torch.arange(T, device=device)).expand(batch, T)


@functools.lru_cache(maxsize=512)
@torch.inference_mode(False)  # a mask cached while decoding serves training too
def fixed_sparse_mask(
    T: int, L: int, offset: int, window: int, stride: int, device: torch.device | str = "cpu"
) -> Tensor:
    """[T, L] mask for queries at offset..offset+T-1 over the L keys ending at the last query.

    With window = L it is the dense causal mask. Cached: do not modify the returned tensor.
    """
    i = torch.arange(offset, offset + T, device=device)[:, None]
    j = torch.arange(offset + T - L, offset + T, device=device)[None, :]
    return _visible(i, j, window, stride)


def _visible(i: Tensor, j: Tensor, window: int, stride: int) -> Tensor:
    """Whether query position i sees key position j (broadcast): causal, and in the window or
    an anchor."""
    return (j <= i) & ((i - j < window) | (j % stride == 0))


def slot_mask(query: Tensor, slots: Tensor, window: int, stride: int) -> Tensor:
    """[B, T, L] masks of `fixed_sparse_mask` for queries at positions query [B, T] over keys
    in slots [B, L] (position + 1), whatever positions the cache holds; slot 0 is padding,
    never attended."""
    j = slots[:, None, :] - 1
    return (j >= 0) & _visible(query[:, :, None], j, window, stride)


def still_visible(slots: Tensor, window: int, stride: int) -> Tensor | None:
    """Indices of the cached keys (slots [B, L]) that some later query can see, or None while
    fewer than `window` could go (dropping them one at a time would copy the cache at every
    step). A key at position j is seen by a query i >= last + 1 iff it is an anchor
    (j % stride == 0) or i - j < window at i = last + 1, i.e. last - j < window - 1. The rows
    of a batch share their indices: an index stays while any row needs it."""
    j = slots - 1
    last = j.max(dim=1, keepdim=True).values  # each row's newest key
    keep = ((j >= 0) & ((j % stride == 0) | (last - j < window - 1))).any(0)
    if int(keep.numel() - keep.sum()) < window:
        return None
    return keep.nonzero().flatten()


def evict(cache: KVCache, index: Tensor) -> KVCache:
    """The cache with only its keys at `index` (`still_visible`)."""
    return cache._replace(
        k=cache.k.index_select(2, index),
        v=cache.v.index_select(2, index),
        slots=cache.slots.index_select(1, index),
    )


class LightningIndexer(nn.Module):
    """Index scores I[t, s] = sum_h w_h(x_t) relu(q^I_{t,h} . k^I_s) / sqrt(H_I D_I).

    Few heads (H_I) of small dimension (D_I) and one key per position shared by the heads;
    RoPE always (also under nope_main); the input is x.detach(), so only the KL trains it.

    IndexPool (pool P > 1): keys are grouped by cache index, g = s // P, and a query picks whole
    groups. A complete group is represented by the mean of its P keys. The query's own group is
    in general incomplete: it is always selected (that is how "the query sees itself" holds),
    and for the KL its key is the mean of its keys up to the query, so nothing in the future is
    used. Groups after the query's own are invisible. Each query keeps max(1, topk // P) groups;
    ties (relu gives exact zeros) go to the most recent group. P = 1 is the unpooled indexer.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.heads, self.dim, self.pool = cfg.indexer_heads, cfg.indexer_dim, cfg.index_pool
        self.groups_kept = max(1, cfg.indexer_topk // cfg.index_pool)
        self.q_proj = nn.Linear(cfg.d_model, self.heads * self.dim, bias=False)
        self.k_proj = nn.Linear(cfg.d_model, self.dim, bias=False)
        self.w_proj = nn.Linear(cfg.d_model, self.heads, bias=False)
        self.rope = RotaryEmbedding(self.dim, cfg.context, cfg.rope_theta)
        self.scale = (self.heads * self.dim) ** -0.5

    def keys(self, x: Tensor, offset: int) -> Tensor:
        """Rotated indexer keys [B, T, D_I] of x [B, T, d_model]."""
        return self.rope(self.k_proj(x.detach()), offset)

    def scores(self, x: Tensor, keys: Tensor, offset: int) -> Tensor:
        """Group scores [B, T, G] of the queries x (the last T of the L keys); -inf = invisible.

        keys [B, L, D_I] are all keys so far; G = ceil(L / P) groups.
        """
        B, T, _ = x.shape
        L, P = keys.shape[1], self.pool
        x = x.detach()
        q = self.rope(self.q_proj(x).view(B, T, self.heads, self.dim).transpose(1, 2), offset)
        w = self.w_proj(x) * self.scale  # [B, T, H_I]
        t = torch.arange(L - T, L, device=x.device)  # cache index of each query
        own = t // P
        # Keys of the complete groups (mean of P), and of each query's own group up to itself.
        full = keys[:, : L // P * P].view(B, L // P, P, self.dim).mean(dim=2)
        csum = F.pad(keys.cumsum(dim=1), (0, 0, 1, 0))
        own_key = (csum[:, t + 1] - csum[:, own * P]) / (t + 1 - own * P)[:, None]
        s_full = torch.einsum(
            "bht,bhtg->btg", w.transpose(1, 2), torch.einsum("bhtd,bgd->bhtg", q, full).relu()
        )
        s_own = torch.einsum(
            "bht,bht->bt", w.transpose(1, 2), torch.einsum("bhtd,btd->bht", q, own_key).relu()
        )
        G = -(-L // P)
        s = F.pad(s_full, (0, G - L // P), value=float("-inf"))
        earlier = torch.arange(G, device=x.device)[None, :] < own[:, None]  # [T, G]
        s = s.masked_fill(~earlier, float("-inf"))
        return s.scatter(-1, own.expand(B, T)[..., None], s_own[..., None])

    def select(self, scores: Tensor, L: int) -> Tensor:
        """Key mask [B, T, L] from group scores [B, T, G]: own group + best earlier groups."""
        B, T, G = scores.shape
        P = self.pool
        t = torch.arange(L - T, L, device=scores.device)
        own = (t // P).expand(B, T)[..., None]
        ranked = scores.detach().scatter(-1, own, float("inf"))
        # Stable sort of the reversed row: among equal scores the later group ranks first.
        order = torch.sort(ranked.flip(-1), dim=-1, descending=True, stable=True).indices
        kept = G - 1 - order[..., : min(self.groups_kept, G)]
        chosen = torch.zeros_like(ranked, dtype=torch.bool).scatter(-1, kept, True)
        chosen &= ranked > float("-inf")
        j = torch.arange(L, device=scores.device)
        return chosen[:, :, j // P] & (j[None, :] <= t[:, None])


class SparseAttention(HeadProjections):
    """Multi-head softmax attention over a sparse set of causal keys, with a KV cache. The
    indexer keeps its own init (it is trained towards the main attention)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.window, self.stride = cfg.sparse_window, cfg.sparse_stride
        self.indexer = LightningIndexer(cfg) if cfg.sparse_kind == "indexer" else None
        self.dense_warmup = False
        self.indexer_kl: Tensor | None = None

    def forward(
        self, x: Tensor, state: KVCache | None = None, offset: int | Tensor = 0
    ) -> tuple[Tensor, KVCache]:
        """x [B, T, d_model] at positions offset.. -> (y [B, T, d_model], cache including x).
        A tensor offset [B] places each row at its own position, over a cache padded on the
        left (`merge_states`): the fixed kind only."""
        B, T = x.shape[:2]
        ragged = isinstance(offset, Tensor)
        if ragged and self.indexer is not None:
            raise ValueError("per-row positions need the fixed sparse kind (no indexer)")
        q, k, v = self.heads(x, offset)
        index_k = self.indexer.keys(x, offset) if self.indexer is not None else None
        query = positions(offset, B, T, x.device)
        slots = query + 1
        if state is not None:
            k, v = torch.cat((state.k, k), dim=2), torch.cat((state.v, v), dim=2)
            slots = torch.cat((state.slots, slots), dim=1)
            if index_k is not None:
                index_k = torch.cat((state.index_k, index_k), dim=1)
        L = k.shape[2]

        self.indexer_kl = None
        if self.indexer is None and (ragged or state is not None):  # keys by their slots
            mask = slot_mask(query, slots, self.window, self.stride)[:, None]
        elif self.indexer is None:
            mask = fixed_sparse_mask(T, L, offset, self.window, self.stride, x.device)
        else:
            causal = fixed_sparse_mask(T, L, offset, L, L, x.device)  # window L: dense
            if self.dense_warmup and not self.training:
                mask = causal
            else:
                scores = self.indexer.scores(x, index_k, offset)
                if self.training:
                    self.indexer_kl = self._indexer_kl(q, k, causal, scores)
                mask = causal if self.dense_warmup else self.indexer.select(scores, L)[:, None]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.merge(y), KVCache(k, v, slots, index_k)

    def _indexer_kl(self, q: Tensor, k: Tensor, causal: Tensor, scores: Tensor) -> Tensor:
        """KL(p || softmax(scores)), p = dense causal attention, head mean, per key group."""
        with torch.no_grad():
            logits = q.float() @ k.float().transpose(-1, -2) / math.sqrt(self.head_dim)
            p = logits.masked_fill(~causal, float("-inf")).softmax(dim=-1).mean(dim=1)
            group = torch.arange(k.shape[2], device=k.device) // self.indexer.pool
            p = p.new_zeros(scores.shape).index_add_(-1, group, p)  # [B, T, G]
        visible = scores > float("-inf")
        log_r = scores.float().log_softmax(dim=-1).masked_fill(~visible, 0)
        return (torch.xlogy(p, p) - p * log_r).sum(dim=-1).mean()


__all__ = [
    "KVCache",
    "LightningIndexer",
    "SparseAttention",
    "evict",
    "fixed_sparse_mask",
    "positions",
    "slot_mask",
    "still_visible",
]
