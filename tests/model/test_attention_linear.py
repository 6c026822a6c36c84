"""ELU+1 linear attention: the chunked form against the token-by-token recurrence."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from glmflash.bench.baselines.attention import cumsum_linear_attention
from glmflash.config import model_config
from glmflash.model.attention_linear import (
    LinearAttention,
    LinearState,
    elu_linear_attention_chunked,
    elu_linear_attention_recurrent,
    elu_linear_attention_step,
)

F64 = torch.float64


def qkv(B: int, H: int, T: int, D: int, Dv: int, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, T, n, generator=g, dtype=F64) for n in (D, D, Dv))


def random_state(B: int, H: int, D: int, Dv: int, seed: int) -> LinearState:
    g = torch.Generator().manual_seed(seed)
    return LinearState(
        torch.randn(B, H, D, Dv, generator=g, dtype=F64),
        torch.rand(B, H, D, generator=g, dtype=F64) * 5,
    )


def naive_recurrence(q, k, v, S, z):
    """Independent oracle: explicit per-(b, h, t) loop with phi written out."""
    phi = lambda u: torch.where(u > 0, u + 1, torch.exp(u))  # noqa: E731  elu(u) + 1
    B, H, T, _ = q.shape
    y = torch.empty_like(v)
    S, z = S.clone(), z.clone()
    for b in range(B):
        for h in range(H):
            for t in range(T):
                S[b, h] += torch.outer(phi(k[b, h, t]), v[b, h, t])
                z[b, h] += phi(k[b, h, t])
                y[b, h, t] = phi(q[b, h, t]) @ S[b, h] / (phi(q[b, h, t]) @ z[b, h] + 1e-6)
    return y, S, z


def test_step_recurrence_matches_explicit_loop():
    q, k, v = qkv(2, 2, 6, 4, 3, seed=0)
    s0 = random_state(2, 2, 4, 3, seed=1)
    y, s = elu_linear_attention_recurrent(q, k, v, s0)
    y_ref, S_ref, z_ref = naive_recurrence(q, k, v, s0.S, s0.z)
    torch.testing.assert_close(y, y_ref)
    torch.testing.assert_close(s.S, S_ref)
    torch.testing.assert_close(s.z, z_ref)


@pytest.mark.parametrize("T,chunk", [(1, 4), (7, 3), (16, 4), (16, 16), (23, 8), (5, 32), (40, 1)])
@pytest.mark.parametrize("initial", [False, True])
def test_chunked_matches_recurrence(T, chunk, initial):
    B, H, D, Dv = 2, 3, 8, 5
    q, k, v = qkv(B, H, T, D, Dv, seed=T * 100 + chunk)
    s0 = random_state(B, H, D, Dv, seed=T) if initial else None
    y, s = elu_linear_attention_chunked(q, k, v, s0, chunk=chunk)
    y_ref, s_ref = elu_linear_attention_recurrent(q, k, v, s0)
    torch.testing.assert_close(y, y_ref)
    torch.testing.assert_close(s.S, s_ref.S)
    torch.testing.assert_close(s.z, s_ref.z)


@pytest.mark.parametrize("split", [1, 9, 12, 20])
def test_two_chained_calls_equal_one(split):
    q, k, v = qkv(2, 2, 21, 6, 6, seed=split)
    y, s = elu_linear_attention_chunked(q, k, v, chunk=4)
    y1, s1 = elu_linear_attention_chunked(
        q[:, :, :split], k[:, :, :split], v[:, :, :split], chunk=4
    )
    y2, s2 = elu_linear_attention_chunked(
        q[:, :, split:], k[:, :, split:], v[:, :, split:], s1, chunk=4
    )
    torch.testing.assert_close(torch.cat((y1, y2), dim=2), y)
    torch.testing.assert_close(s2.S, s.S)
    torch.testing.assert_close(s2.z, s.z)


@pytest.mark.parametrize("T", [1, 13, 32])
def test_cumsum_baseline_matches(T):
    q, k, v = qkv(3, 2, T, 8, 8, seed=T)
    torch.testing.assert_close(
        cumsum_linear_attention(q, k, v), elu_linear_attention_chunked(q, k, v, chunk=8)[0]
    )


class MaxNumel(TorchDispatchMode):
    """Records the largest tensor any op produces."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def test_chunked_never_forms_per_token_states():
    B, H, T, D = 2, 2, 32, 16
    q, k, v = (u.float().requires_grad_() for u in qkv(B, H, T, D, D, seed=0))
    per_token_states = B * H * T * D * D
    with MaxNumel() as ours:
        elu_linear_attention_chunked(q, k, v, chunk=8)[0].sum().backward()
    with MaxNumel() as baseline:
        cumsum_linear_attention(q, k, v).sum().backward()
    assert baseline.largest >= per_token_states  # the probe does see such a tensor
    assert ours.largest < per_token_states // 8


def make(nope_main: bool = False, **kw) -> LinearAttention:
    torch.manual_seed(0)
    return LinearAttention(model_config("tiny", nope_main=nope_main, **kw)).double()


def test_parameters_are_four_square_projections():
    cfg = model_config("tiny")
    layer = LinearAttention(cfg)
    assert sum(p.numel() for p in layer.parameters()) == 4 * cfg.d_model**2


@pytest.mark.parametrize("nope_main", [False, True])
def test_module_matches_reference_math(nope_main):
    """Projections, RoPE before phi, the recurrence, output projection, written out."""
    layer = make(nope_main)
    B, T, offset = 2, 19, 5
    x = torch.randn(B, T, 64, dtype=F64)
    y, state = layer(x, offset=offset)
    H, D = layer.n_heads, layer.head_dim
    heads = lambda w: (x @ w.weight.T).view(B, T, H, D).transpose(1, 2)  # noqa: E731
    q, k, v = heads(layer.q_proj), heads(layer.k_proj), heads(layer.v_proj)
    if not nope_main:
        q, k = layer.rope(q, offset), layer.rope(k, offset)
    y_ref, s_ref = elu_linear_attention_recurrent(q, k, v)
    torch.testing.assert_close(y, y_ref.transpose(1, 2).reshape(B, T, -1) @ layer.o_proj.weight.T)
    torch.testing.assert_close(state.S, s_ref.S)


@pytest.mark.parametrize("nope_main", [False, True])
def test_offset_moves_rope_only_when_enabled(nope_main):
    layer = make(nope_main)
    x = torch.randn(1, 6, 64, dtype=F64)
    same = torch.allclose(layer(x, offset=0)[0], layer(x, offset=7)[0])
    assert same == nope_main


def test_short_convolution_matches_conv1d():
    """The ELU layer's convolution against torch's own causal depthwise conv1d."""
    layer = make(elu_conv=True)
    B, T, K = 2, 11, layer.conv_weight.shape[1]
    x = torch.randn(B, T, 64, dtype=F64)
    y, state = layer(x, offset=0)
    H, D = layer.n_heads, layer.head_dim
    qkv = torch.cat([x @ p.weight.T for p in (layer.q_proj, layer.k_proj, layer.v_proj)], -1)
    mixed = torch.nn.functional.conv1d(
        torch.nn.functional.pad(qkv.transpose(1, 2), (K - 1, 0)),
        layer.conv_weight[:, None],
        groups=qkv.shape[-1],
    )
    q, k, v = (
        u.reshape(B, T, H, D).transpose(1, 2)
        for u in torch.nn.functional.silu(mixed.transpose(1, 2)).chunk(3, -1)
    )
    q, k = layer.rope(q, 0), layer.rope(k, 0)
    y_ref, _ = elu_linear_attention_recurrent(q, k, v)
    torch.testing.assert_close(y, y_ref.transpose(1, 2).reshape(B, T, -1) @ layer.o_proj.weight.T)
    torch.testing.assert_close(state.conv, qkv[:, -(K - 1) :])
    assert sum(p.numel() for p in layer.parameters()) == 4 * 64**2 + 3 * 64 * K


@pytest.mark.parametrize("elu_conv", [False, True])
@pytest.mark.parametrize("pieces", [[1] * 20, [5, 1, 9, 5], [20], [3, 17]])
def test_module_pieces_chained_equal_whole(pieces, elu_conv):
    layer = make(linear_chunk=4, elu_conv=elu_conv)
    x = torch.randn(2, sum(pieces), 64, dtype=F64)
    y, state = layer(x)
    outs, s, pos = [], None, 0
    for n in pieces:
        out, s = layer(x[:, pos : pos + n], s, pos)
        outs.append(out)
        pos += n
    torch.testing.assert_close(torch.cat(outs, dim=1), y)
    torch.testing.assert_close(s.S, state.S)
    torch.testing.assert_close(s.z, state.z)


def test_bf16_autocast_keeps_float32_state_and_accuracy():
    torch.manual_seed(0)
    layer = LinearAttention(model_config("tiny"))
    x = torch.randn(2, 40, 64)
    y32, s32 = layer(x)
    with torch.autocast("cpu", torch.bfloat16):
        y16, s16 = layer(x)
        y1, s1 = layer(x[:, :1])
    assert y16.dtype == torch.bfloat16
    assert s16.S.dtype == s16.z.dtype == s1.S.dtype == torch.float32
    err = (y16.float() - y32).norm() / y32.norm()
    assert err < 2e-2


def test_kernels_ignore_autocast():
    """Under bf16 autocast the kernels still compute (and normalise) in float32."""
    q, k, v = (u.float() for u in qkv(2, 2, 37, 8, 8, seed=3))
    y, s = elu_linear_attention_chunked(q, k, v, chunk=8)
    y1, s1 = elu_linear_attention_step(q[:, :, 0], k[:, :, 0], v[:, :, 0], s)
    with torch.autocast("cpu", torch.bfloat16):
        y_ac, s_ac = elu_linear_attention_chunked(q, k, v, chunk=8)
        y1_ac, _ = elu_linear_attention_step(q[:, :, 0], k[:, :, 0], v[:, :, 0], s_ac)
    assert torch.equal(y_ac, y) and torch.equal(s_ac.S, s.S) and torch.equal(y1_ac, y1)
