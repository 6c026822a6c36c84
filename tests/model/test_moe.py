"""MoE: sorted dispatch against a per-token loop, gates, balance loss and bias balancing."""

import pytest
import torch
import torch.nn.functional as F

from glmflash.bench.baselines.moe import masked_moe
from glmflash.config import model_config
from glmflash.model import moe as moe_module
from glmflash.model.moe import MoE


def make_moe(seed: int = 0, **overrides) -> MoE:
    torch.manual_seed(seed)
    cfg = model_config("tiny", d_model=16, expert_hidden=24, **overrides)
    moe = MoE(cfg).double()
    with torch.no_grad():  # spread the router so top-k choices are clear-cut
        moe.router.weight.normal_(0, 1)
    return moe


def per_token_reference(moe: MoE, x: torch.Tensor) -> torch.Tensor:
    """Each token on its own: softmax, top-k of p + b by sorting, renormalised gates, experts."""
    W = moe.router.weight
    b = moe.select_bias
    out = torch.zeros_like(x.reshape(-1, x.shape[-1]))
    for n, v in enumerate(x.reshape(-1, x.shape[-1])):
        p = torch.softmax(W @ v, 0)
        chosen = sorted(range(moe.n_experts), key=lambda e: -(p[e] + b[e]).item())[: moe.top_k]
        total = sum(p[e] for e in chosen)
        for e in chosen:
            hid = F.silu(v @ moe.w1[e]) * (v @ moe.w3[e])
            out[n] += p[e] / total * (hid @ moe.w2[e])
        if moe.shared is not None:
            out[n] += moe.shared(v)
    return out.view(x.shape)


@pytest.mark.parametrize("top_k", [1, 2])
@pytest.mark.parametrize("n_shared", [0, 1])
@pytest.mark.parametrize("shape", [(1, 1), (2, 7), (3, 16)])
def test_dispatch_matches_per_token_loop(top_k, n_shared, shape):
    moe = make_moe(top_k=top_k, n_shared=n_shared)
    x = torch.randn(*shape, 16, dtype=torch.float64)
    y, stats = moe(x)
    assert y.shape == x.shape
    assert torch.allclose(y, per_token_reference(moe, x), atol=1e-12)
    assert torch.allclose(masked_moe(moe, x), y, atol=1e-12)
    assert torch.isclose(stats.load.sum(), torch.tensor(1.0, dtype=stats.load.dtype))


def test_no_tokens_give_an_empty_output():
    moe = make_moe(top_k=2, n_shared=1)
    y, stats = moe(torch.randn(0, 3, 16, dtype=torch.float64))
    assert y.shape == (0, 3, 16)
    assert float(stats.balance_loss.detach()) == 0.0 and not stats.load.any()  # no 0 / 0 NaN


def test_several_shared_experts_are_summed():
    moe = make_moe(n_shared=2)
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    H = moe.w1.shape[-1]
    sw = moe.shared
    halves = sum(
        F.linear(
            F.silu(F.linear(x, sw.w1.weight[i : i + H])) * F.linear(x, sw.w3.weight[i : i + H]),
            sw.w2.weight[:, i : i + H],
        )
        for i in (0, H)
    )
    assert torch.allclose(moe.shared(x), halves, atol=1e-12)
    assert torch.allclose(moe(x)[0], per_token_reference(moe, x), atol=1e-12)


def test_gates_sum_to_one_and_come_from_p():
    moe = make_moe(n_experts=6, top_k=3)
    x = torch.randn(40, 16, dtype=torch.float64)
    index, gates, probs = moe.route(x)
    assert torch.allclose(probs, torch.softmax(x @ moe.router.weight.T, -1))
    assert torch.allclose(gates.sum(-1), torch.ones(40, dtype=gates.dtype))
    chosen = probs.gather(-1, index)
    assert torch.allclose(gates, chosen / chosen.sum(-1, keepdim=True))
    # the chosen experts are the k most probable ones
    assert torch.equal(index.sort(-1).values, probs.topk(3, -1).indices.sort(-1).values)


def test_bias_changes_selection_not_gate_values():
    moe = make_moe(balance="bias")
    x = torch.randn(64, 16, dtype=torch.float64)
    index0, _, probs = moe.route(x)
    moe.select_bias[0] = 10.0  # expert 0 always selected
    index, gates, probs_b = moe.route(x)
    assert torch.equal(probs, probs_b)
    assert not torch.equal(index0, index)
    assert (index == 0).any(-1).all()
    chosen = probs.gather(-1, index)
    assert torch.allclose(gates, chosen / chosen.sum(-1, keepdim=True))
    assert torch.allclose(moe(x[None])[0][0], per_token_reference(moe, x[None])[0], atol=1e-12)


def test_balance_loss_definition_and_bias_mode_zero():
    moe = make_moe(balance_coef=0.3)
    x = torch.randn(2, 30, 16, dtype=torch.float64)
    _, stats = moe(x)
    index, _, probs = moe.route(x.reshape(-1, 16))
    f = torch.stack([(index == e).sum() for e in range(4)]).double() / index.numel()
    assert torch.allclose(stats.load, f)
    assert torch.isclose(stats.balance_loss, 0.3 * 4 * (f * probs.mean(0)).sum())
    assert not stats.load.requires_grad
    _, stats = make_moe(balance="bias")(x)
    assert stats.balance_loss.item() == 0.0


def test_balance_loss_minimal_for_uniform_router():
    moe = make_moe(balance_coef=0.2)
    u = torch.nn.functional.normalize(torch.randn(16, dtype=torch.float64), dim=0)
    x = torch.randn(3, 20, 16, dtype=torch.float64) + 3 * u
    with torch.no_grad():
        moe.router.weight.zero_()
    assert torch.isclose(moe(x)[1].balance_loss, torch.tensor(0.2, dtype=torch.float64))
    with torch.no_grad():  # a router that sends every token to expert 0: about twice as large
        moe.router.weight[0] = 5 * u
    stats = moe(x)[1]
    assert stats.load[0] == 0.5
    assert stats.balance_loss > 0.2 * 1.5


def test_balance_loss_has_a_router_gradient():
    x = torch.randn(2, 25, 16, dtype=torch.float64)
    grads = []
    for coef in (0.0, 0.5):
        moe = make_moe(balance_coef=coef)
        y, stats = moe(x)
        (y.square().mean() + stats.balance_loss).backward()
        grads.append(moe.router.weight.grad.clone())
    assert not torch.allclose(grads[0], grads[1])
    moe = make_moe(balance_coef=0.5)
    moe(x)[1].balance_loss.backward()
    assert moe.router.weight.grad.abs().sum() > 0


def test_update_bias_favours_underloaded_experts():
    moe = make_moe(balance="bias", bias_rate=0.01)
    load = torch.tensor([0.5, 0.25, 0.15, 0.1])
    moe.update_bias(load)
    assert torch.allclose(moe.select_bias, torch.tensor([-0.01, 0.01, 0.01, 0.01]).double())
    x = torch.randn(200, 16, dtype=torch.float64)
    before = (moe.route(x)[0] == 0).sum()
    for _ in range(50):  # repeated updates against a heavy expert 0 shift its tokens away
        moe.update_bias(load)
    assert (moe.route(x)[0] == 0).sum() < before
    aux = make_moe(balance="aux")
    aux.update_bias(load)
    assert torch.equal(aux.select_bias, torch.zeros(4, dtype=torch.float64))


def test_bf16_autocast_and_float32():
    torch.manual_seed(0)
    moe = MoE(model_config("tiny"))
    x = torch.randn(2, 9, 64)
    ref, _ = moe(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y, stats = moe(x)
    assert y.shape == x.shape and torch.isfinite(y).all()
    assert (y.float() - ref).abs().max() < 0.05 * ref.abs().max()
    y.float().sum().backward()
    assert moe.w1.grad is not None and moe.router.weight.grad is not None


def test_gradients_match_masked_baseline():
    x = torch.randn(2, 11, 16, dtype=torch.float64)
    grads = []
    for fn in (lambda m: m(x)[0], lambda m: masked_moe(m, x)):
        moe = make_moe()
        fn(moe).pow(2).sum().backward()
        grads.append([p.grad for p in moe.parameters()])
    for a, b in zip(*grads, strict=True):
        assert torch.allclose(a, b, atol=1e-12)


@pytest.mark.parametrize("n", [1, 5, 64, 70])
def test_padded_swiglu_equals_swiglu_values_and_gradients(n):
    torch.manual_seed(n)
    x = torch.randn(n, 16, dtype=torch.float64, requires_grad=True)
    ws = [torch.randn(*s, dtype=torch.float64, requires_grad=True) for s in ((16, 24),) * 2]
    w2 = torch.randn(24, 16, dtype=torch.float64, requires_grad=True)
    outs, grads = [], []
    for granule in (1, 64):
        out = moe_module.padded_swiglu(x, *ws, w2, granule)
        out.pow(2).sum().backward()
        outs.append(out)
        grads.append([t.grad.clone() for t in (x, *ws, w2)])
        for t in (x, *ws, w2):
            t.grad = None
    assert outs[1].shape == (n, 16)
    assert torch.allclose(outs[0], outs[1], atol=1e-12)
    for a, b in zip(*grads, strict=True):
        assert torch.allclose(a, b, atol=1e-12)


def test_bf16_pads_each_experts_rows_fp32_does_not(monkeypatch):
    """16-bit matmuls see only multiples of ROW_GRANULE rows (few distinct shapes, so oneDNN's
    compiled kernels are reused); fp32 ones see exactly the routed rows."""
    rows: list[int] = []
    real = moe_module.swiglu

    def spy(r, *w):
        rows.append(r.shape[0])
        return real(r, *w)

    monkeypatch.setattr(moe_module, "swiglu", spy)
    torch.manual_seed(0)
    moe = MoE(model_config("tiny"))
    x = torch.randn(3, 37, 64)
    counts = {}
    for bf16 in (False, True):
        rows.clear()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            moe(x)
        counts[bf16] = list(rows)
    granule = moe_module.ROW_GRANULE
    assert sum(counts[False]) == 3 * 37 * moe.top_k
    assert [-(-r // granule) * granule for r in counts[False]] == counts[True]
