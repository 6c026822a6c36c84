from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch

from glmflash import tokenizer as tok
from glmflash.config import model_config
from glmflash.generate import (
    StopRule,
    check_against_full_recompute,
    generate,
    prefill,
    sample_next,
)
from glmflash.model.lm import GLMFlash

KINDS = {"elu": {}, "delta": dict(linear_kind="delta"), "indexer": dict(sparse_kind="indexer")}


def model_for(**overrides) -> GLMFlash:
    torch.manual_seed(0)
    model = GLMFlash(model_config("tiny", **overrides))
    with torch.no_grad():  # a random model that is far from uniform, so samples vary
        model.embedding.weight.mul_(4)
    return model


def record_steps(monkeypatch) -> list[tuple[str, tuple[int, ...]]]:
    """Every `GLMFlash.step` call from now on, as ("prefill" | "decode", tokens.shape)."""
    calls, step = [], GLMFlash.step

    def recorded(self, tokens, state=None):
        calls.append(("prefill" if state is None else "decode", tuple(tokens.shape)))
        return step(self, tokens, state)

    monkeypatch.setattr(GLMFlash, "step", recorded)
    return calls


PROMPTS = [
    "# Return x plus one.\ndef increment_abc(x):\n",
    "def f(x):\n",
    "# Return x.\ndef g(x):\n",
    "abc",
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("temperature, top_p", [(0.0, 1.0), (1.0, 1.0), (0.8, 0.9)])
def test_cached_equals_full_recomputation(kind, temperature, top_p):
    model = model_for(**KINDS[kind])
    kw = dict(max_new_tokens=20, temperature=temperature, top_p=top_p, seed=3)
    cached = generate(model, PROMPTS * 2, use_cache=True, **kw)
    full = generate(model, PROMPTS * 2, use_cache=False, **kw)
    assert [c.ids for c in cached] == [c.ids for c in full]
    assert [c.stop for c in cached] == [c.stop for c in full]
    assert any(len(c.ids) > 0 for c in cached)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "prompts, distinct",
    [
        (["# f(x) =", "# g(y) =", "# g(y) =", "# f(x) =", "# h(z) ="] * 2, 3),
        (
            ["zzzzzzzz", "# hello!", "]]]]]]]]", "12345678", "        "],
            5,
        ),  # none repeated, unsorted
    ],
)
def test_samples_of_a_prompt_share_one_prefill(kind, prompts, distinct, monkeypatch):
    """Distinct prompts of one length interleaved with repeats (as RL's groups are), or all
    distinct: the prefill runs once per distinct prompt, and every row still decodes as full
    recomputation of its own prompt does."""
    model = model_for(**KINDS[kind])
    kw = dict(max_new_tokens=16, temperature=1.0, seed=7)
    calls = record_steps(monkeypatch)
    cached = generate(model, prompts, use_cache=True, **kw)
    full = generate(model, prompts, use_cache=False, **kw)
    assert [shape[0] for kind, shape in calls if kind == "prefill"] == [distinct]
    assert [c.ids for c in cached] == [c.ids for c in full]
    assert len({tuple(c.ids) for c in cached}) >= distinct  # samples differ


def test_sampling_is_seeded():
    model = model_for()
    a = generate(model, PROMPTS, max_new_tokens=12, temperature=1.0, seed=5)
    b = generate(model, PROMPTS, max_new_tokens=12, temperature=1.0, seed=5)
    c = generate(model, PROMPTS, max_new_tokens=12, temperature=1.0, seed=6)
    assert [x.ids for x in a] == [x.ids for x in b] != [x.ids for x in c]


def ids(text: str) -> list[int]:
    return tok.encode(text)


@pytest.mark.parametrize(
    "stream, kept, stop",
    [
        ("    return x + 1\n\nprint(1)", "    return x + 1\n\n", "complete"),
        ("    y = x\n    return y\ndef h", "    y = x\n    return y\n", "complete"),
        ("return x", "", "complete"),  # no indentation at all: an empty body
        ("    return x\n  \n\tz\n", "    return x\n  \n\tz\n", None),
    ],
)
def test_stop_rule_on_crafted_streams(stream, kept, stop):
    rule = StopRule([True])
    out, reason = [], None
    for t in ids(stream):
        reason = rule(0, t)
        if reason:
            break
        out.append(t)
    assert tok.decode(out) == kept and reason == stop
    rule = StopRule([True])
    assert rule(0, tok.encode(" ")[0]) is None and rule(0, tok.EOS) == "eos"


def test_top_p_keeps_only_the_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    g = torch.Generator().manual_seed(0)
    draws = {int(sample_next(logits, 1.0, 0.7, g)) for _ in range(300)}
    assert draws == {0, 1}
    assert int(sample_next(logits, 0.0, 1.0, None)) == 0


def test_length_limit_and_order():
    model = model_for()
    out = generate(model, PROMPTS, max_new_tokens=3, temperature=1.0, seed=0)
    assert [c.prompt_ids for c in out] == [tok.encode(p) for p in PROMPTS]
    assert all(len(c.ids) <= 3 for c in out)
    assert all(t == tok.EOS or tok.BYTE_OFFSET <= t < 260 for c in out for t in c.ids)


class ScriptedLM(torch.nn.Module):
    """A fake model whose logits force a scripted continuation of each prompt: after BOS +
    prompt + j generated tokens it puts all mass on script[prompt][j] (EOS past the end).
    `step` keeps the whole sequence as its state, so cached and full decoding agree."""

    def __init__(self, scripts: dict[str, list[int]]) -> None:
        super().__init__()
        self.cfg = model_config("tiny")
        self.scripts = {tuple([tok.BOS, *tok.encode(p)]): s for p, s in scripts.items()}
        self.dummy = torch.nn.Parameter(torch.zeros(()))  # for the device lookup

    def logits(self, seqs: torch.Tensor) -> torch.Tensor:
        out = torch.full((*seqs.shape, self.cfg.vocab_size), float("-inf"))
        for b, row in enumerate(seqs.tolist()):
            [(prompt, script)] = [
                (p, s) for p, s in self.scripts.items() if tuple(row[: len(p)]) == p
            ]
            j = len(row) - len(prompt)
            out[b, -1, script[j] if j < len(script) else tok.EOS] = 0.0
        return out

    def forward(self, seqs: torch.Tensor):
        return SimpleNamespace(logits=self.logits(seqs))

    def step(self, tokens: torch.Tensor, state=None):
        seqs = tokens if state is None else torch.cat((state.seqs, tokens), 1)
        return self.logits(seqs), ScriptState(seqs)


@dataclass
class ScriptState:
    seqs: torch.Tensor

    def select(self, index: torch.Tensor) -> "ScriptState":
        return ScriptState(self.seqs[index])


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_generation_loop_on_scripted_streams(use_cache, temperature):
    """Through `generate` itself: the dedented line's first token and the EOS are never part of
    a completion but are kept as its `stop_id` (what RL scores), and rows that stop early leave
    the others decoding their own scripts."""
    scripts = {  # four prompts of one length: decoded as one batch
        "def f(x):\n": ids("    return x\nprint(1)"),
        "def g(x):\n": [*ids("    y = x\n    return y"), tok.EOS, *ids("\n    junk")],
        "def h(x):\n": ids("\n    \n\t  z\n" * 4),  # never dedents: stops at the length limit
        "def k(x):\n": ids("return x"),  # dedented at once: an empty body
        "def m(x):": ids("\n  return 2\n# done"),  # the prompt ends mid-line
    }
    model = ScriptedLM(scripts)
    out = generate(
        model, list(scripts), max_new_tokens=24, temperature=temperature, use_cache=use_cache
    )
    assert [(c.text, c.stop) for c in out] == [
        ("    return x\n", "complete"),
        ("    y = x\n    return y", "eos"),
        (tok.decode(scripts["def h(x):\n"][:24]), "length"),
        ("", "complete"),
        ("\n  return 2\n", "complete"),
    ]
    assert all(c.ids == tok.encode(c.text) and tok.EOS not in c.ids for c in out)
    stops = [c.stop_id for c in out]
    assert stops == [ids("p")[0], tok.EOS, None, ids("r")[0], ids("#")[0]]
    assert out[3].sampled == ids("r")[:1] and out[2].sampled == out[2].ids  # empty; cut off


@pytest.mark.parametrize("kind", ["elu", "delta"])
def test_prompts_of_different_lengths_decode_as_one_batch(kind, monkeypatch):
    """Rows of different lengths share every decoding step (each at its own position), and
    each row's greedy completion is the one it gets decoded alone; a prompt near the end of
    the context stops at its own, smaller budget."""
    model = model_for(**KINDS[kind])
    long_prompt = "x" * (model.cfg.context - 6)  # room for 5 new tokens after BOS
    prompts = [*PROMPTS, long_prompt]
    calls = record_steps(monkeypatch)
    together = generate(model, prompts, max_new_tokens=20)
    widths = [shape[0] for kind, shape in calls if kind == "decode"]
    assert widths[0] == len(prompts)  # the first decoding step holds every row
    alone = [generate(model, [p], max_new_tokens=20)[0] for p in prompts]
    assert [(c.ids, c.stop) for c in together] == [(c.ids, c.stop) for c in alone]
    assert len(together[-1].ids) <= 5
    assert any(len(c.ids) > 5 for c in together)


def test_indexer_model_decodes_one_length_per_batch(monkeypatch):
    """The indexer's pooled keys need equal positions: its batches hold one prompt length."""
    model = model_for(**KINDS["indexer"])
    assert not model.ragged_decoding
    calls = record_steps(monkeypatch)
    generate(model, PROMPTS, max_new_tokens=4)
    prefilled = [shape[1] for kind, shape in calls if kind == "prefill"]
    assert sorted(prefilled) == sorted(len(p) + 1 for p in PROMPTS)


def test_prefill_keeps_the_order_of_unsorted_prompts():
    model = model_for().eval()
    prompts = [[tok.BOS, *tok.encode(p)] for p in ("abcdef", "x", "abcdef", "yz", "x")]
    logits, state = prefill(model, prompts)
    feed = torch.tensor([[tok.encode(c)[0]] for c in "pqrst"])
    after, _ = model.step(feed, state)
    for i, p in enumerate(prompts):
        alone, s = model.step(torch.tensor([p]))
        assert torch.allclose(logits[i], alone[0, -1], atol=1e-5)
        assert torch.allclose(after[i], model.step(feed[i : i + 1], s)[0][0], atol=1e-5)


def test_the_check_against_full_recomputation_counts_differing_completions(monkeypatch):
    """On an intact model every completion is identical; where the cached steps go wrong,
    completions differ and are not counted."""
    model = model_for()
    check = check_against_full_recompute(model, PROMPTS, 12)
    expected = generate(model, PROMPTS, 12)
    assert check["prompts"] == len(PROMPTS) and check["identical"] == len(PROMPTS)
    assert check["new_tokens"] == sum(len(c.ids) for c in expected) > 0
    assert check["speedup"] == check["seconds"]["full_recompute"] / check["seconds"]["cached"]

    step = GLMFlash.step

    def stale(self, tokens, state=None):  # every decoding step sees a wrong token
        if state is not None:
            tokens = (tokens + 1) % model.cfg.vocab_size
        return step(self, tokens, state)

    monkeypatch.setattr(GLMFlash, "step", stale)
    broken = check_against_full_recompute(model, PROMPTS, 12)
    assert broken["identical"] < len(PROMPTS)
