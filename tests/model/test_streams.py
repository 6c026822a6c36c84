"""Residual streams: Sinkhorn projection, mHC and static mixers against explicit formulas."""

import pytest
import torch
import torch.nn.functional as F

from glmflash.config import model_config
from glmflash.model.norm import RMSNorm
from glmflash.model.streams import (
    HyperConnection,
    NormedProjection,
    StaticMixer,
    expand_streams,
    make_stream_mixer,
    merge_streams,
    mix_write,
    normed_projection,
    sinkhorn,
    weighted_read,
)


def config(S: int = 4, C: int = 8, **overrides):
    return model_config("tiny", d_model=C, n_heads=2, n_streams=S, **overrides)


def perturb(module: torch.nn.Module, scale: float = 0.5, seed: int = 1) -> torch.nn.Module:
    """Move every parameter well off its initial value, as training would."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return module


def mhc_reference(hc: HyperConnection, h: torch.Tensor, f) -> torch.Tensor:
    """One token at a time, with the equations written out and an exp-space Sinkhorn."""
    B, T, S, C = h.shape
    out = torch.empty_like(h)
    W = hc.proj.weight
    for b in range(B):
        for t in range(T):
            H = h[b, t]  # [S, C]
            v = H.flatten()
            z = v / torch.sqrt(v.pow(2).mean() + hc.eps)
            a = W @ z
            pre = torch.sigmoid(hc.alpha_pre * a[:S] + hc.bias_pre)
            post = 2 * torch.sigmoid(hc.alpha_post * a[S : 2 * S] + hc.bias_post)
            M = torch.exp(hc.alpha_res * a[2 * S :].view(S, S) + hc.bias_res)
            for _ in range(hc.sinkhorn_iters):
                M = M / M.sum(1, keepdim=True)
                M = M / M.sum(0, keepdim=True)
            x = (pre[:, None] * H).sum(0) / pre.sum()
            out[b, t] = M @ H + post[:, None] * f(x)[None, :]
    return out


@pytest.mark.parametrize("shape", [(2, 5, 4, 4), (1, 3, 3, 3), (64, 2, 2)])
def test_sinkhorn_doubly_stochastic(shape):
    logits = torch.randn(shape, dtype=torch.float64)
    M = sinkhorn(logits, 100)
    ones = torch.ones(shape[:-1], dtype=torch.float64)
    assert (M > 0).all()
    assert torch.allclose(M.sum(-1), ones, atol=1e-6)
    assert torch.allclose(M.sum(-2), ones, atol=1e-12)
    # the projection only rescales rows and columns of exp(logits): M = diag(r) exp(L) diag(c)
    ratio = M / logits.exp()
    r = ratio[..., :, :1] / ratio[..., :1, :1]
    assert torch.allclose(ratio, r * ratio[..., :1, :], rtol=1e-10)


@pytest.mark.parametrize("S", [2, 4])
def test_mixing_matrix_doubly_stochastic_after_training_like_perturbation(S):
    """Near-identity matrices are where Sinkhorn converges slowest: after the default 20
    iterations the rows are within a few percent, the columns (normalised last) exact."""
    hc = perturb(HyperConnection(config(S)), scale=1.0)
    h = torch.randn(3, 7, S, 8)
    _, (post, M) = hc.read(h)
    assert M.shape == (3, 7, S, S) and M.dtype == torch.float32 and (M > 0).all()
    assert torch.allclose(M.sum(-2), torch.ones(3, 7, S), atol=1e-5)
    assert torch.allclose(M.sum(-1), torch.ones(3, 7, S), atol=5e-2)
    assert ((post > 0) & (post < 2)).all()
    # columns summing to 1: the mean over streams passes through the mixing unchanged
    assert torch.allclose(merge_streams(M @ h), merge_streams(h), atol=1e-5)
    hc.sinkhorn_iters = 200
    _, (_, M) = hc.read(h)
    assert torch.allclose(M.sum(-1), torch.ones(3, 7, S), atol=1e-4)


def test_matches_per_token_equations():
    torch.manual_seed(0)
    hc = perturb(HyperConnection(config(4)).double())
    h = torch.randn(2, 3, 4, 8, dtype=torch.float64)
    W = torch.randn(8, 8, dtype=torch.float64)

    def f(x):
        return torch.tanh(x @ W)

    x, ctx = hc.read(h)
    assert torch.allclose(hc.write(h, f(x), ctx), mhc_reference(hc, h, f), atol=1e-10)


def test_one_stream_is_the_plain_residual():
    torch.manual_seed(0)
    for mixer in ("mhc", "static"):
        hc = make_stream_mixer(config(1, stream_mixer=mixer)).double()
        norm = perturb(RMSNorm(8).double())
        W = torch.randn(8, 8, dtype=torch.float64)
        e = torch.randn(2, 5, 8, dtype=torch.float64) * 0.02
        h = expand_streams(e, 1)
        x, ctx = hc.read(h)
        out = hc.write(h, norm(x) @ W, ctx)
        assert out.shape == (2, 5, 1, 8)
        assert torch.allclose(out[:, :, 0], e + norm(e) @ W, rtol=1e-12, atol=0), mixer


@pytest.mark.parametrize("mixer", ["mhc", "static"])
def test_equal_streams_at_init_give_the_plain_residual_update(mixer):
    torch.manual_seed(0)
    hc = make_stream_mixer(config(4, stream_mixer=mixer)).double()
    norm = RMSNorm(8).double()
    W = torch.randn(8, 8, dtype=torch.float64)
    e = torch.randn(2, 5, 8, dtype=torch.float64)
    h = expand_streams(e, 4)
    x, ctx = hc.read(h)
    assert torch.allclose(x, e, atol=1e-14)
    out = hc.write(h, norm(x) @ W, ctx)
    plain = e + norm(e) @ W
    for s in range(4):
        assert torch.allclose(out[:, :, s], plain, atol=1e-12)


def test_init_is_close_to_identity_mixing():
    hc = HyperConnection(config(4))
    _, (post, M) = hc.read(torch.randn(2, 3, 4, 8))
    assert torch.equal(post, torch.ones_like(post))
    assert (M.diagonal(dim1=-2, dim2=-1) > 0.9).all()
    assert torch.allclose(M.sum(-1), torch.ones(2, 3, 4), atol=1e-6)


def test_streams_diverge_when_trained():
    """Random pre biases break the symmetry: the gradient differs between equal streams."""
    hc1, hc2 = HyperConnection(config(4)).double(), HyperConnection(config(4)).double()
    W = torch.randn(8, 8, dtype=torch.float64)
    h = expand_streams(torch.randn(2, 3, 8, dtype=torch.float64), 4).requires_grad_()
    x, ctx = hc1.read(h)
    h1 = hc1.write(h, torch.tanh(x @ W), ctx)
    x, ctx = hc2.read(h1)
    out = hc2.write(h1, torch.tanh(x @ W), ctx)
    loss = (merge_streams(out) @ torch.randn(8, dtype=torch.float64)).sum()
    loss.backward()
    assert not torch.allclose(h.grad[:, :, 0], h.grad[:, :, 1])


class ReadWrite(torch.nn.Module):
    """A toy sublayer between read and write: h -> write(h, tanh(read(h) W))."""

    def __init__(self, mixer: torch.nn.Module, C: int) -> None:
        super().__init__()
        self.mixer = mixer
        self.W = torch.nn.Parameter(torch.randn(C, C, dtype=torch.float64))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        x, ctx = self.mixer.read(h)
        return self.mixer.write(h, torch.tanh(x @ self.W), ctx)


@pytest.mark.parametrize("mixer", ["mhc", "static"])
def test_gradcheck(mixer):
    torch.manual_seed(0)
    cfg = config(3, C=4, stream_mixer=mixer, sinkhorn_iters=6)
    model = ReadWrite(perturb(make_stream_mixer(cfg).double()), 4)
    names = [n for n, _ in model.named_parameters()]
    h = torch.randn(1, 2, 3, 4, dtype=torch.float64, requires_grad=True)
    params = [p.detach().clone().requires_grad_() for p in model.parameters()]

    def fn(h, *ps):
        return torch.func.functional_call(model, dict(zip(names, ps, strict=True)), (h,))

    assert torch.autograd.gradcheck(fn, (h, *params))


@pytest.mark.parametrize("mixer", ["mhc", "static"])
def test_gradients_reach_every_parameter(mixer):
    torch.manual_seed(0)
    hc = perturb(make_stream_mixer(config(4, stream_mixer=mixer)), scale=0.1)
    h = torch.randn(2, 6, 4, 8, requires_grad=True)
    x, ctx = hc.read(h)
    out = hc.write(h, F.silu(x), ctx)
    (out * torch.randn_like(out)).sum().backward()
    for name, p in hc.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert h.grad.abs().sum() > 0


def test_bf16_autocast_keeps_streams_in_float32():
    hc = perturb(HyperConnection(config(4)), scale=0.1)
    h = torch.randn(2, 5, 4, 8)
    y = torch.randn(2, 5, 8)
    ref = hc.write(h, y, hc.read(h)[1])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        x, ctx = hc.read(h)
        out = hc.write(h, y.bfloat16(), ctx)
    assert x.dtype == torch.float32 and out.dtype == torch.float32
    assert torch.allclose(out, ref, atol=0.02)


def test_static_mixer_formula():
    mixer = perturb(StaticMixer(config(3)).double())
    h = torch.randn(2, 4, 3, 8, dtype=torch.float64)
    y = torch.randn(2, 4, 8, dtype=torch.float64)
    x, ctx = mixer.read(h)
    w = torch.softmax(mixer.pre, 0)
    assert torch.allclose(x, torch.einsum("s,btsc->btc", w, h))
    expect = torch.stack(
        [sum(mixer.mix[s, t] * h[:, :, t] for t in range(3)) + mixer.post[s] * y for s in range(3)],
        2,
    )
    assert torch.allclose(mixer.write(h, y, ctx), expect)


def test_expand_and_merge():
    x = torch.randn(2, 3, 5)
    h = expand_streams(x, 4)
    assert h.shape == (2, 3, 4, 5) and h.is_contiguous()
    assert all(torch.equal(h[:, :, s], x) for s in range(4))
    assert torch.allclose(merge_streams(h + torch.arange(4.0)[:, None]), x + 1.5)


@pytest.mark.parametrize("lead", [(1,), (2, 3), (3, 1, 2)])
@pytest.mark.parametrize("shared", [False, True])
def test_mix_write_and_read_match_einsum_and_gradcheck(lead, shared):
    """The hand-written backward of the write (and the read's batched matmul) against the sums
    written with einsum, and gradcheck; coefficients per token or shared by all tokens."""
    torch.manual_seed(len(lead))
    S, C = 3, 5
    coef = () if shared else lead
    h = torch.randn(*lead, S, C, dtype=torch.float64, requires_grad=True)
    y = torch.randn(*lead, C, dtype=torch.float64, requires_grad=True)
    mix = torch.rand(*coef, S, S, dtype=torch.float64, requires_grad=True)
    post = torch.rand(*coef, S, dtype=torch.float64, requires_grad=True)
    pre = torch.rand(*coef, S, dtype=torch.float64, requires_grad=True) + 0.1
    expect = torch.einsum("...st,...tc->...sc", mix.expand(*lead, S, S), h)
    expect = expect + post.expand(*lead, S)[..., None] * y[..., None, :]
    assert torch.allclose(mix_write(h, y, mix, post), expect, atol=1e-12)
    with torch.no_grad():  # decoding's path, without the autograd Function
        assert torch.allclose(mix_write(h, y, mix, post), expect, atol=1e-12)
    w = pre.expand(*lead, S)
    read = torch.einsum("...s,...sc->...c", w, h) / w.sum(-1, keepdim=True)
    assert torch.allclose(weighted_read(h, pre), read, atol=1e-12)
    assert torch.autograd.gradcheck(mix_write, (h, y, mix, post))
    assert torch.autograd.gradcheck(weighted_read, (h, pre))


@pytest.mark.parametrize("n,d,k", [(1, 4, 3), (7, 12, 24), (5, 8, 1)])
def test_normed_projection_matches_rmsnorm_then_linear_and_gradcheck(n, d, k):
    torch.manual_seed(n)
    v = torch.randn(n, d, dtype=torch.float64, requires_grad=True)
    w = torch.randn(k, d, dtype=torch.float64, requires_grad=True)
    expect = F.linear(v / torch.sqrt(v.pow(2).mean(-1, keepdim=True) + 1e-6), w)
    assert torch.allclose(NormedProjection.apply(v, w, 1e-6), expect, atol=1e-12)
    with torch.no_grad():  # decoding's path, without the autograd Function
        assert torch.allclose(normed_projection(v, w, 1e-6), expect, atol=1e-12)
    assert torch.autograd.gradcheck(lambda v, w: NormedProjection.apply(v, w, 1e-6), (v, w))


@pytest.mark.parametrize("frozen", ["v", "w"])
def test_normed_projection_with_a_frozen_input_keeps_the_other_gradient(frozen):
    """RL trains a few blocks: the frozen layers' projections are skipped in backward, and
    the gradient that still flows must be the one computed when both are trained."""
    torch.manual_seed(3)
    v = torch.randn(6, 10, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, 10, dtype=torch.float64, requires_grad=True)
    da = torch.randn(6, 5, dtype=torch.float64)
    both = torch.autograd.grad(NormedProjection.apply(v, w, 1e-6), (v, w), da)
    v.requires_grad_(frozen != "v")
    w.requires_grad_(frozen != "w")
    kept, expect = (w, both[1]) if frozen == "v" else (v, both[0])
    (grad,) = torch.autograd.grad(NormedProjection.apply(v, w, 1e-6), (kept,), da)
    assert torch.allclose(grad, expect, atol=1e-12)
