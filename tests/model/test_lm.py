"""Whole-model properties: causality, cached decoding, tying, counts, norms."""

import pytest
import torch
import torch.nn.functional as F

from glmflash.config import model_config
from glmflash.info import parameter_counts
from glmflash.model.lm import GLMFlash, merge_states
from glmflash.model.norm import RMSNorm

VARIANTS = {
    "default": {},
    "delta": dict(linear_kind="delta"),
    "conv": dict(elu_conv=True),
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
        logits, state = model.step(tokens[:, t : t + 1], state)
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


def test_25m_parameter_table_exactly():
    """The 25m counts per component (README's table, `glmflash info --preset 25m`), each also
    derived from the shapes: C 192, vocab 263, 12 layers, 8 experts of hidden 384 (top-2),
    4 streams with one mHC connection per sublayer."""
    C, V, L, E, H, S = 192, 263, 12, 8, 384, 4
    per_connection = S * C * (2 * S + S * S) + 3 + 2 * S + S * S  # proj, alphas, biases
    derived = {
        "embedding": V * C,
        "attention": L * 4 * C * C,
        "router": L * C * E,
        "routed_experts": L * E * 3 * C * H,
        "shared_experts": L * 3 * C * H,
        "streams": 2 * L * per_connection,
        "norms": (2 * L + 1) * C,
        "mtp": 0,
    }
    table = {
        "embedding": 50_496,
        "attention": 1_769_472,
        "router": 18_432,
        "routed_experts": 21_233_664,
        "shared_experts": 2_654_208,
        "streams": 443_016,
        "norms": 4_800,
        "mtp": 0,
    }
    assert derived == table
    counts = parameter_counts(model_config("25m"))
    assert counts["total"] == {**table, "all": 26_174_088}
    assert counts["active"] == {**table, "routed_experts": 5_308_416, "all": 10_248_840}
    assert 5_308_416 * 4 == table["routed_experts"]  # top-2 of 8


@pytest.mark.parametrize("shape", [(3, 8), (2, 5, 64), (1, 1, 192)])
def test_rmsnorm_matches_torch(shape):
    x = torch.randn(shape, dtype=torch.float64)
    norm = RMSNorm(shape[-1], eps=1e-6).double()
    with torch.no_grad():
        norm.weight.normal_()
    ref = F.rms_norm(x, (shape[-1],), norm.weight, eps=1e-6)
    assert torch.allclose(norm(x), ref, atol=1e-12)


@pytest.mark.parametrize("name", ["default", "mtp"])
def test_aux_loss_sums_every_layers_balance_loss(name):
    """aux_loss = sum over MoEs (the layers' and the MTP block's) of coef * E * sum_e f_e P_e,
    each recomputed from the MoE's input (+ the MTP loss when on); no single loss equals the
    sum; the output's load has one row per MoE, each equal to that MoE's f."""
    model = perturbed(tiny(balance_coef=0.5, **VARIANTS[name])).train()
    inputs = []
    hooks = [
        moe.register_forward_hook(lambda m, args, out: inputs.append(args[0]))
        for moe in model.moe_layers()
    ]
    tokens = torch.randint(4, 260, (2, 24))
    out = model(tokens[:, :-1], tokens[:, 1:])
    for h in hooks:
        h.remove()
    per_layer, loads = [], []
    for moe, x in zip(model.moe_layers(), inputs, strict=True):
        index, _, probs = moe.route(x.reshape(-1, x.shape[-1]))
        f = torch.bincount(index.flatten(), minlength=moe.n_experts).double() / index.numel()
        per_layer.append(0.5 * moe.n_experts * (f * probs.mean(0)).sum())
        loads.append(f)
    expected = sum(per_layer) + out.extra.get("mtp_loss", 0.0)
    assert len(per_layer) == model.cfg.n_layers + model.cfg.mtp
    assert torch.allclose(out.load.double(), torch.stack(loads))
    assert torch.allclose(out.aux_loss, expected, rtol=1e-12)
    assert all(out.aux_loss > loss + 0.4 for loss in per_layer)  # each is about coef = 0.5


def test_mtp_loss_in_eval_mode_too():
    """With MTP on, a forward with targets gives the same losses in eval mode as in training
    mode (the model has no dropout): evaluation must not need the training-only path."""
    model = perturbed(tiny(mtp=True))
    tokens = torch.randint(4, 260, (2, 24))
    train = model.train()(tokens[:, :-1], tokens[:, 1:])
    evaluated = model.eval()(tokens[:, :-1], tokens[:, 1:])
    assert train.extra["mtp_loss"] > 0 and "hidden" not in evaluated.extra
    for a, b in (
        (train.loss, evaluated.loss),
        (train.aux_loss, evaluated.aux_loss),
        (train.extra["mtp_loss"], evaluated.extra["mtp_loss"]),
    ):
        assert torch.equal(a, b)


def _init_by_attribute_names(model: GLMFlash) -> None:
    """The former init, which found projections by their attribute names: the reference the
    per-module `init_weights` must reproduce exactly (same draws, same order)."""
    std, out_std = model.cfg.init_std, model.cfg.init_std / (2 * model.cfg.n_layers) ** 0.5
    torch.nn.init.normal_(model.embedding.weight, std=std)
    for block in [*model.layers, *([model.mtp_block] if model.cfg.mtp else [])]:
        for name in ("q_proj", "k_proj", "v_proj", "qkv_proj"):
            if hasattr(block.attn, name):
                torch.nn.init.normal_(getattr(block.attn, name).weight, std=std)
        torch.nn.init.normal_(block.attn.o_proj.weight, std=out_std)
        moe = block.moe
        torch.nn.init.normal_(moe.router.weight, std=std)
        for w in (moe.w1, moe.w3):
            torch.nn.init.normal_(w, std=std)
        torch.nn.init.normal_(moe.w2, std=out_std)
        if moe.shared is not None:
            for w, s in ((moe.shared.w1, std), (moe.shared.w3, std), (moe.shared.w2, out_std)):
                torch.nn.init.normal_(w.weight, std=s)


@pytest.mark.parametrize(
    "options",
    [{}, {"linear_kind": "delta"}, {"sparse_kind": "indexer"}, {"mtp": True, "n_shared": 0}],
)
def test_each_module_initialises_itself_as_before(options, monkeypatch):
    """Bit for bit the weights of the by-name procedure, from the same seed."""
    cfg = model_config("tiny", **options)
    torch.manual_seed(3)
    ours = GLMFlash(cfg)
    monkeypatch.setattr(GLMFlash, "_init_weights", _init_by_attribute_names)
    torch.manual_seed(3)
    reference = GLMFlash(cfg)
    for (name, a), (_, b) in zip(
        ours.state_dict().items(), reference.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    out_std = cfg.init_std / (2 * cfg.n_layers) ** 0.5  # writers small, readers large
    assert float(ours.layers[0].attn.o_proj.weight.detach().std()) == pytest.approx(
        out_std, rel=0.2
    )
    assert float(ours.layers[0].moe.w1.detach().std()) == pytest.approx(cfg.init_std, rel=0.2)


def test_an_attention_without_its_own_init_is_refused(monkeypatch):
    """A new variant that neither defines init_weights nor inherits HeadProjections'."""

    class Bare(torch.nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.o_proj = torch.nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    monkeypatch.setattr("glmflash.model.lm.make_attention", lambda cfg, kind: Bare(cfg))
    with pytest.raises(AttributeError, match="init_weights"):
        GLMFlash(model_config("tiny"))


@pytest.mark.parametrize("pool", [1, 4])
def test_indexer_kl_is_a_layer_statistic_summed_like_the_balance_loss(pool):
    """ModelOutput.indexer_kl is the sum of each sparse layer's KL, only in training mode; its
    gradient reaches the indexers alone; the dense warm-up switches every sparse layer."""
    model = perturbed(tiny(sparse_kind="indexer", index_pool=pool, n_layers=8)).train()
    tokens = torch.randint(0, 256, (2, 24))
    out = model(tokens, tokens)
    sparse = [layer.attn for layer in model.layers if layer.kind == "S"]
    assert len(sparse) == 2 and all(a.indexer_kl is not None for a in sparse)
    torch.testing.assert_close(out.indexer_kl, sum(a.indexer_kl for a in sparse))
    out.indexer_kl.backward()
    trained = {n for n, p in model.named_parameters() if p.grad is not None and p.grad.any()}
    assert trained and all(".indexer." in n for n in trained)

    model.set_indexer_warmup(True)
    assert all(a.dense_warmup for a in sparse)
    warm = model(tokens, tokens)
    assert warm.indexer_kl is not None
    model.set_indexer_warmup(False)
    assert not any(a.dense_warmup for a in sparse)
    assert model.eval()(tokens, tokens).indexer_kl is None
    assert perturbed(tiny()).train()(tokens, tokens).indexer_kl is None  # fixed pattern


@pytest.mark.parametrize(
    "overrides", [{}, {"linear_kind": "delta"}, {"nope_main": True}, {"elu_conv": True}]
)
@pytest.mark.parametrize("lengths", [(5, 12, 1, 30), (9, 9, 17)])
def test_merged_states_decode_each_row_as_alone(overrides, lengths):
    """Prompts of different lengths prefilled apart, their states merged (KV caches padded on
    the left, one position per row): every decoding step's logits equal each row's own."""
    torch.manual_seed(0)
    model = GLMFlash(model_config("tiny", **overrides)).eval()
    prompts = [torch.randint(4, 260, (1, n)) for n in lengths]
    states = [model.step(p)[1] for p in prompts]
    merged = merge_states(states)
    assert merged.position.tolist() == list(lengths)
    feed = torch.randint(4, 260, (len(lengths), 25))  # teacher-forced tokens, past the window
    for t in range(feed.shape[1]):
        logits, merged = model.step(feed[:, t : t + 1], merged)
        for b in range(len(lengths)):
            alone, states[b] = model.step(feed[b : b + 1, t : t + 1], states[b])
            assert torch.allclose(logits[b], alone[0], atol=1e-5), (t, b)


@pytest.mark.parametrize("name", ["default", "indexer"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_training_after_decoding_uses_what_decoding_cached(name, dtype):
    """`step` runs in inference mode. The sparse masks it caches and the RoPE tables it
    extends past the context are shared with training, which saves them for backward: they
    must be ordinary tensors (an inference tensor there is a RuntimeError)."""
    from glmflash.model.attention_sparse import fixed_sparse_mask

    torch.manual_seed(0)
    model = GLMFlash(model_config("tiny", **VARIANTS[name])).to(dtype)  # float64: SDPA's math
    fixed_sparse_mask.cache_clear()
    rope = model.layers[0].attn.rope
    tokens = torch.randint(4, 200, (2, 12))
    longer = 2 * rope.cos.shape[0]
    with torch.no_grad():  # positions past the table: step rebuilds it
        model.step(tokens[:, :1], _at(model.step(tokens)[1], longer))
    assert rope.cos.shape[0] > longer and not rope.cos.is_inference()
    cfg, hits = model.cfg, fixed_sparse_mask.cache_info().hits
    window = cfg.sparse_window if name == "default" else 12  # the indexer's causal mask
    stride = cfg.sparse_stride if name == "default" else 12
    assert not fixed_sparse_mask(12, 12, 0, window, stride, tokens.device).is_inference()
    assert fixed_sparse_mask.cache_info().hits == hits + 1  # the mask the prefill cached
    model.train()
    model(tokens, tokens).loss.backward()  # the prefill's mask shapes again, now with grad
    assert model.embedding.weight.grad is not None


def _at(state, position: int):
    """The state as if `position` tokens had been consumed (RoPE looks only at positions)."""
    state.position = position
    return state
