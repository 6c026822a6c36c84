"""Gated delta rule: the chunked form against the token-by-token oracle, and the layer's state."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from glmflash.config import model_config
from glmflash.model.attention_delta import (
    MAX_LOG_DECAY,
    DeltaAttention,
    decayed_scores,
    delta_rule_chunked,
    delta_rule_recurrent,
    extra_parameters,
)


def inputs(B, H, T, Dk, Dv, seed=0, dtype=torch.float64, max_log_decay=MAX_LOG_DECAY):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, Dk, generator=g, dtype=dtype)
    k = F.normalize(torch.randn(B, H, T, Dk, generator=g, dtype=dtype), dim=-1)
    v = torch.randn(B, H, T, Dv, generator=g, dtype=dtype)
    log_alpha = -max_log_decay * torch.rand(B, H, T, Dk, generator=g, dtype=dtype)
    beta = torch.rand(B, H, T, generator=g, dtype=dtype)
    S0 = torch.randn(B, H, Dk, Dv, generator=g, dtype=dtype)
    return q, k, v, log_alpha, beta, S0


def layer(seed=0, **overrides) -> DeltaAttention:
    torch.manual_seed(seed)
    return DeltaAttention(model_config("tiny", linear_kind="delta", **overrides)).double()


def test_decayed_scores_against_pairwise_sum():
    g = torch.Generator().manual_seed(3)
    for C in (5, 16, 24, 32, 34):
        a, b = torch.randn(2, 3, C, 4, generator=g, dtype=torch.float64)
        G = (-MAX_LOG_DECAY * torch.rand(3, C, 4, generator=g, dtype=torch.float64)).cumsum(1)
        pairwise = torch.einsum("ntc,nic,ntic->nti", a, b, (G[:, :, None] - G[:, None]).exp())
        causal = torch.ones(C, C, dtype=torch.bool).tril()
        got = decayed_scores(a, b, G)
        assert torch.allclose(got[:, causal], pairwise[:, causal], atol=1e-12), C
        assert torch.isfinite(got).all()


@pytest.mark.parametrize("shape", [(1, 1, 1, 4, 4), (2, 3, 37, 8, 5), (1, 2, 50, 16, 16)])
@pytest.mark.parametrize("chunk", [1, 7, 16, 32, 40])
def test_chunked_equals_recurrent(shape, chunk):
    q, k, v, log_alpha, beta, S0 = inputs(*shape, seed=chunk)
    for init in (None, S0):
        o_ref, S_ref = delta_rule_recurrent(q, k, v, log_alpha.exp(), beta, init)
        o, S = delta_rule_chunked(q, k, v, log_alpha, beta, init, chunk)
        assert torch.allclose(o, o_ref, atol=1e-10), (shape, chunk)
        assert torch.allclose(S, S_ref, atol=1e-10), (shape, chunk)


def test_chunked_gradients_equal_recurrent():
    args = [t.requires_grad_() for t in inputs(2, 2, 29, 6, 5, seed=4)]
    q, k, v, log_alpha, beta, S0 = args
    w = torch.randn(2, 2, 29, 5, dtype=torch.float64)
    o, S = delta_rule_recurrent(q, k, v, log_alpha.exp(), beta, S0)
    ref = torch.autograd.grad((o * w).sum() + S.sum(), args)
    o, S = delta_rule_chunked(q, k, v, log_alpha, beta, S0, chunk=8)
    got = torch.autograd.grad((o * w).sum() + S.sum(), args)
    for a, b in zip(got, ref, strict=True):
        assert torch.allclose(a, b, atol=1e-9)


def test_float32_stable_at_strongest_decay_and_long_chunk():
    """A chunk of 64 at log alpha = -5: e^{-G} reaches e^{320}, far beyond float32."""
    q, k, v, log_alpha, beta, S0 = inputs(2, 2, 70, 8, 8, seed=5)
    log_alpha = torch.full_like(log_alpha, -MAX_LOG_DECAY)
    log_alpha[:, :, ::3] *= torch.rand_like(log_alpha[:, :, ::3])
    o_ref, S_ref = delta_rule_recurrent(q, k, v, log_alpha.exp(), beta, S0)
    f32 = [t.float() for t in (q, k, v, log_alpha, beta, S0)]
    o, S = delta_rule_chunked(*f32, chunk=64)
    assert torch.isfinite(o).all() and torch.isfinite(S).all()
    assert torch.allclose(o.double(), o_ref, atol=1e-4)
    assert torch.allclose(S.double(), S_ref, atol=1e-4)


def test_no_decay_full_write_is_the_plain_delta_rule():
    """alpha = 1, beta = 1: W <- W + (v - W k) k^T, o = W q (W = S^T), in numpy."""
    q, k, v, _, _, _ = inputs(1, 2, 23, 6, 4, seed=6)
    W = np.zeros((2, 4, 6))
    expected = np.zeros((1, 2, 23, 4))
    for h in range(2):
        for t in range(23):
            kt, vt, qt = k[0, h, t].numpy(), v[0, h, t].numpy(), q[0, h, t].numpy()
            W[h] += np.outer(vt - W[h] @ kt, kt)
            expected[0, h, t] = W[h] @ qt
    ones, zeros = torch.ones(1, 2, 23, 6, dtype=torch.float64), torch.zeros(1, 2, 23, 6)
    beta = torch.ones(1, 2, 23, dtype=torch.float64)
    o_rec, _ = delta_rule_recurrent(q, k, v, ones, beta)
    o_chunk, S = delta_rule_chunked(q, k, v, zeros.double(), beta, chunk=8)
    np.testing.assert_allclose(o_rec.numpy(), expected, atol=1e-10)
    np.testing.assert_allclose(o_chunk.numpy(), expected, atol=1e-10)
    np.testing.assert_allclose(S[0].transpose(-1, -2).numpy(), W, atol=1e-10)


def test_chained_halves_equal_one_call():
    attn = layer()
    x = torch.randn(3, 45, 64, dtype=torch.float64)
    full, S_full = attn(x)
    a, state = attn(x[:, :19])
    b, state = attn(x[:, 19:], state)
    assert torch.allclose(torch.cat((a, b), dim=1), full, atol=1e-10)
    assert torch.allclose(state.S, S_full.S, atol=1e-10)
    assert torch.allclose(state.conv, S_full.conv, atol=1e-12)


@pytest.mark.parametrize("conv_size", [1, 2, 4])
def test_token_by_token_decode_equals_full_forward(conv_size):
    attn = layer(conv_size=conv_size)
    x = torch.randn(2, 21, 64, dtype=torch.float64)
    full, _ = attn(x)
    y, state = attn(x[:, :5])  # a prefill, then one token at a time
    pieces = [y]
    for t in range(5, x.shape[1]):
        y, state = attn(x[:, t : t + 1], state, offset=t)
        pieces.append(y)
    assert torch.allclose(torch.cat(pieces, dim=1), full, atol=1e-10)
    assert state.conv.shape == (2, conv_size - 1, 3 * 64)


def test_causal():
    attn = layer()
    x = torch.randn(2, 30, 64, dtype=torch.float64)
    base, _ = attn(x)
    for t in (0, 11, 29):
        changed = x.clone()
        changed[:, t] += 1.0
        y, _ = attn(changed)
        assert torch.allclose(y[:, :t], base[:, :t], atol=1e-12)
        assert not torch.allclose(y[:, t], base[:, t])


def test_gradients_reach_every_parameter():
    attn = layer()
    x = torch.randn(2, 20, 64, dtype=torch.float64, requires_grad=True)
    y, state = attn(x)
    (y.square().sum() + state.S.sum()).backward()
    for name, p in attn.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert x.grad.abs().sum() > 0


def test_bf16_autocast():
    torch.manual_seed(0)
    attn = DeltaAttention(model_config("tiny", linear_kind="delta"))
    x = torch.randn(2, 40, 64)
    ref, _ = attn(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y, state = attn(x)
        y.float().square().sum().backward()
    assert torch.isfinite(y).all() and state.S.dtype == torch.float32
    assert all(torch.isfinite(p.grad).all() for p in attn.parameters())
    assert (y.float() - ref).abs().max() < 0.05 * ref.abs().max()


def test_decay_in_range_and_parameter_budget():
    attn = layer()
    log_alpha = attn.log_decay(torch.randn(2, 9, 64, dtype=torch.float64) * 30)
    assert (log_alpha < 0).all() and (log_alpha >= -MAX_LOG_DECAY).all()
    cfg = model_config("25m", linear_kind="delta")
    n = sum(p.numel() for p in DeltaAttention(cfg).parameters())
    assert n - 4 * cfg.d_model**2 == extra_parameters(cfg) == 16160
