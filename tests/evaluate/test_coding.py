"""Evaluation bookkeeping: pass@k per family and the per-sample pass counts behind it."""

import torch

from glmflash.config import model_config
from glmflash.data.code_tasks import tasks
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
    res = evaluate_tasks(GLMFlash(model_config("tiny")), todo, "sample", samples=3, k=2,
                         seed=1, max_new_tokens=6)
    assert len(res.records) == 12 and res.to_json()["passing_samples"] == res.passing_samples()
    for family in ("increment", "even"):
        mine = [r for r in res.records if r["family"] == family]
        per_task = [sum(r["status"] == "pass" for r in mine if r["name"] == t.name)
                    for t in todo if t.family == family]
        assert res.passing_samples()[family] == [sum(per_task), 6]
        assert res.per_family[family] == [sum(pass_at_k(3, c, 2) for c in per_task), 2]
