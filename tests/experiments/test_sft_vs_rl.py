import json

import torch

from glmflash import cli
from glmflash.config import model_config
from glmflash.experiments import registry
from glmflash.model.lm import GLMFlash
from glmflash.train.checkpoint import save_model


def test_arms_differ_in_the_objective_only():
    exp = registry.get("sft-vs-rl")
    sft, rl = exp.conditions["sft"], exp.conditions["rl"]
    assert {k for k in sft if sft[k] != rl[k]} == {"objective"}
    assert sft["ladder_share"] == 1.0 and sft["families"] == []
    assert len(exp.seeds) >= 5 and exp.comparisons == [("sft", "rl")]


def test_quick_run_scores_both_arms_per_rung(tmp_path):
    torch.manual_seed(0)
    save_model(tmp_path / "ck", GLMFlash(model_config("tiny")))
    out = tmp_path / "exp"
    code = cli.main(["experiment", "sft-vs-rl", "--out", str(out), "--quick", "--seeds", "1",
                     "--set", f"init={tmp_path / 'ck'}"])
    assert code == 0
    runs = sorted((out / "sft-vs-rl" / "runs").glob("*.json"))
    assert len(runs) == 2
    for path in runs:
        record = json.loads(path.read_text())
        assert record["status"] == "ok", record.get("error")
        m = record["metrics"]
        assert m["unseen"] == (m["unseen_depth2"] + m["unseen_depth3"]) / 2
        assert all(0 <= m[r] <= 1 for r in ("rl_only", "seed_neutral_names"))
        assert m["train_seconds"] > 0
