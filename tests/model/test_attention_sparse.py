"""Sparse attention (fixed pattern and lightning indexer) against independent references."""

from __future__ import annotations

import math

import pytest
import torch
from scipy.special import rel_entr

from glmflash.bench.baselines.attention import gathered_sparse_attention
from glmflash.config import model_config
from glmflash.model.attention_sparse import SparseAttention, fixed_sparse_mask

F64 = torch.float64
KINDS = [
    dict(sparse_kind="fixed"),
    dict(sparse_kind="indexer", indexer_topk=6),
    dict(sparse_kind="indexer", indexer_topk=8, index_pool=3),
    dict(sparse_kind="indexer", indexer_topk=8, index_pool=4, nope_main=True),
]


def make(**kw) -> SparseAttention:
    torch.manual_seed(0)
    return SparseAttention(model_config("tiny", **kw)).double()


def inputs(B: int, T: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(B, T, 64, generator=torch.Generator().manual_seed(seed), dtype=F64)


@pytest.mark.parametrize(
    "T,L,offset,window,stride",
    [(9, 9, 0, 3, 4), (1, 30, 29, 8, 8), (5, 12, 7, 4, 3), (20, 20, 0, 64, 5)],
)
def test_fixed_mask_matches_definition(T, L, offset, window, stride):
    mask = fixed_sparse_mask(T, L, offset, window, stride)
    start = offset + T - L  # absolute position of the first key
    for r in range(T):
        i = offset + r
        for c in range(L):
            j = start + c
            assert bool(mask[r, c]) == (j <= i and (i - j < window or j % stride == 0))
    assert fixed_sparse_mask(T, L, offset, window, stride) is mask  # built once


@pytest.mark.parametrize("T", [1, 17, 40])
def test_gathered_baseline_matches_masked_sdpa(T):
    g = torch.Generator().manual_seed(T)
    q, k, v = (torch.randn(2, 3, T, 8, generator=g, dtype=F64) for _ in range(3))
    mask = fixed_sparse_mask(T, T, 0, 5, 7)
    ours = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(gathered_sparse_attention(q, k, v, 5, 7), ours)


def dense_reference(layer: SparseAttention, x: torch.Tensor) -> torch.Tensor:
    """Dense causal softmax attention written out with the layer's weights."""
    B, T, _ = x.shape
    H, D = layer.n_heads, layer.head_dim
    heads = lambda w: (x @ w.weight.T).view(B, T, H, D).transpose(1, 2)  # noqa: E731
    q, k, v = heads(layer.q_proj), heads(layer.k_proj), heads(layer.v_proj)
    if layer.rope is not None:
        q, k = layer.rope(q), layer.rope(k)
    logits = q @ k.transpose(-1, -2) / math.sqrt(D)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    e = torch.exp(logits - logits.max(-1, keepdim=True).values).masked_fill(future, 0)
    y = (e / e.sum(-1, keepdim=True)) @ v
    return y.transpose(1, 2).reshape(B, T, -1) @ layer.o_proj.weight.T


@pytest.mark.parametrize(
    "kw,warmup",
    [
        (dict(sparse_window=30), False),
        (dict(sparse_window=30, nope_main=True), False),
        (dict(sparse_kind="indexer", indexer_topk=30), False),
        (dict(sparse_kind="indexer", index_pool=4, indexer_topk=32), False),
        (dict(sparse_kind="indexer", indexer_topk=2), True),
    ],
)
def test_full_coverage_equals_dense_causal(kw, warmup):
    layer = make(**kw)
    layer.dense_warmup = warmup
    x = inputs(2, 30)
    torch.testing.assert_close(layer(x)[0], dense_reference(layer, x))


def test_sparse_differs_from_dense():
    for kw in KINDS:
        layer = make(**kw)
        x = inputs(1, 30)
        assert not torch.allclose(layer(x)[0], dense_reference(layer, x)), kw


@pytest.mark.parametrize("kw", KINDS)
def test_no_query_sees_the_future(kw):
    layer = make(**kw)
    x = inputs(2, 25).requires_grad_()
    y = layer(x)[0]
    for t in (0, 7, 12, 23):
        (grad,) = torch.autograd.grad(y[:, t].sum(), x, retain_graph=True)
        assert grad[:, t + 1 :].abs().max() == 0
        assert grad[:, t].abs().max() > 0
    # Perturbing the future leaves the past (and its selection) unchanged.
    x2 = x.detach().clone()
    x2[:, 13:] += 10 * torch.randn_like(x2[:, 13:])
    torch.testing.assert_close(layer(x2)[0][:, :13], y.detach()[:, :13], rtol=0, atol=1e-12)


@pytest.mark.parametrize("kw", KINDS)
def test_every_row_sees_itself_and_only_the_past(kw):
    layer = make(**kw)
    T = 33
    if layer.indexer is None:
        masks = [fixed_sparse_mask(T, T, 0, layer.window, layer.stride)[None]]
    else:
        x = inputs(3, T)
        masks = [layer.indexer.select(layer.indexer.scores(x, layer.indexer.keys(x, 0), 0), T)]
    for mask in masks:
        assert mask.diagonal(dim1=-2, dim2=-1).all()
        assert not mask.triu(1).any()


@torch.no_grad()
def brute_force_selection(layer: SparseAttention, x: torch.Tensor):
    """Per query: group scores from explicit loops, then the kept groups, then keys."""
    ix, P = layer.indexer, layer.indexer.pool
    B, T, _ = x.shape
    keys = ix.rope(x @ ix.k_proj.weight.T)
    q = ix.rope((x @ ix.q_proj.weight.T).view(B, T, ix.heads, ix.dim).transpose(1, 2))
    w = x @ ix.w_proj.weight.T / math.sqrt(ix.heads * ix.dim)
    n_groups = max(1, ix.groups_kept)
    masks = torch.zeros(B, T, T, dtype=torch.bool)
    scores = {}
    for b in range(B):
        for t in range(T):
            row = []
            for g in range(t // P + 1):
                key = keys[b, g * P : min(g * P + P, t + 1)].mean(0)
                s = sum(w[b, t, h] * torch.relu(q[b, h, t] @ key) for h in range(ix.heads))
                scores[b, t, g] = s.item()
                rank = math.inf if g == t // P else float(s)
                row.append((rank, g))
            for _, g in sorted(row, reverse=True)[:n_groups]:  # ties: the later group first
                masks[b, t, g * P : min(g * P + P, t + 1)] = True
    return masks, scores


@pytest.mark.parametrize("topk,pool,T", [(5, 1, 20), (16, 1, 12), (7, 3, 23), (8, 4, 17)])
def test_indexer_selection_matches_brute_force(topk, pool, T):
    layer = make(sparse_kind="indexer", indexer_topk=topk, index_pool=pool)
    x = inputs(2, T, seed=topk)
    ix = layer.indexer
    scores = ix.scores(x, ix.keys(x, 0), 0)
    mask, ref_scores = brute_force_selection(layer, x)
    for (b, t, g), s in ref_scores.items():
        assert scores[b, t, g].item() == pytest.approx(s, rel=1e-9, abs=1e-12)
    assert torch.isinf(scores).sum() == scores.numel() - len(ref_scores)
    assert torch.equal(ix.select(scores, T), mask)


@pytest.mark.parametrize("kw", KINDS)
@pytest.mark.parametrize("pieces", [[1] * 24, [11, 1, 1, 20, 7]])
def test_cached_decode_equals_full_forward(kw, pieces):
    layer = make(**kw)
    x = inputs(2, sum(pieces))
    y, cache = layer(x)
    outs, state, pos = [], None, 0
    for n in pieces:
        out, state = layer(x[:, pos : pos + n], state, pos)
        outs.append(out)
        pos += n
    torch.testing.assert_close(torch.cat(outs, dim=1), y)
    for a, b in zip(state, cache, strict=True):
        assert (a is None and b is None) or torch.allclose(a, b)


def test_decode_runs_past_the_context():
    layer = make(sparse_kind="indexer", index_pool=2)
    T = layer.rope.cos.shape[0] + 6
    x = inputs(1, T)
    y, _ = layer(x)
    state, outs = None, []
    for t in range(T):
        out, state = layer(x[:, t : t + 1], state, t)
        outs.append(out)
    torch.testing.assert_close(torch.cat(outs, dim=1), y)


def test_main_loss_does_not_train_the_indexer():
    layer = make(sparse_kind="indexer", indexer_topk=4)
    layer(inputs(2, 20))[0].square().sum().backward()
    assert all(p.grad is None for p in layer.indexer.parameters())
    assert layer.q_proj.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("pool,warmup", [(1, False), (3, False), (4, True)])
def test_indexer_kl_value_and_gradient_path(pool, warmup):
    layer = make(sparse_kind="indexer", indexer_topk=6, index_pool=pool)
    layer.dense_warmup = warmup  # a module is in training mode until .eval()
    x = inputs(2, 19).requires_grad_()
    layer(x)
    kl = layer.indexer_kl
    assert kl.ndim == 0 and torch.isfinite(kl) and kl > 0

    # Value: KL(head-mean dense attention, summed per group || softmax over visible groups).
    B, T, _ = x.shape
    with torch.no_grad():
        _, ref_scores = brute_force_selection(layer, x.detach())
        H, D = layer.n_heads, layer.head_dim
        q = layer.rope((x @ layer.q_proj.weight.T).view(B, T, H, D).transpose(1, 2))
        k = layer.rope((x @ layer.k_proj.weight.T).view(B, T, H, D).transpose(1, 2))
        total = 0.0
        for b in range(B):
            for t in range(T):
                logits = torch.einsum("hd,hsd->hs", q[b, :, t], k[b, :, : t + 1]) / math.sqrt(D)
                att = torch.softmax(logits, -1).mean(0)
                groups = range(t // pool + 1)
                target = [float(att[g * pool : g * pool + pool].sum()) for g in groups]
                logits = torch.tensor([ref_scores[b, t, g] for g in groups], dtype=F64)
                total += rel_entr(target, torch.softmax(logits, 0).numpy()).sum()
    assert kl.item() == pytest.approx(total / (B * T), rel=1e-6)

    main = [layer.q_proj.weight, layer.k_proj.weight, layer.v_proj.weight, layer.o_proj.weight]
    indexer = list(layer.indexer.parameters())
    grads = torch.autograd.grad(kl, [x, *main, *indexer], allow_unused=True)
    assert all(g is None for g in grads[: 1 + len(main)])  # detached input, detached target
    assert all(g is not None and g.abs().sum() > 0 for g in grads[1 + len(main) :])


@pytest.mark.parametrize("warmup", [False, True])
def test_kl_is_none_in_evaluation(warmup):
    layer = make(sparse_kind="indexer")
    layer.dense_warmup = warmup
    layer(inputs(1, 5))
    assert layer.indexer_kl is not None
    layer.eval()
    layer(inputs(1, 5))
    assert layer.indexer_kl is None


@pytest.mark.parametrize("kw", KINDS)
def test_runs_under_bf16_autocast(kw):
    torch.manual_seed(0)
    layer = SparseAttention(model_config("tiny", **kw))
    x = torch.randn(2, 20, 64)
    y32 = layer(x)[0]
    with torch.autocast("cpu", torch.bfloat16):
        y = layer(x)[0]
    assert y.dtype == torch.bfloat16 and torch.isfinite(y).all()
    if layer.indexer is None:  # (rounding may legitimately change an indexer's selection)
        assert (y.float() - y32).norm() / y32.norm() < 2e-2
    else:
        assert layer.indexer_kl.dtype == torch.float32 and torch.isfinite(layer.indexer_kl)


@pytest.mark.parametrize("window, stride", [(8, 8), (5, 3), (4, 7)])
def test_decoding_keeps_the_keys_a_later_query_sees_and_drops_the_rest(window, stride):
    """`GLMFlash.step` evicts from the fixed sparse layers' caches the keys no later query can
    see, once a window's worth can go: after each step a row's cache holds every anchor
    (j % stride == 0) and the last window - 1 keys, and fewer than `window` others, and right
    after an eviction none; rows at different positions keep the union of what each needs.
    The logits still equal each row decoded alone, and the evicted state continued by
    several tokens at once, after `select` reorders the rows, equals a full forward."""
    from glmflash.model.lm import GLMFlash, merge_states

    torch.manual_seed(0)
    model = GLMFlash(
        model_config("tiny", sparse_window=window, sparse_stride=stride, context=96)
    ).eval()
    sparse = [i for i, layer in enumerate(model.layers) if layer.kind == "S"]
    lengths = (3, 11)
    prompts = [torch.randint(4, 260, (1, n)) for n in lengths]
    states = [model.step(p)[1] for p in prompts]
    merged = merge_states(states)
    fed = [p[0].tolist() for p in prompts]

    def needed(last: int) -> set[int]:
        return {j for j in range(last + 1) if j % stride == 0 or last - j < window - 1}

    evictions = 0
    for t in range(40):
        token = torch.randint(4, 260, (len(lengths), 1))
        logits, after = model.step(token, merged)
        for b in range(len(lengths)):
            fed[b].append(int(token[b]))
            alone, states[b] = model.step(token[b : b + 1], states[b])
            assert torch.allclose(logits[b], alone[0], atol=1e-5), (t, b)
            for i in sparse:
                held = set((states[b].layers[i].slots[0] - 1).tolist())
                assert needed(len(fed[b]) - 1) <= held, t
                assert len(held - needed(len(fed[b]) - 1)) < window, t
        # merged rows share indices: right after an eviction, exactly the union of the needs
        if after.layers[sparse[0]].k.shape[2] < merged.layers[sparse[0]].k.shape[2] + 1:
            evictions += 1
            lasts = [len(f) - 1 for f in fed]
            kept = {p - lasts[b] + lasts[-1] for b in range(len(lengths)) for p in needed(lasts[b])}
            for i in sparse:  # as positions of the longest row, which has no padding
                assert set((after.layers[i].slots[-1] - 1).tolist()) == kept, t
        merged = after
    assert evictions >= 2
    chunk = torch.randint(4, 260, (len(lengths), 4))
    logits, _ = model.step(chunk.flip(0), merged.select(torch.tensor([1, 0])))
    for b in range(len(lengths)):
        whole = torch.tensor([fed[b] + chunk[b].tolist()])
        expected = model.step(whole)[0][0, -4:]  # one forward over the whole row
        assert torch.allclose(logits[len(lengths) - 1 - b], expected, atol=1e-5), b
