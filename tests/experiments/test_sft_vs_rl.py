import dataclasses
import json

import pytest
import torch

from glmflash import cli
from glmflash.checkpoint import read_config, save_model
from glmflash.config import RLConfig, model_config
from glmflash.config.evaluation import Sampling
from glmflash.experiments import registry
from glmflash.experiments.rl_composition import PASSK
from glmflash.model.lm import GLMFlash

RL_FIELDS = {f.name for f in dataclasses.fields(RLConfig)}


def test_arms_differ_in_the_objective_only():
    exp = registry.get("sft-vs-rl")
    sft, rl = exp.conditions["sft"], exp.conditions["rl"]
    assert {k for k in sft if sft[k] != rl[k]} == {"objective"}
    assert sft["ladder_share"] == 1.0 and sft["families"] == []
    assert len(exp.seeds) >= 5 and exp.comparisons == [("sft", "rl")]


@pytest.mark.parametrize(
    "name, arms",
    [
        ("sft-vs-rl", 2),
        ("rl-algorithms", 4),
        ("rl-composition", 5),
        ("rl-passk", 2),
        ("rl-structures", 2),
        ("rl-sampler", 2),
        ("rl-meetings", 4),
        ("rl-stage-variants", 4),
    ],  # rl-remedies' arms are rl-composition's with settings test_rl runs end to end
)
def test_quick_run_scores_every_arm_per_rung(tmp_path, name, arms):
    """The ladder experiments (they share rl_arm) on the tiny model, one seed."""
    torch.manual_seed(0)
    model = GLMFlash(model_config("tiny"))
    with torch.no_grad():  # far from uniform: completions differ
        model.embedding.weight.mul_(4)
    save_model(tmp_path / "ck", model)
    out = tmp_path / "exp"
    argv = ["experiment", name, "--out", str(out), "--quick", "--seeds", "1"]
    assert cli.main([*argv, "--set", f"init={tmp_path / 'ck'}"]) == 0
    runs = sorted((out / name / "runs").glob("*.json"))
    assert len(runs) == arms
    for path in runs:
        record = json.loads(path.read_text())
        assert record["status"] == "ok", record.get("error")
        m = record["metrics"]
        assert m["unseen"] == (m["unseen_depth2"] + m["unseen_depth3"]) / 2
        assert all(0 <= m[r] <= 1 for r in ("rl_only", "seed_neutral_names"))
        assert m["train_seconds"] > 0
        assert m["init_sha256"] == read_config(tmp_path / "ck")[1]["sha256"]
        for rung, outcomes in m["greedy_passes"].items():  # per task, the rate's numerator
            assert len(outcomes) == 2 and sum(outcomes) / 2 == m[rung]
        if "passk" in record["config"]:  # QUICK's 4 samples of 2 tasks per rung
            assert m["passk_samples"] == 4
            assert all(len(c) == 2 and 0 <= min(c) <= max(c) <= 4 for c in m["passes"].values())
        if record["condition"] == "base":  # the checkpoint itself: nothing trained
            assert "curves" not in m and m["rollouts_per_s"] is None
        elif record["condition"] != "sft":  # RL arms report their health
            assert 0 <= m["no_spread_share"] <= 1
            if record["config"].get("sampler") == "edge":  # its pool's pass rates, in fifths
                assert len(m["pool_pass_hist"]["last"]) == 5 and sum(m["pool_pass_hist"]["last"])
            steps = [s for s, _ in m["curves"]["reward_mean"]]
            assert steps == sorted(steps) and steps[-1] == 4  # QUICK's groups


def test_run_trains_the_arm_and_averages_the_unseen_rungs(monkeypatch):
    """With a stand-in trainer and evaluator (the tiny model scores 0 everywhere, which would
    hide a wrong metric): the arm's config reaches train_rl, the rungs' rates are k / n and
    `unseen` is the mean of both unseen rungs."""
    from types import SimpleNamespace

    from glmflash.experiments import rl_arm, sft_vs_rl

    trained = []

    def train(init, out, cfg, **kw):  # two steps' health figures, one without a KL
        trained.append((init, cfg))
        rows = [
            {"step": 4, "entropy": 1.0, "kl": None, "no_spread_share": 0.5, "reward_mean": 0.1},
            {"step": 8, "entropy": 2.0, "kl": 0.25, "no_spread_share": 1.0, "reward_mean": 0.3},
            {"step": 9, "pool_pass_hist": [3, 0, 0, 1, 2]},  # an edge sampler's pool
        ]
        (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    monkeypatch.setattr(rl_arm, "train_rl", train)
    monkeypatch.setattr(rl_arm, "checkpoint_dirs", lambda out: ["step_1", "step_2"])
    monkeypatch.setattr(rl_arm.ckpt, "load_model", lambda path: (f"model@{path}", None))
    monkeypatch.setattr(rl_arm.ckpt, "read_config", lambda path: (None, {"sha256": f"#{path}"}))
    counts = {
        "rl_only": (1, 4),
        "unseen_depth2": (2, 4),
        "unseen_depth3": (1, 4),
        "seed_neutral_names": (3, 4),
    }

    def evaluate(model, rungs, split, per_rung, sampling):
        assert (model, tuple(rungs), split, per_rung, sampling) == (
            "model@step_2",
            sft_vs_rl.RUNGS,
            "dev",
            4,
            Sampling(seed=rl_arm.EVAL_SEED),
        )
        records = [  # task by task, rungs interleaved as evaluate_tasks may return them
            {"group": rung, "status": "pass" if i < k else "fail"}
            for i in range(4)
            for rung, (k, _) in counts.items()
        ]
        return {"greedy": SimpleNamespace(per_family=counts, records=records)}

    monkeypatch.setattr(rl_arm, "evaluate_rungs", evaluate)
    config = {**registry.get("sft-vs-rl").conditions["rl"], "init": "CK", "per_rung": 4}
    metrics = sft_vs_rl.run(config, seed=3)
    assert [(init, cfg.objective, cfg.seed, cfg.ladder_share) for init, cfg in trained] == [
        ("CK", "rloo", 3, 1.0)
    ]
    assert {k: metrics[k] for k in counts} == {
        "rl_only": 0.25,
        "unseen_depth2": 0.5,
        "unseen_depth3": 0.25,
        "seed_neutral_names": 0.75,
    }
    assert metrics["unseen"] == 0.375
    assert metrics["init_sha256"] == "#CK"  # the weights every arm started from
    assert metrics["greedy_passes"] == {
        "rl_only": [1, 0, 0, 0],
        "unseen_depth2": [1, 1, 0, 0],
        "unseen_depth3": [1, 0, 0, 0],
        "seed_neutral_names": [1, 1, 1, 0],
    }
    assert {k: metrics[k] for k in rl_arm.HEALTH} == {
        "entropy": 1.5,
        "kl": 0.25,
        "no_spread_share": 0.75,
    }
    assert metrics["curves"]["reward_mean"] == [[4, 0.1], [8, 0.3]]
    assert metrics["pool_pass_hist"] == {"first": [3, 0, 0, 1, 2], "last": [3, 0, 0, 1, 2]}


def test_composition_arms_differ_in_what_they_name():
    exp = registry.get("rl-composition")
    c = exp.conditions

    def diff(a, b):
        return {k for k in c[a] if c[a][k] != c[b].get(k)} | set(c[b]) - set(c[a])

    assert diff("base", "stage") == {"train"} and c["base"]["train"] is False
    assert diff("stage", "edge") == {"sampler", "edge_probe"}
    assert diff("edge", "edge_all") == {"scope", "lr"}
    assert diff("edge_all", "rft") == {"sampler", "edge_probe", "advantage"}
    assert c["stage"]["split"] == "confirm" and len(exp.seeds) >= 8
    passk = registry.get("rl-passk").conditions
    assert passk["base"]["train"] is False and passk["after"] == {**c["edge_all"], **PASSK}
    sweep = registry.get("rl-scope-lr").conditions
    assert {v["split"] for v in sweep.values()} == {"dev"}
    assert sorted(v["lr"] for v in sweep.values() if v["scope"] == "all") == [1e-5, 3e-5, 1e-4]
    assert sweep["base"]["train"] is False
    r = registry.get("rl-remedies").conditions
    edge_all = {**c["edge_all"], "split": "dev"}
    assert r["edge_all"] == edge_all and {v["split"] for v in r.values()} == {"dev"}
    assert r["depth2"] == {**edge_all, "ladder_depths": [2]}
    assert r["depth2_long"] == {**r["depth2"], "groups": 2 * edge_all["groups"]}
    assert r["depth2_spread"] == {**r["depth2"], "edge_weight": "spread", "edge_discount": 0.9}
    s = registry.get("rl-sampler").conditions
    assert s["by_task"] == r["depth2"]
    assert s["by_structure"] == {**r["depth2"], "edge_estimate": "structure"}
    for arm in (*r.values(), *s.values()):  # every arm's settings are valid RL settings
        RLConfig(**{k: v for k, v in arm.items() if k in RL_FIELDS})


def test_structures_arm_meets_every_depth2_rl_structure_equally_with_new_instances():
    """rl-structures' arm: each of the 63 depth-2 RL structures MEETINGS times, never the same
    task twice, nothing else; and its rung read includes the trained structures."""
    from collections import Counter

    from glmflash.data import ladder
    from glmflash.experiments.rl_composition import MEETINGS, REMEDY_RUNGS
    from glmflash.train.rl import rl_tasks

    exp = registry.get("rl-structures")
    arm = exp.conditions["fresh16"]
    assert arm["scope"] == "all" and arm["split"] == "confirm" and len(exp.seeds) >= 8
    assert exp.conditions["base"]["train"] is False and exp.metric == "rl_only_depth2"
    cfg = RLConfig(
        **{k: tuple(v) if isinstance(v, list) else v for k, v in arm.items() if k in RL_FIELDS}
    )
    order = rl_tasks(cfg)
    depth2 = {s.name for s in ladder.structures("rl", 2)}
    assert Counter(t.family for t in order) == dict.fromkeys(depth2, MEETINGS)
    assert len({t.name for t in order}) == len(order)  # a new instance at every meeting
    assert "rl_only_depth2" in REMEDY_RUNGS
    budgets = registry.get("rl-meetings").conditions  # the same arm, fewer meetings, on dev
    read = {"split": "dev", "per_rung": 64}
    assert budgets["fresh4"] == {**arm, **read, "groups": 4 * len(depth2)}
    assert budgets["fresh4_1e-4"] == {**budgets["fresh4"], "lr": 1e-4}
    assert budgets["fresh8"] == {**arm, **read, "groups": 8 * len(depth2)}


def test_stage_variants_are_the_pipelines_stage_and_one_change_each():
    """rl-stage-variants' `stage` is the pipeline's RL stage setting for setting (but the
    seed and the dev checks: an arm reads its final policy); t10 differs from it in the
    rollouts' temperature alone, edge_t10 from t10 in the sampler alone."""
    from glmflash.config import PipelinePlan

    arms = registry.get("rl-stage-variants").conditions

    def config(arm: dict, seed: int) -> RLConfig:
        fields = {k: tuple(v) if isinstance(v, list) else v for k, v in arm.items()}
        return RLConfig(**{k: v for k, v in fields.items() if k in RL_FIELDS}, seed=seed)

    def changed(name: str, against: str) -> dict:
        return {k: v for k, v in arms[name].items() if v != arms[against].get(k)}

    stage = PipelinePlan.rl_stage(5)
    assert dataclasses.replace(config(arms["stage"], 5), eval_every=stage.eval_every) == stage
    assert changed("t10", "stage") == {"temperature": 1.0}
    assert changed("edge_t10", "t10") == {"sampler": "edge", "edge_estimate": "structure"}
    assert arms["base"]["train"] is False
