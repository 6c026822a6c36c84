import json

import torch

from glmflash import cli
from glmflash.config import model_config
from glmflash.experiments import registry
from glmflash.model.lm import GLMFlash
from glmflash.train.checkpoint import save_model
from glmflash.train.policy_gradient import ALGORITHMS
from glmflash.train.rl import RLConfig


def test_arms_differ_in_the_algorithm_only():
    exp = registry.get("rl-algorithms")
    assert set(exp.conditions) == set(ALGORITHMS) == {"rloo", "grpo", "dr_grpo", "ppo"}
    keys = set(ALGORITHMS["rloo"])
    base = {k: v for k, v in exp.conditions["rloo"].items() if k not in keys}
    for name, condition in exp.conditions.items():
        assert {k: v for k, v in condition.items() if k not in keys} == base
        assert {k: condition[k] for k in keys} == ALGORITHMS[name]
        # the same rollouts: tasks, group size and sampling are shared
        cfg = RLConfig(
            **{
                **{k: v for k, v in condition.items() if k not in ("init", "per_rung")},
                "families": tuple(condition["families"]),
            }
        )
        assert (cfg.groups, cfg.group_size, cfg.temperature) == (48, 8, 0.8)
    assert len(exp.seeds) >= 5 and exp.metric == "unseen"
    assert sorted(exp.comparisons) == [("rloo", "dr_grpo"), ("rloo", "grpo"), ("rloo", "ppo")]


def test_quick_run_of_every_arm(tmp_path):
    torch.manual_seed(0)
    model = GLMFlash(model_config("tiny"))
    with torch.no_grad():  # far from uniform: completions differ
        model.embedding.weight.mul_(4)
    save_model(tmp_path / "ck", model)
    out = tmp_path / "exp"
    code = cli.main(
        [
            "experiment",
            "rl-algorithms",
            "--out",
            str(out),
            "--quick",
            "--seeds",
            "1",
            "--set",
            f"init={tmp_path / 'ck'}",
        ]
    )
    assert code == 0
    runs = sorted((out / "rl-algorithms" / "runs").glob("*.json"))
    assert len(runs) == 4
    for path in runs:
        record = json.loads(path.read_text())
        assert record["status"] == "ok", record.get("error")
        m = record["metrics"]
        assert m["unseen"] == (m["unseen_depth2"] + m["unseen_depth3"]) / 2
        assert m["train_seconds"] > 0 and 0 <= m["no_spread_share"] <= 1
