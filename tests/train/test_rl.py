"""RLOO: advantages and loss against hand computation, zero-spread groups, scopes, a toy run,
resume after a kill, checkpoint selection."""

import dataclasses
import json
import math
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from glmflash import tokenizer as tok
from glmflash.checkpoint import save_model
from glmflash.cli import main
from glmflash.config import RLConfig, model_config
from glmflash.data import ladder
from glmflash.data.code_tasks import split_of_name
from glmflash.generate import Completion, generate
from glmflash.model.lm import GLMFlash
from glmflash.train.policy_gradient import advantages, k3_kl, policy_surrogate
from glmflash.train.rl import (
    Learner,
    _best_so_far,
    _evaluate_dev,
    dev_tasks,
    edge_pool,
    kl_rows,
    plot_rl,
    policy_update,
    ptx_stream,
    rl_optimizer,
    rl_tasks,
    sequence_logprobs,
    set_scope,
    sft_step,
    train_rl,
)
from glmflash.verify import Verdict


def tiny_model(seed: int = 0) -> GLMFlash:
    torch.manual_seed(seed)
    return GLMFlash(model_config("tiny"))


def test_advantages_by_hand():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.5, 0.5, 0.5, 0.5]], dtype=torch.float64)
    a = advantages(r)
    # A_0 = 1 - (0 + 0 + 1) / 3 = 2/3 ; A_1 = 0 - (1 + 0 + 1) / 3 = -2/3
    assert torch.allclose(a[0], torch.tensor([2 / 3, -2 / 3, -2 / 3, 2 / 3], dtype=torch.float64))
    assert torch.equal(a[1], torch.zeros(4, dtype=torch.float64))
    for G in (2, 3, 7):
        r = torch.randn(5, G, dtype=torch.float64)
        loop = torch.stack(
            [
                torch.stack(
                    [r[b, i] - torch.cat((r[b, :i], r[b, i + 1 :])).mean() for i in range(G)]
                )
                for b in range(5)
            ]
        )
        assert torch.allclose(advantages(r), loop)
        assert torch.allclose(
            advantages(r, normalize_std=True), loop / (r.std(-1, keepdim=True) + 1e-6)
        )


def test_policy_loss_by_hand():
    logp = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    adv = torch.tensor([1.0, -2.0])
    # -(1 * (-3) + (-2) * (-0.5)) / 2 = -(-3 + 1) / 2 = 1
    assert float(policy_surrogate(logp, mask, adv).loss) == pytest.approx(1.0)
    ref = logp - 0.1
    # k3 per scored token: exp(-0.1) + 0.1 - 1, the same at each of the 3 tokens
    assert float(k3_kl(logp, ref, mask)) == pytest.approx(math.exp(-0.1) + 0.1 - 1, rel=1e-4)


@pytest.mark.parametrize("temperature", [1.0, 0.8])
def test_sequence_logprobs_match_one_at_a_time(temperature):
    """log pi of each token from a full pass over its own prefix: softmax(logits / T) over the
    bytes and EOS (what generation may emit), nothing else."""
    model = tiny_model().double().eval()
    prompts = [tok.encode("def f(x):\n"), tok.encode("# a\ndef gg(y):\n")]
    comps = [tok.encode("    return x\n"), tok.encode("  z") + [tok.EOS]]
    logp, mask, _, entropy = sequence_logprobs(
        model, prompts, comps, with_entropy=True, temperature=temperature
    )
    emitted = [tok.EOS, *range(tok.BYTE_OFFSET, tok.TEXT_VOCAB_SIZE)]
    for i, (p, c) in enumerate(zip(prompts, comps, strict=True)):
        ids = torch.tensor([[tok.BOS, *p, *c]])
        z = model(ids[:, :-1]).logits[0, len(p) :, emitted] / temperature
        ref = torch.log_softmax(z, -1)
        expected = ref.gather(-1, torch.tensor([emitted.index(t) for t in c])[:, None])
        assert torch.allclose(logp[i][mask[i]], expected.squeeze(-1), atol=1e-10)
        assert torch.allclose(entropy[i][mask[i]], -(ref.exp() * ref).sum(-1), atol=1e-10)
        assert int(mask[i].sum()) == len(c)


def test_sequence_logprobs_are_what_generation_samples():
    """The first token's frequencies over 40,000 draws of generation's own sampler at
    temperature 0.5 fit exp(log pi) from scoring at 0.5 (chi-square, scipy), and the same draws
    reject the untempered distribution (so the check can tell them apart)."""
    from scipy.stats import chisquare

    from glmflash.generate import allowed_mask, sample_next

    model = tiny_model().eval()
    with torch.no_grad():
        model.final_norm.weight.mul_(5)  # logits spread enough for the temperature to matter
        prompt = tok.encode("def f(x):\n")
        logits = model(torch.tensor([[tok.BOS, *prompt]])).logits[0, -1]
        mask = allowed_mask(logits.shape[-1], logits.device)
        draws = sample_next(
            logits.masked_fill(~mask, float("-inf")).expand(40_000, -1),
            0.5,
            1.0,
            torch.Generator().manual_seed(1),
        )
        counts = torch.bincount(draws, minlength=logits.shape[-1]).double()
        firsts = mask.nonzero().flatten().tolist()

        def p_value(temperature: float) -> float:
            scored = sequence_logprobs(
                model, [prompt] * len(firsts), [[t] for t in firsts], temperature=temperature
            )
            pi = scored.logp[scored.mask].double().exp()  # one scored token a row
            assert float(pi.sum()) == pytest.approx(1.0, abs=1e-5)
            expected, observed = pi * len(draws), counts[firsts]
            big = expected >= 5  # the rare tokens (if any) pooled into one bin
            pooled = [] if big.all() else [~big]
            f_exp = torch.stack([expected[b].sum() for b in [*big.nonzero(), *pooled]])
            f_obs = torch.stack([observed[b].sum() for b in [*big.nonzero(), *pooled]])
            return float(chisquare(f_obs, f_exp * f_obs.sum() / f_exp.sum()).pvalue)

        assert p_value(0.5) > 1e-3
        assert p_value(1.0) < 1e-6


def assert_scored_alike(model, prompts, comps, first: dict, second: dict) -> None:
    """sequence_logprobs called two ways gives the same log-probabilities, mask, ids, entropy
    and parameter gradients of a loss on them (float64 models)."""
    results, grads = [], []
    for way in (first, second):
        model.zero_grad()
        scored = sequence_logprobs(model, prompts, comps, with_entropy=True, **way)
        (scored.logp.sum() * 0.5 + scored.logp.pow(2).sum()).backward()
        results.append(scored)
        grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
    (a, b), (ga, gb) = results, grads
    assert torch.equal(a.mask, b.mask) and torch.equal(a.ids, b.ids)
    assert torch.allclose(a.logp, b.logp, atol=1e-10)
    assert torch.allclose(a.entropy, b.entropy, atol=1e-10)
    assert all(torch.allclose(x, y, atol=1e-9) for x, y in zip(ga, gb, strict=True))


@pytest.mark.parametrize("chunks", [2, 3, 7])
def test_sequence_logprobs_in_sorted_chunks_equal_one_padded_batch(chunks):
    """Rows scored in chunks of similar length (less padding) give the one-batch result."""
    model = tiny_model().double()
    g = torch.Generator().manual_seed(chunks)
    sizes = [(3, 9), (12, 2), (5, 5), (1, 14), (8, 1), (2, 6), (10, 10)]  # unsorted lengths
    prompts = [torch.randint(4, 200, (n,), generator=g).tolist() for n, _ in sizes]
    comps = [torch.randint(4, 200, (m,), generator=g).tolist() for _, m in sizes]
    assert_scored_alike(model, prompts, comps, {"chunks": 1}, {"chunks": chunks})


@pytest.mark.parametrize(
    "kind",
    [{}, {"linear_kind": "delta"}, {"sparse_kind": "indexer"}, {"elu_conv": True}],
    ids=["elu", "delta", "indexer", "elu_conv"],
)
def test_shared_prompts_score_like_whole_rows(kind):
    """Each distinct prompt run once and continued into its completions gives what the rows
    run whole give.
    Prompts of four lengths, interleaved, one length held by two different prompts;
    completions empty, of one token, and long enough to cross the sparse window; a prompt
    whose completions are at most one token, and one whose are all empty."""
    torch.manual_seed(0)
    model = GLMFlash(model_config("tiny", **kind)).double()
    g = torch.Generator().manual_seed(1)
    a, b, c, d, e = (torch.randint(4, 200, (n,), generator=g).tolist() for n in (5, 9, 9, 7, 3))
    prompts = [a, b, a, c, b, a, c, d, e, d, e]  # d's completions: at most 1 token, e's none
    lengths = [3, 0, 1, 20, 6, 11, 2, 1, 0, 0, 0]
    comps = [torch.randint(4, 200, (m,), generator=g).tolist() for m in lengths]
    assert_scored_alike(model, prompts, comps, {"share_prompts": False}, {"share_prompts": True})
    nothing = [sequence_logprobs(model, [e, e], [[], []], share_prompts=s) for s in (False, True)]
    assert nothing[0].logp.shape == nothing[1].logp.shape == (2, len(e))  # no column to score
    assert not nothing[1].mask.any()


def test_shared_prompts_run_each_prompt_once(monkeypatch):
    """Seven rows of three distinct prompts of two lengths: one prompt pass per length (of its
    distinct prompts: 2 and 1 rows), then one continuation per length (5 and 2 rows); no
    whole-row pass."""
    model = tiny_model().double()
    calls = []
    forward = GLMFlash.forward_embeddings

    def spy(self, x, state=None):
        calls.append((x.shape[0], state is not None))
        return forward(self, x, state)

    monkeypatch.setattr(GLMFlash, "forward_embeddings", spy)
    a, b, c = [5, 6, 7], [8, 9, 10, 11], [12, 13, 14]
    sequence_logprobs(model, [a, b, a, c, b, a, c], [[20, 21]] * 7)
    assert sorted(calls) == [(1, False), (2, False), (2, True), (5, True)]


def test_equal_rewards_give_zero_gradient():
    model = tiny_model()
    set_scope(model, "all")
    comps = generate(model, ["def f(x):\n"] * 4, max_new_tokens=5, temperature=1.0, seed=0)
    adv = advantages(torch.full((1, 4), 0.7, dtype=torch.float64)).flatten()
    assert torch.equal(adv, torch.zeros(4, dtype=torch.float64))
    params = [p for p in model.parameters()]
    before = [p.detach().clone() for p in params]
    opt = torch.optim.AdamW(params, lr=1.0)
    loss = policy_update(
        model, None, opt, params, [c.prompt_ids for c in comps], comps, adv, RLConfig()
    )["loss"]
    assert loss == 0.0 and all(torch.equal(a, b) for a, b in zip(before, params, strict=True))
    logp, mask, *_ = sequence_logprobs(
        model, [c.prompt_ids for c in comps], [c.ids or [tok.EOS] for c in comps]
    )
    policy_surrogate(logp, mask, adv.float()).loss.backward()
    assert all(p.grad is None or not p.grad.any() for p in params)


def test_ptx_adds_the_pretraining_loss():
    """The returned loss is the policy loss plus ptx times the next-token loss of the batch,
    both taken before the update; a step with no advantage skips the ptx term too."""
    model = tiny_model()
    set_scope(model, "all")
    comps = generate(model, ["def f(x):\n"] * 4, max_new_tokens=5, temperature=1.0, seed=0)
    prompts = [c.prompt_ids for c in comps]
    adv = advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0]], dtype=torch.float64)).flatten()
    cfg = RLConfig(ptx=0.5, ptx_batch=2)
    x, y = ptx_stream(cfg, model.cfg.context).batch(0, cfg.ptx_batch)
    assert x.shape == (2, model.cfg.context)
    model.train()
    with torch.no_grad():
        ids = [c.sampled for c in comps]
        logp, mask, *_ = sequence_logprobs(model, prompts, ids, temperature=cfg.temperature)
        expected = float(policy_surrogate(logp, mask, adv.float()).loss + 0.5 * model(x, y).loss)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=1e-3)
    assert policy_update(model, None, opt, params, prompts, comps, adv, cfg, (x, y))[
        "loss"
    ] == pytest.approx(expected, rel=1e-5)
    before = [p.detach().clone() for p in params]
    assert (
        policy_update(model, None, opt, params, prompts, comps, torch.zeros(4), cfg, (x, y))["loss"]
        == 0.0
    )
    assert all(torch.equal(a, b) for a, b in zip(before, params, strict=True))


@pytest.mark.parametrize("lr", [0.0, 1e-3])
def test_zero_learning_rate_keeps_the_starting_policy_bit_identical(lr):
    """rl-ablations' control (lr 0) samples, scores and steps with real gradients, but must
    end where it began; the same steps at lr 1e-3 move most of the tensors that got a gradient."""
    model = tiny_model(2)
    cfg = RLConfig(group_size=4, lr=lr, scope="all", kl=0.1)
    params = list(model.parameters())
    before = [p.detach().clone() for p in params]
    opt, reference = rl_optimizer(params, cfg), tiny_model(2)
    adv = advantages(torch.tensor([[0.0, 1.0, 0.0, 1.0]], dtype=torch.float64)).flatten()
    for step in range(3):
        comps = generate(model, ["def f(a):"] * 4, max_new_tokens=6, temperature=1.0, seed=step)
        policy_update(model, reference, opt, params, [c.prompt_ids for c in comps], comps, adv, cfg)
    same = [torch.equal(a, b) for a, b in zip(before, params, strict=True)]
    moved = [not s for s, p in zip(same, params, strict=True) if p.grad is not None]
    assert all(same) if lr == 0 else sum(moved) > len(moved) // 2


@pytest.mark.parametrize(
    ("kl", "rows", "expected"), [(0.0, 2, [0, 3]), (0.0, 9, None), (0.1, 2, None)]
)
def test_kl_figure_from_a_few_completions_unless_penalised(kl, rows, expected, monkeypatch):
    """Without the penalty the initial policy scores only `kl_rows` completions, evenly spaced;
    the figure is then the k3 KL of exactly those rows, each scored alone (no padding of the
    others). With the penalty (or rows >= completions) it scores all of them."""
    model, reference = tiny_model(1).double(), tiny_model(2).double()
    cfg = RLConfig(group_size=3, lr=0.0, scope="all", kl=kl, kl_rows=rows)
    comps = generate(model, ["def f(a):", "def gg(b, c):"] * 3, max_new_tokens=7, temperature=1.5)
    prompts = [c.prompt_ids for c in comps]
    seen = []
    score = sequence_logprobs

    def spy(m, p, c, *args, **kwargs):
        if m is reference:
            seen.append(len(p))
        return score(m, p, c, *args, **kwargs)

    monkeypatch.setattr("glmflash.train.rl.sequence_logprobs", spy)
    params = list(model.parameters())
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0], dtype=torch.float64)
    stats = policy_update(
        model, reference, rl_optimizer(params, cfg), params, prompts, comps, adv, cfg
    )
    at = expected or list(range(6))
    assert seen == [len(at)]
    bodies = [c.sampled for c in comps]
    with torch.no_grad():
        T = cfg.temperature  # both policies as the rollouts were drawn
        figures = [
            (
                score(model, [prompts[i]], [bodies[i]], temperature=T),
                score(reference, [prompts[i]], [bodies[i]], temperature=T),
            )
            for i in at
        ]
    kl_sum = sum(float(k3_kl(p.logp, r.logp, p.mask) * p.mask.sum()) for p, r in figures)
    assert stats["kl"] == pytest.approx(
        kl_sum / sum(int(p.mask.sum()) for p, _ in figures), rel=1e-9
    )
    assert stats["kl"] > 0


def test_kl_rows_spread_evenly():
    assert kl_rows(64, 16) == list(range(0, 64, 4))
    assert kl_rows(6, 4) == [0, 1, 3, 4] and kl_rows(3, 16) == [0, 1, 2]
    with pytest.raises(ValueError, match="KL rows"):
        RLConfig(kl_rows=0)


def test_negative_learning_rate_is_refused():
    with pytest.raises(ValueError, match="non-negative"):
        RLConfig(lr=-1e-4)


@pytest.mark.parametrize("scope", ["last-block-head", "last-block", "all"])
def test_scopes_freeze_exactly(scope):
    model = tiny_model()
    n = set_scope(model, scope)
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    last = {name for name, _ in model.named_parameters() if name.startswith("layers.3.")}
    if scope == "all":
        assert trainable == {name for name, _ in model.named_parameters()}
    elif scope == "last-block":
        assert trainable == last
    else:
        assert trainable == last | {"embedding.weight", "final_norm.weight"}
    assert n == sum(p.numel() for p in model.parameters() if p.requires_grad)


def test_rloo_moves_reward_on_an_easy_toy_task():
    """Reward = share of lowercase letters among the first 4 sampled bytes (about 10% for a
    random model): RLOO must raise it."""
    model = tiny_model(1)
    cfg = RLConfig(group_size=8, lr=1e-2, scope="all")
    params = [p for p in model.parameters()]
    opt = torch.optim.AdamW(params, lr=cfg.lr)
    letters = set(tok.encode("abcdefghijklmnopqrstuvwxyz"))

    def score(c) -> float:
        return sum(t in letters for t in c.ids[:4]) / 4

    rewards = []
    for step in range(30):
        comps = generate(model, ["abc"] * 8, max_new_tokens=4, temperature=1.0, seed=step)
        r = torch.tensor([[score(c) for c in comps]], dtype=torch.float64)
        rewards.append(float(r.mean()))
        policy_update(
            model,
            None,
            opt,
            params,
            [c.prompt_ids for c in comps],
            comps,
            advantages(r).flatten(),
            cfg,
        )
    assert sum(rewards[-5:]) / 5 > sum(rewards[:5]) / 5 + 0.3, rewards


def test_bad_input(tmp_path, capsys):
    assert main(["rl", "--init", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    assert "not found" in capsys.readouterr().err
    save_model(tmp_path / "ck", tiny_model())
    for extra, text in [
        (["--families", "increment,bogus"], "unknown family"),
        (["--group-size", "1"], "group size"),
    ]:
        assert (
            main(["rl", "--init", str(tmp_path / "ck"), "--out", str(tmp_path / "o"), *extra]) == 2
        )
        assert text in capsys.readouterr().err


def test_rl_command_end_to_end_and_resume(tmp_path, capsys):
    save_model(tmp_path / "ck", tiny_model())
    args = [
        "rl",
        "--init",
        str(tmp_path / "ck"),
        "--out",
        str(tmp_path / "o"),
        "--groups",
        "4",
        "--group-size",
        "3",
        "--tasks-per-step",
        "2",
        "--eval-every",
        "2",
        "--dev-per-family",
        "1",
        "--max-new-tokens",
        "8",
        "--families",
        "double,even",
        "--kl",
        "0.1",
        "--ptx",
        "0.5",
        "--ptx-batch",
        "2",
        "--device",
        "cpu",
    ]
    assert main(args) == 0
    rows = (tmp_path / "o" / "rollouts.jsonl").read_text().splitlines()
    assert len(rows) == 12 and (tmp_path / "o" / "rl.png").is_file()
    assert (tmp_path / "o" / "best" / "model.safetensors").is_file()
    metrics = (tmp_path / "o" / "metrics.jsonl").read_text()
    health = {
        "reward_mean",
        "reward_std",
        "no_spread_share",
        "entropy",
        "kl",
        "clip_fraction",
        "mean_len",
        "truncation_rate",
        "grad_norm",
    }
    assert all(health <= set(json.loads(line)) for line in metrics.splitlines())
    assert main([*args, "--resume"]) == 0  # finished: resumes at the end, changes nothing
    assert (tmp_path / "o" / "metrics.jsonl").read_text() == metrics
    assert main([*args, "--lr", "0.5", "--resume"]) == 2
    assert "settings that differ from the run in" in capsys.readouterr().err
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    del run["rl"]["kl_rows"]  # a run recorded before the setting existed
    (tmp_path / "o" / "run.json").write_text(json.dumps(run))
    assert main([*args, "--resume"]) == 2
    assert (
        capsys.readouterr()
        .err.rstrip()
        .endswith("differ from the run in " + str(tmp_path / "o") + ": rl.kl_rows")
    )


def test_health_metrics_of_a_step(tmp_path, monkeypatch):
    """Against the rollouts the step wrote: reward spread, groups without spread, truncation
    and length; entropy and KL from the scored tokens (KL 0 before the first update)."""
    monkeypatch.setattr("glmflash.verify.verify_many", length_verdicts)
    from glmflash.train.rl import Learner, rl_step

    model = tiny_model(4)
    with torch.no_grad():
        model.embedding.weight.mul_(4)
    set_scope(model, "all")
    cfg = RLConfig(
        group_size=4,
        tasks_per_step=2,
        max_new_tokens=6,
        families=("double",),
        ladder_share=0.0,
        lr=1e-2,
    )
    params = list(model.parameters())
    reference = tiny_model(4)
    reference.load_state_dict(model.state_dict())
    batch = rl_tasks(RLConfig(groups=2, families=("double",), ladder_share=0.0))
    learner = Learner(model, reference, None, rl_optimizer(params, cfg), params, cfg, tmp_path)
    stats = rl_step(learner, batch, 0)
    rows = [json.loads(line) for line in (tmp_path / "rollouts.jsonl").open()]
    rewards = torch.tensor([r["reward"] for r in rows], dtype=torch.float64)
    assert stats["reward_mean"] == pytest.approx(float(rewards.mean()))
    assert stats["reward_std"] == pytest.approx(float(rewards.std()))
    groups = rewards.view(2, 4)
    assert stats["no_spread_share"] == float((groups.amax(1) == groups.amin(1)).sum()) / 2
    assert stats["no_spread_share"] < 1  # so an update ran: KL measured before it, at 0
    assert stats["kl"] == pytest.approx(0.0, abs=1e-6)
    assert 0 < stats["entropy"] < math.log(model.cfg.vocab_size)
    assert stats["grad_norm"] > 0 and stats["clip_fraction"] == 0.0
    assert 0 <= stats["truncation_rate"] <= 1 and stats["mean_len"] <= cfg.max_new_tokens


def test_ppo_epochs_at_rest_have_the_plain_gradient():
    """With lr 0 the policy never moves, so every PPO epoch sees ratio 1: its gradient must be
    the plain token-mean policy gradient, and nothing is clipped."""
    model = tiny_model(5).double()
    set_scope(model, "all")
    comps = generate(model, ["def f(a):"] * 4, max_new_tokens=6, temperature=1.0, seed=0)
    prompts = [c.prompt_ids for c in comps]
    assert all(c.ids for c in comps)  # tokens to score
    adv = advantages(torch.tensor([[1.0, 0.0, 0.5, 0.0]], dtype=torch.float64)).flatten()
    params = list(model.parameters())
    cfg = RLConfig(aggregation="token_mean", update_epochs=3, grad_clip=1e9)
    stats = policy_update(
        model, None, torch.optim.SGD(params, lr=0.0), params, prompts, comps, adv, cfg
    )
    got = [p.grad.clone() for p in params]
    assert stats["clip_fraction"] == 0.0 and stats["grad_norm"] > 0
    model.zero_grad()
    ids = [c.sampled for c in comps]
    logp, mask, *_ = sequence_logprobs(model, prompts, ids, temperature=cfg.temperature)
    expected = -sum(a * logp[i][mask[i]].mean() for i, a in enumerate(adv.tolist())) / 4
    expected.backward()
    for p, g in zip(params, got, strict=True):
        torch.testing.assert_close(g, p.grad, rtol=1e-8, atol=1e-12)
    # a large step moves the ratios out of [0.8, 1.2] within the batch's later epochs
    moved = policy_update(
        model, None, torch.optim.SGD(params, lr=1.0), params, prompts, comps, adv, cfg
    )
    assert moved["clip_fraction"] > 0


def test_rl_plot_draws_the_health_panels(tmp_path):
    rows = [
        {
            "step": s,
            "reward_mean": 0.1 * s,
            "reward_std": 0.2,
            "pass_rate": 0.1,
            "no_spread_share": 0.5,
            "truncation_rate": 0.0,
            "clip_fraction": 0.0,
            "entropy": 1.0,
            "kl": 0.01 * s,
            "grad_norm": 1.0,
            "mean_len": 40.0,
        }
        for s in (4, 8)
    ] + [
        {"step": 12, "reward_mean": None, "pass_rate": None, "dev_pass1": 0.5}
    ]  # an sft row: no health figures
    plot_rl(rows, tmp_path / "rl.png")
    assert (tmp_path / "rl.png").stat().st_size > 10_000


def test_rl_tasks_mix_ladder_and_families_evenly():
    cfg = RLConfig(groups=12, ladder_share=0.25, families=("double", "even"))
    order = rl_tasks(cfg)
    from_ladder = [t.family in {s.name for s in ladder.structures("rl")} for t in order]
    assert len(order) == 12 and sum(from_ladder) == 3
    assert from_ladder.index(True) < 6  # spread through the run, not appended at the end
    assert {t.family for t, lad in zip(order, from_ladder, strict=True) if not lad} == {
        "double",
        "even",
    }
    assert all(split_of_name(t.name) == "rl" for t in order)
    only = rl_tasks(RLConfig(groups=5, ladder_share=1.0, families=()))
    same = ladder.rl_ladder_tasks("rl", 5, RLConfig().seed)
    assert [t.prompt for t in only] == [t.prompt for t in same]
    dev = dev_tasks(
        RLConfig(ladder_share=0.5, dev_per_family=2, dev_ladder=3, families=("double",))
    )
    assert len(dev) == 5 and all(split_of_name(t.name) == "dev" for t in dev)
    with pytest.raises(ValueError, match="ladder share"):
        RLConfig(ladder_share=1.5)
    with pytest.raises(ValueError, match="objective"):
        RLConfig(objective="ppo")
    with pytest.raises(ValueError, match="sampler edge needs objective rloo"):
        RLConfig(sampler="edge", objective="sft")
    for bad in (0.0, 1.2):
        with pytest.raises(ValueError, match="edge discount"):
            RLConfig(edge_discount=bad)
    with pytest.raises(ValueError, match="edge_weight"):
        RLConfig(edge_weight="mean")


def test_sft_step_lowers_the_reference_bodies_loss():
    """The supervised control: repeated steps on the same tasks must raise the log-likelihood
    of exactly their reference bodies (+ EOS), the quantity it reports as its loss."""
    model = tiny_model(2)
    cfg = RLConfig(objective="sft", lr=3e-3, scope="all", ladder_share=1.0, families=())
    params = [p for p in model.parameters()]
    opt = torch.optim.AdamW(params, lr=cfg.lr)
    batch = ladder.rl_ladder_tasks("rl", 2, 0)
    prompts = [tok.encode(t.prompt) for t in batch]
    bodies = [tok.encode(t.reference) + [tok.EOS] for t in batch]

    def nll() -> float:
        with torch.no_grad():
            logp, mask, *_ = sequence_logprobs(model, prompts, bodies)
        return float(-logp.sum() / mask.sum())

    before = nll()
    learner = Learner(model, None, None, opt, params, cfg, None)
    first = sft_step(learner, batch, 0)
    assert first["loss"] == pytest.approx(before, rel=1e-4)
    for _ in range(5):
        sft_step(learner, batch, 0)
    assert nll() < before - 0.5


def test_policy_update_scores_the_sampled_tokens_and_averages_over_all():
    """Mixed zero and non-zero advantages, completions ended by EOS, by a dedent, by the
    length limit: the loss and gradient are -(1/N) sum_i A_i log pi(y_i) over all N
    completions, y_i the body plus the token that ended it (EOS or the dedenting byte; none at
    the length limit), each computed on its own: an empty completion still has its stop. pi is
    the rollouts' policy, softmax(logits / temperature) over bytes and EOS."""
    model = tiny_model(3).double()
    prompts = [
        tok.encode(p)
        for p in ("def f(x):\n", "def g(a):\n", "# r\ndef hh(y):\n", "def k(x):\n", "def m(zz):\n")
    ]
    made = [
        ("    return x", "eos", tok.EOS, 0.75),
        ("    return 1\n", "complete", tok.encode("d")[0], 0.5),
        ("    y = x", "eos", tok.EOS, -0.25),
        ("", "complete", tok.encode("#")[0], -1.0),  # stopped at once: only the stop is scored
        ("  z\n", "length", None, -0.5),
    ]
    comps = [
        Completion(p, tok.encode(text), text, stop, stop_id)
        for p, (text, stop, stop_id, _) in zip(prompts, made, strict=True)
    ]
    adv = torch.tensor([a for *_, a in made], dtype=torch.float64)
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=0.0)  # keeps the weights; the gradients stay in .grad
    loss = policy_update(model, None, opt, params, prompts, comps, adv, RLConfig(grad_clip=1e9))[
        "loss"
    ]
    got = [p.grad.clone() for p in params]
    model.zero_grad()
    expected = 0.0
    emitted = [tok.EOS, *range(tok.BYTE_OFFSET, tok.TEXT_VOCAB_SIZE)]  # what generation emits
    for prompt, (text, _, stop_id, a) in zip(prompts, made, strict=True):
        scored = tok.encode(text) + ([] if stop_id is None else [stop_id])
        ids = torch.tensor([[tok.BOS, *prompt, *scored]])
        z = model(ids[:, :-1]).logits[0][:, emitted] / RLConfig().temperature
        logp = torch.log_softmax(z, -1)
        expected = (
            expected
            - a * sum(logp[len(prompt) + t, emitted.index(y)] for t, y in enumerate(scored)) / 5
        )
    expected.backward()
    assert loss == pytest.approx(float(expected.detach()), rel=1e-10)
    for p, g in zip(params, got, strict=True):
        torch.testing.assert_close(g, p.grad, rtol=1e-8, atol=1e-12)


def length_verdicts(sources, tasks):
    """A stand-in verifier with reward spread for a random model: pass iff the program's length
    is a multiple of 3 (the completions differ in how many blank lines they hold)."""
    return [
        Verdict("pass" if len(s) % 3 == 0 else "fail", int(len(s) % 3 == 0), 1) for s in sources
    ]


SMALL_RUN = dict(  # two steps of two groups of 3, on the whole model
    families=("double", "even"),
    groups=4,
    group_size=3,
    tasks_per_step=2,
    max_new_tokens=8,
    lr=1e-3,
    scope="all",
)


def peaked_checkpoint(tmp_path) -> Path:
    """A tiny model with room for the ladder's prompts, far from uniform (so completions
    differ and rewards spread), saved under tmp_path."""
    torch.manual_seed(0)
    model = GLMFlash(model_config("tiny", context=192))
    with torch.no_grad():
        model.embedding.weight.mul_(4)
    return save_model(tmp_path / "ck", model)


class Killed(Exception):
    """The process dying part-way through a step."""


def test_rl_resumed_after_a_kill_equals_the_uninterrupted_run(tmp_path, monkeypatch):
    """Killed in its second step (after that step's rollouts were written, before its
    checkpoint), then resumed: rollouts, metrics, final weights and the best checkpoint equal
    those of the run that was never interrupted (KL and ptx terms on). Both steps update, and
    the best dev score comes before the kill, so each piece of saved state matters: the dev
    score is a stand-in, a fixed function of the weights (the first weights it is shown score
    0.25, the second 0.5, the third 0), so equal weights always score alike."""
    monkeypatch.setattr("glmflash.verify.verify_many", length_verdicts)
    seen: list[tuple[torch.Tensor, float]] = []

    def dev_score(model, *args, **kwargs):
        weights = torch.cat([p.detach().flatten() for p in model.parameters()])
        for w, score in seen:
            if torch.equal(w, weights):
                return SimpleNamespace(pass_rate=score)
        seen.append((weights, [0.25, 0.5, 0.0][len(seen)]))
        return SimpleNamespace(pass_rate=seen[-1][1])

    monkeypatch.setattr("glmflash.train.rl.evaluate_tasks", dev_score)
    init = peaked_checkpoint(tmp_path)
    cfg = RLConfig(
        **SMALL_RUN, eval_every=2, dev_per_family=2, dev_ladder=4, kl=0.1, ptx=0.5, ptx_batch=2
    )
    calls = []

    def dies_in_step_2(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise Killed
        return policy_update(*args, **kwargs)

    kw = dict(device="cpu", log=lambda _: None, progress=False)
    train_rl(init, tmp_path / "whole", cfg, **kw)
    monkeypatch.setattr("glmflash.train.rl.policy_update", dies_in_step_2)
    with pytest.raises(Killed):
        train_rl(init, tmp_path / "killed", cfg, **kw)
    monkeypatch.setattr("glmflash.train.rl.policy_update", policy_update)
    train_rl(init, tmp_path / "killed", cfg, resume=True, **kw)

    def rows(run: str, name: str) -> list[dict]:
        return [
            {k: v for k, v in json.loads(line).items() if not k.endswith(("_per_s", "_seconds"))}
            for line in (tmp_path / run / name).open()
        ]

    rollouts = rows("whole", "rollouts.jsonl")
    assert len(rollouts) == 12 and len({r["reward"] for r in rollouts}) == 2
    assert rows("killed", "rollouts.jsonl") == rollouts
    metrics = rows("whole", "metrics.jsonl")
    assert len(metrics) == 2 and all(r["loss"] != 0 for r in metrics)  # both steps update
    assert rows("killed", "metrics.jsonl") == metrics
    for folder in ("checkpoints/step_000004", "best"):
        a, b = (
            load_file(str(tmp_path / run / folder / "model.safetensors"))
            for run in ("whole", "killed")
        )
        assert all(torch.equal(a[k], b[k]) for k in a), folder
    best = [
        json.loads((tmp_path / run / "best" / "config.json").read_text())["meta"]
        for run in ("whole", "killed")
    ]
    assert best[0]["best"] == best[1]["best"]
    assert best[0]["best"]["group"] == 2  # chosen before the kill: the resume must keep it


def test_best_checkpoint_ties_go_to_the_later_one(tmp_path, monkeypatch):
    """Checkpoint selection by dev pass@1: a strictly lower score keeps the best, an equal one
    replaces it (the later checkpoint wins a tie); best/ holds the chosen weights."""
    scores = iter([0.5, 0.25, 0.5, 0.4])
    monkeypatch.setattr(
        "glmflash.train.rl.evaluate_tasks", lambda *a, **k: SimpleNamespace(pass_rate=next(scores))
    )
    best, chosen = None, {}
    for g in (0, 2, 4, 6):
        model = tiny_model(g)
        chosen[g] = model.embedding.weight.detach().clone()
        best = _evaluate_dev(model, [], RLConfig(), tmp_path, g, best)
        assert best["last"] == [0.5, 0.25, 0.5, 0.4][g // 2]
        assert (best["group"], best["dev_pass1"]) == {
            0: (0, 0.5),
            2: (0, 0.5),
            4: (4, 0.5),
            6: (4, 0.5),
        }[g]
    saved = load_file(str(tmp_path / "best" / "model.safetensors"))
    assert torch.equal(saved["embedding.weight"], chosen[4])
    assert _best_so_far(tmp_path) == {"group": 4, "dev_pass1": 0.5, "last": 0.5}


def test_policy_update_passes_the_asymmetric_clip(monkeypatch):
    """clip_low and clip_high reach the PPO surrogate as its low and high sides."""
    seen = []

    def spy(*args, **kwargs):
        seen.append(args[-2:])
        return policy_surrogate(*args, **kwargs)

    monkeypatch.setattr("glmflash.train.rl.policy_surrogate", spy)
    model = tiny_model(3)
    comps = generate(model, ["def f(a):"] * 2, max_new_tokens=4, temperature=1.0, seed=0)
    params = list(model.parameters())
    cfg = RLConfig(update_epochs=2, clip_low=0.1, clip_high=0.3)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    policy_update(
        model,
        None,
        rl_optimizer(params, cfg),
        params,
        [c.prompt_ids for c in comps],
        comps,
        adv,
        cfg,
    )
    assert seen == [(0.1, 0.3)] * 2
    assert RLConfig().clip_low == RLConfig().clip_high == 0.2  # symmetric unless asked


@pytest.mark.parametrize("weight, discount", [("variance", 1.0), ("spread", 0.5)])
def test_edge_sampler_run_drops_refills_and_resumes_exactly(
    tmp_path, monkeypatch, capsys, weight, discount
):
    """rl --sampler edge on the tiny preset (a stand-in verifier under which the double
    family never passes, so its groups have no spread): every step logs groups drawn and kept,
    the share without spread and the pool's pass-rate histogram, which equal a direct count of
    the probe and rollouts files; kept groups are exactly those with spread, the update sees
    only them, a step draws at most max_redraws extra groups and stops early only at that
    limit (the histogram from counts discounted once a step). Killed in its second step and
    resumed, the run writes what the uninterrupted one does (the sampler's counts are rebuilt
    from the files)."""
    torch.manual_seed(0)
    model = GLMFlash(model_config("tiny", context=192))  # room for the ladder's prompts
    with torch.no_grad():  # far from uniform, so completions differ and rewards spread
        model.embedding.weight.mul_(4)
    save_model(tmp_path / "ck", model)
    G, per_step, limit = 3, 2, 3
    flags = (
        f"--groups 6 --group-size {G} --tasks-per-step {per_step} --max-redraws {limit} "
        "--edge-probe 2 --families double,even --ladder-share 0.5 --max-new-tokens 8 "
        "--eval-every 6 --dev-per-family 1 --dev-ladder 1 --scope all --device cpu "
        f"--edge-weight {weight} --edge-discount {discount}"
    ).split()
    cfg = RLConfig(
        groups=6, group_size=G, tasks_per_step=per_step, max_redraws=limit, edge_probe=2,
        families=("double", "even"), ladder_share=0.5, max_new_tokens=8, eval_every=6,
        dev_per_family=1, dev_ladder=1, scope="all", sampler="edge",
    )  # fmt: skip
    pool = rl_tasks(cfg)
    never = {t.name for t in pool if t.family == "double"}

    def verdicts(sources, tasks):
        return [
            Verdict("fail", 0, 1) if t.entry_point in never else v
            for v, t in zip(length_verdicts(sources, tasks), tasks, strict=True)
        ]

    monkeypatch.setattr("glmflash.verify.verify_many", verdicts)
    monkeypatch.setattr(
        "glmflash.train.rl.evaluate_tasks", lambda *a, **k: SimpleNamespace(pass_rate=0.0)
    )
    updated = []

    def recorded(*args, **kwargs):
        updated.append(len(args[5]))  # the completions the update sees
        return policy_update(*args, **kwargs)

    def dies_in_step_2(*args, **kwargs):
        if len(updated) == 1:
            raise Killed
        return recorded(*args, **kwargs)

    monkeypatch.setattr("glmflash.train.rl.policy_update", recorded)
    run = ["rl", "--init", str(tmp_path / "ck"), "--sampler", "edge", *flags]
    assert main([*run, "--out", str(tmp_path / "whole")]) == 0
    whole = tmp_path / "whole"
    assert json.loads((whole / "run.json").read_text())["rl"]["sampler"] == "edge"
    probe = [json.loads(line) for line in (whole / "probe.jsonl").open()]
    rollouts = [json.loads(line) for line in (whole / "rollouts.jsonl").open()]
    metrics = [json.loads(line) for line in (whole / "metrics.jsonl").open()]
    assert len(probe) == 2 * len(pool) == 12 and len(metrics) == 3
    assert updated == [G * m["groups_kept"] for m in metrics]
    counts = {(t.family, t.name): [0, 0] for t in pool}
    for r in probe:
        counts[r["family"], r["task"]][1] += 1
        counts[r["family"], r["task"]][0] += r["status"] == "pass"
    for m in metrics:
        counts = {k: [c * Fraction(discount) for c in v] for k, v in counts.items()}
        rows = [r for r in rollouts if r["step"] == m["step"]]
        assert len(rows) == G * m["groups_drawn"]
        groups = [rows[k : k + G] for k in range(0, len(rows), G)]
        spread = [len({r["reward"] for r in g}) > 1 for g in groups]
        assert [g[0]["kept"] for g in groups] == spread
        assert all(len({r["kept"] for r in g}) == 1 for g in groups)
        assert m["groups_kept"] == sum(spread) and m["no_spread"] == len(groups) - sum(spread)
        assert m["no_spread_share"] == m["no_spread"] / m["groups_drawn"]
        assert m["groups_drawn"] <= per_step + limit
        assert m["groups_kept"] == per_step or m["groups_drawn"] == per_step + limit
        for r in rows:
            counts[r["family"], r["task"]][1] += 1
            counts[r["family"], r["task"]][0] += r["status"] == "pass"
        tried = [Fraction(s, n) for s, n in counts.values() if n]
        assert m["pool_untried"] == len(pool) - len(tried)
        assert m["pool_pass_hist"] == [
            sum(k <= p * 5 < k + 1 or (p == 1 and k == 4) for p in tried) for k in range(5)
        ]
    assert any(m["no_spread"] for m in metrics) and all(m["groups_kept"] for m in metrics)
    assert not any(r["kept"] for r in rollouts if r["task"] in never)
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["groups_drawn"] == sum(m["groups_drawn"] for m in metrics)

    monkeypatch.setattr("glmflash.train.rl.policy_update", dies_in_step_2)
    updated.clear()
    with pytest.raises(Killed):
        main([*run, "--out", str(tmp_path / "killed")])
    monkeypatch.setattr("glmflash.train.rl.policy_update", recorded)
    assert main([*run, "--out", str(tmp_path / "killed"), "--resume"]) == 0

    def rows(folder: str, name: str) -> list[dict]:
        return [
            {k: v for k, v in json.loads(line).items() if not k.endswith(("_per_s", "_seconds"))}
            for line in (tmp_path / folder / name).open()
        ]

    for name in ("probe.jsonl", "rollouts.jsonl", "metrics.jsonl"):
        assert rows("killed", name) == rows("whole", name), name


def test_edge_pool_rebuilds_discounted_counts_from_the_run_files(tmp_path):
    """On resume the sampler's counts come from probe.jsonl and rollouts.jsonl: with discount
    gamma, a probe sample weighs gamma^K after K steps and a rollout of step k gamma^(K - k),
    as the uninterrupted run counted them (discount, then the step's groups)."""
    gamma = 0.5
    cfg = RLConfig(sampler="edge", edge_discount=gamma, families=("double",), ladder_share=0.5)
    pool = rl_tasks(cfg)
    a, b = pool[0], pool[1]
    probe = [(a, "pass"), (a, "fail"), (b, "fail")]
    steps = {4: [(a, "pass"), (a, "pass"), (b, "fail")], 8: [(b, "pass")], 12: [(a, "fail")]}

    def row(task, status, **extra):
        return json.dumps({"task": task.name, "family": task.family, "status": status, **extra})

    (tmp_path / "probe.jsonl").write_text("".join(row(t, s) + "\n" for t, s in probe))
    (tmp_path / "rollouts.jsonl").write_text(
        "".join(row(t, s, step=k) + "\n" for k, rows in steps.items() for t, s in rows)
    )
    edge = edge_pool(SimpleNamespace(out=tmp_path, cfg=cfg), pool, start=12)
    expected = {a.name: [0.0, 0.0], b.name: [0.0, 0.0]}
    for t, s in probe:
        expected[t.name][0] += gamma**3 * (s == "pass")
        expected[t.name][1] += gamma**3
    for k, (_, rows) in enumerate(steps.items()):
        for t, s in rows:
            expected[t.name][0] += gamma ** (2 - k) * (s == "pass")
            expected[t.name][1] += gamma ** (2 - k)
    for i, t in enumerate(edge.tasks):
        passes, trials = expected.get(t.name, (0, 0))
        assert (edge.sampler.passes[i], edge.sampler.trials[i]) == pytest.approx((passes, trials))


def test_ladder_depths_restrict_the_rl_and_dev_tasks_and_reach_the_cli():
    """ladder_depths 2: every ladder task RL trains and selects on is a depth-2 RL structure,
    all 63 of them before any repeats; the flag parses to integers; other depths are refused."""
    depth2 = {s.name for s in ladder.structures("rl", 2)}
    assert len(depth2) == 63  # the count the setting's help states
    cfg = RLConfig(groups=80, ladder_share=1.0, families=(), ladder_depths=(2,))
    order = rl_tasks(cfg)
    assert {t.family for t in order} == depth2  # 80 tasks cycle all 63 structures
    mixed = rl_tasks(RLConfig(groups=80, ladder_share=1.0, families=()))
    assert sum(t.family in depth2 for t in mixed) < 20  # the default: mostly depth 3
    dev = dev_tasks(RLConfig(ladder_depths=(2,), dev_per_family=1, dev_ladder=30))
    assert all(t.family in depth2 for t in dev if t.family not in ("increment", "double", "even"))
    assert all(split_of_name(t.name) == "dev" for t in dev)
    from glmflash.flags import parse_setting

    assert parse_setting(tuple[int, ...], "2") == (2,)
    assert parse_setting(tuple[int, ...], "2, 3") == (2, 3)
    with pytest.raises(ValueError, match="expected list of int"):
        parse_setting(tuple[int, ...], "two")
    for bad in ((), (1, 2), (4,)):
        with pytest.raises(ValueError, match="ladder depths"):
            RLConfig(ladder_depths=bad)


def test_edge_pool_by_structure_pools_every_instance_of_a_family_or_structure(tmp_path):
    """edge_estimate structure: the rollouts of two instances of one seed family count toward
    one estimate, which every instance of the family reads, drawn or not; a ladder structure's
    instances likewise; the per-task default keeps them apart."""
    cfg = RLConfig(sampler="edge", edge_estimate="structure", families=("double",), groups=24)
    pool = rl_tasks(cfg)
    doubles = [i for i, t in enumerate(pool) if t.family == "double"]
    a, b = pool[doubles[0]], pool[doubles[1]]
    rows = [(a, "pass"), (a, "pass"), (b, "fail"), (b, "pass")]
    (tmp_path / "rollouts.jsonl").write_text(
        "".join(
            json.dumps({"task": t.name, "family": t.family, "status": s, "step": 4}) + "\n"
            for t, s in rows
        )
    )
    learner = SimpleNamespace(out=tmp_path, cfg=cfg)
    edge = edge_pool(learner, pool, start=4)
    p = edge.sampler.estimates()
    assert {p[i] for i in doubles} == {(3 + 1) / (4 + 2)}  # all 8 doubles, 2 of them drawn
    assert len({edge.sampler.key[i] for i in doubles}) == 1
    assert all(p[i] == 0.5 for i in range(len(pool)) if i not in doubles)  # untouched: prior
    by_structure = {}
    for i, t in enumerate(pool):
        by_structure.setdefault(t.family, set()).add(edge.sampler.key[i])
    assert all(len(k) == 1 for k in by_structure.values())
    assert len(set(edge.sampler.key)) == len(by_structure)
    per_task = SimpleNamespace(out=tmp_path, cfg=dataclasses.replace(cfg, edge_estimate="task"))
    alone = edge_pool(per_task, pool, start=4).sampler.estimates()
    assert (alone[doubles[0]], alone[doubles[1]], alone[doubles[2]]) == (3 / 4, 2 / 4, 1 / 2)


def test_bf16_updates_score_under_autocast_and_follow_the_fp32_gradient():
    """amp bf16: the update's loss differs from fp32's (so autocast was on) by bf16 rounding
    only, and its gradient norm is fp32's within 5%."""
    model = tiny_model()
    set_scope(model, "all")
    comps = generate(model, ["def f(x):\n"] * 4, max_new_tokens=6, temperature=1.0, seed=0)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5], dtype=torch.float64)
    prompts = [c.prompt_ids for c in comps]
    stats = {}
    for amp in (None, torch.bfloat16):
        params = list(model.parameters())
        opt = torch.optim.AdamW(params, lr=0.0)
        cfg = RLConfig(grad_clip=1e9)
        stats[amp] = policy_update(model, None, opt, params, prompts, comps, adv, cfg, amp=amp)
    fp32, bf16 = stats[None], stats[torch.bfloat16]
    assert bf16["loss"] != fp32["loss"]
    assert bf16["loss"] == pytest.approx(fp32["loss"], rel=0.05)
    assert bf16["grad_norm"] == pytest.approx(fp32["grad_norm"], rel=0.05)


def test_auto_precision_is_chosen_once_and_read_back_on_resume(tmp_path, monkeypatch):
    """precision auto: the first start's choice (bf16, from a stand-in calibration) is written
    to run.json and every update runs under it; a resume after a kill reads it back even where
    the calibration now says fp32, so a run never switches precision half-way."""
    monkeypatch.setattr("glmflash.verify.verify_many", length_verdicts)
    monkeypatch.setattr(
        "glmflash.train.rl.evaluate_tasks", lambda *a, **kw: SimpleNamespace(pass_rate=0.0)
    )
    init = peaked_checkpoint(tmp_path)
    cfg = RLConfig(**SMALL_RUN, eval_every=4, dev_per_family=1, dev_ladder=1, precision="auto")
    amps = []

    def recorded(*args, **kwargs):
        amps.append(kwargs["amp"])
        if len(amps) == 2:
            raise Killed
        return policy_update(*args, **kwargs)

    monkeypatch.setattr("glmflash.train.rl.policy_update", recorded)
    fast = {"auto": torch.bfloat16, "bf16": torch.bfloat16, "fp32": None}
    monkeypatch.setattr("glmflash.train.runlog.autocast_dtype", lambda dev, p: fast[p])
    kw = dict(device="cpu", log=lambda _: None, progress=False)
    with pytest.raises(Killed):
        train_rl(init, tmp_path / "run", cfg, **kw)
    slow = {"auto": None, "bf16": torch.bfloat16, "fp32": None}
    monkeypatch.setattr("glmflash.train.runlog.autocast_dtype", lambda dev, p: slow[p])
    train_rl(init, tmp_path / "run", cfg, resume=True, **kw)
    assert amps == [torch.bfloat16] * 3
    machines = json.loads((tmp_path / "run" / "run.json").read_text())["machines"]
    assert [m["dtypes"]["autocast"] for m in machines] == ["bfloat16", "bfloat16"]
