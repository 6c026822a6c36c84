"""Whole-model properties: causality, cached decoding, tying, counts, norms."""

import pytest
import torch
import torch.nn.functional as F

from glmflash.config import model_config
from glmflash.info import parameter_counts
from glmflash.model.lm import GLMFlash
from glmflash.model.norm import RMSNorm

VARIANTS = {
    "default": {},
    "delta": dict(linear_kind="delta"),
    "indexer": dict(sparse_kind="indexer"),
    "nope": dict(nope_main=True, sparse_kind="indexer"),
    "static": dict(stream_mixer="static"),
    "bias": dict(balance="bias"),
    "mtp": dict(mtp=True),
    "pool": dict(sparse_kind="indexer", index_pool=4),
}


def tiny(**overrides) -> GLMFlash:
    torch.manual_seed(0)
    return GLMFlash(model_config("tiny", **overrides)).double().eval()


def perturbed(model: GLMFlash, seed: int = 1) -> GLMFlash:
    """Move every parameter off its initial value, so zero-initialised paths are exercised."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


@pytest.mark.parametrize("name", VARIANTS)
def test_causal(name):
    model = perturbed(tiny(**VARIANTS[name]))
    T = 40
    tokens = torch.randint(4, 260, (2, T))
    base = model(tokens).logits
    for t in (0, 13, 31, T - 1):
        changed = tokens.clone()
        changed[:, t] = (changed[:, t] + 7) % 256 + 4
        logits = model(changed).logits
        assert torch.allclose(logits[:, :t], base[:, :t], atol=1e-10), (name, t)
        assert not torch.allclose(logits[:, t], base[:, t])


@pytest.mark.parametrize("name", VARIANTS)
def test_step_equals_full_recomputation(name):
    model = perturbed(tiny(**VARIANTS[name]))
    tokens = torch.randint(4, 260, (3, 37))
    full = model(tokens).logits
    logits, state = model.step(tokens[:, :11])  # prefill, then one token at a time
    pieces = [logits]
    for t in range(11, tokens.shape[1]):
        logits, state = model.step(tokens[:, t:t + 1], state)
        pieces.append(logits)
    assert state.position == tokens.shape[1]
    assert torch.allclose(torch.cat(pieces, 1), full, atol=1e-9), name


def test_state_expand_and_select():
    model = perturbed(tiny())
    prompt = torch.randint(4, 260, (1, 9))
    _, state = model.step(prompt)
    nxt = torch.randint(4, 260, (4, 1))
    logits, _ = model.step(nxt, state.expand(4))
    full = model(torch.cat((prompt.expand(4, -1), nxt), 1)).logits[:, -1:]
    assert torch.allclose(logits, full, atol=1e-9)
    keep = torch.tensor([2, 0])
    logits2, _ = model.step(nxt[keep], state.expand(4).select(keep))
    assert torch.allclose(logits2, full[keep], atol=1e-9)


def test_forward_embeddings_matches_forward():
    model = perturbed(tiny())
    tokens = torch.randint(4, 260, (2, 20))
    a = model(tokens).logits
    b = model.forward_embeddings(model.embedding(tokens)).logits
    assert torch.equal(a, b)


def test_loss_and_aux():
    model = tiny().train()
    tokens = torch.randint(4, 260, (2, 24))
    out = model(tokens[:, :-1], tokens[:, 1:])
    ref = F.cross_entropy(out.logits.flatten(0, 1), tokens[:, 1:].flatten())
    assert torch.allclose(out.loss, ref)
    assert out.aux_loss.requires_grad and out.load.shape == (4, 4)
    assert torch.allclose(out.load.sum(-1), torch.ones(4, dtype=out.load.dtype))
    (out.loss + out.aux_loss).backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert not missing, missing


def test_tied_head_and_counts():
    model = GLMFlash(model_config("tiny"))
    assert model.output.weight is model.embedding.weight
    tiny_total = parameter_counts(model_config("tiny"))["total"]["all"]
    assert tiny_total == model.num_parameters() < 1_000_000
    counts = parameter_counts(model_config("25m"))
    assert abs(counts["total"]["all"] - 25.7e6) <= 0.03 * 25.7e6, counts["total"]
    assert counts["active"]["all"] < counts["total"]["all"]


@pytest.mark.parametrize("shape", [(3, 8), (2, 5, 64), (1, 1, 192)])
def test_rmsnorm_matches_torch(shape):
    x = torch.randn(shape, dtype=torch.float64)
    norm = RMSNorm(shape[-1], eps=1e-6).double()
    with torch.no_grad():
        norm.weight.normal_()
    ref = F.rms_norm(x, (shape[-1],), norm.weight, eps=1e-6)
    assert torch.allclose(norm(x), ref, atol=1e-12)
