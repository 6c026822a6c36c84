import pytest
import torch

from glmflash import tokenizer as tok
from glmflash.config import model_config
from glmflash.generate import StopRule, generate, sample_next
from glmflash.model.lm import GLMFlash

KINDS = {"elu": {}, "delta": dict(linear_kind="delta"), "indexer": dict(sparse_kind="indexer")}


def model_for(**overrides) -> GLMFlash:
    torch.manual_seed(0)
    model = GLMFlash(model_config("tiny", **overrides))
    with torch.no_grad():  # a random model that is far from uniform, so samples vary
        model.embedding.weight.mul_(4)
    return model


PROMPTS = ["# Return x plus one.\ndef increment_abc(x):\n", "def f(x):\n",
           "# Return x.\ndef g(x):\n", "abc"]


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


def test_sampling_is_seeded():
    model = model_for()
    a = generate(model, PROMPTS, max_new_tokens=12, temperature=1.0, seed=5)
    b = generate(model, PROMPTS, max_new_tokens=12, temperature=1.0, seed=5)
    c = generate(model, PROMPTS, max_new_tokens=12, temperature=1.0, seed=6)
    assert [x.ids for x in a] == [x.ids for x in b] != [x.ids for x in c]


def ids(text: str) -> list[int]:
    return tok.encode(text)


@pytest.mark.parametrize("stream, kept, stop", [
    ("    return x + 1\n\nprint(1)", "    return x + 1\n\n", "complete"),
    ("    y = x\n    return y\ndef h", "    y = x\n    return y\n", "complete"),
    ("return x", "", "complete"),  # no indentation at all: an empty body
    ("    return x\n  \n\tz\n", "    return x\n  \n\tz\n", None),
])
def test_stop_rule_on_crafted_streams(stream, kept, stop):
    rule = StopRule(1, line_start=True)
    out, reason = [], None
    for t in ids(stream):
        reason = rule(0, t)
        if reason:
            break
        out.append(t)
    assert tok.decode(out) == kept and reason == stop
    rule = StopRule(1)
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
