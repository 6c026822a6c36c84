"""Evaluation bookkeeping: pass@k per family and the per-sample pass counts behind it."""

import pytest
import torch

from glmflash import tokenizer as tok
from glmflash.config import model_config
from glmflash.config.evaluation import Sampling
from glmflash.data.code_tasks import tasks
from glmflash.evaluate import coding
from glmflash.evaluate.coding import EvalResult, evaluate_tasks
from glmflash.evaluate.passk import pass_at_k
from glmflash.model.lm import GLMFlash


def test_passing_samples_by_hand():
    r = EvalResult("sample", 2, 3)
    for family, statuses in (("double", ["pass", "fail", "pass"]), ("even", ["invalid"] * 3)):
        r.records += [{"group": family, "status": s} for s in statuses]
    assert r.passing_samples() == {"double": [2, 3], "even": [0, 3]}


def test_sampled_scores_follow_the_records():
    todo = tasks("dev", ["increment", "even"], per_family=2, seed=0)
    torch.manual_seed(0)
    draws = Sampling("sample", samples=3, k=2, seed=1, max_new_tokens=6)
    res = evaluate_tasks(GLMFlash(model_config("tiny")), todo, draws)
    assert len(res.records) == 12 and res.to_json()["passing_samples"] == res.passing_samples()
    for family in ("increment", "even"):
        mine = [r for r in res.records if r["family"] == family]
        per_task = [
            sum(r["status"] == "pass" for r in mine if r["name"] == t.name)
            for t in todo
            if t.family == family
        ]
        assert res.passing_samples()[family] == [sum(per_task), 6]
        assert res.per_family[family] == [sum(pass_at_k(3, c, 2) for c in per_task), 2]


def scripted_generate(plan: dict[str, list[str]]):
    """A stand-in for `generate`: the j-th request of a prompt gets plan[prompt][j]."""
    from glmflash.generate import Completion

    def fake(model, prompts, **kwargs) -> list[Completion]:
        seen: dict[str, int] = {}
        out = []
        for p in prompts:
            j = seen[p] = seen.get(p, -1) + 1
            text = plan[p][j]
            out.append(Completion(tok.encode(p), tok.encode(text), text, "complete"))
        return out

    return fake


WRONG = "    return 0\n"


@pytest.mark.parametrize(
    "k, expected",
    [
        # per task, pass@k from n = 4 samples of which c = 4, 0, 1, 2 pass:
        # 1 - C(4 - c, k) / C(4, k), by hand
        (1, [1.0, 0.0, 0.25, 0.5]),
        (2, [1.0, 0.0, 0.5, 5 / 6]),
        (4, [1.0, 0.0, 1.0, 1.0]),
    ],
)
def test_sampled_scores_belong_to_their_own_task(monkeypatch, k, expected):
    """Scripted completions (a task's reference body or a wrong one), verified for real: each
    record, pass count and group label belongs to the task whose prompt was completed, and the
    per-group scores are pass@k with the asked k."""
    todo = tasks("dev", ["increment", "double"], per_family=2, seed=0)
    todo = [todo[0], todo[2], todo[1], todo[3]]  # families interleaved
    passing = [4, 0, 1, 2]  # samples (of 4) that get the task's own reference body
    plan = {
        t.prompt: [t.reference] * c + [WRONG] * (4 - c) for t, c in zip(todo, passing, strict=True)
    }
    monkeypatch.setattr(coding, "generate", scripted_generate(plan))
    res = evaluate_tasks(None, todo, Sampling("sample", 4, k), groups=["a", "a", "b", "c"])
    assert [(r["name"], r["completion"], r["status"] == "pass") for r in res.records] == [
        (t.name, text, text == t.reference) for t in todo for text in plan[t.prompt]
    ]
    assert [r["group"] for r in res.records] == [g for g in "aabc" for _ in range(4)]
    assert res.passing_samples() == {"a": [4, 8], "b": [1, 4], "c": [2, 4]}
    assert res.per_family.keys() == {"a", "b", "c"}
    for g, score, n in (
        ("a", expected[0] + expected[1], 2),
        ("b", expected[2], 1),
        ("c", expected[3], 1),
    ):
        assert res.per_family[g] == [pytest.approx(score, abs=1e-12), n]
    assert res.k == k and res.n_samples == 4


def test_greedy_pass_at_1_per_family(monkeypatch):
    """Greedy mode: one completion per task, pass@1 = the share of a family's tasks solved."""
    todo = tasks("dev", ["increment", "double", "even"], per_family=2, seed=0)
    solved = [True, True, True, False, False, False]  # increment 2/2, double 1/2, even 0/2
    plan = {t.prompt: [t.reference if ok else WRONG] for t, ok in zip(todo, solved, strict=True)}
    monkeypatch.setattr(coding, "generate", scripted_generate(plan))
    res = evaluate_tasks(None, todo[::-1])  # reversed: families and tasks out of order
    assert res.per_family == {"even": [0.0, 2], "double": [1.0, 2], "increment": [2.0, 2]}
    assert [(r["name"], r["group"], r["status"] == "pass") for r in res.records] == [
        (t.name, t.family, ok) for t, ok in zip(todo[::-1], solved[::-1], strict=True)
    ]
    assert res.counts(["double", "even"]) == [1.0, 4] and res.pass_rate == 0.5
