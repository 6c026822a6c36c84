import json

import pytest
import torch

from glmflash import cli
from glmflash.checkpoint import save_model
from glmflash.commands.experiment import parse_settings
from glmflash.config import model_config
from glmflash.experiments import registry
from glmflash.experiments.rl_ablations import BASELINE, CHANGES
from glmflash.model.lm import GLMFlash


def test_each_condition_changes_one_setting_of_the_baseline():
    exp = registry.get("rl-ablations")
    assert set(exp.conditions) == set(CHANGES)
    for name, config in exp.conditions.items():
        changed = {k for k in config if config[k] != BASELINE[k]}
        assert len(changed) == (0 if name == "baseline" else 1), name
    assert exp.comparisons == [("baseline", n) for n in CHANGES if n != "baseline"]
    assert exp.seeds == (31415, 27182, 16180)
    assert exp.conditions["baseline"]["dev_per_family"] >= 40


def test_settings_parse_as_json_or_text():
    assert parse_settings(["init=runs/a b", "groups=24", "kl=0.5", "x=null"]) == {
        "init": "runs/a b",
        "groups": 24,
        "kl": 0.5,
        "x": None,
    }
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_settings(["groups"])


def test_unknown_setting_is_refused(tmp_path, capsys):
    code = cli.main(
        ["experiment", "rl-ablations", "--out", str(tmp_path), "--quick", "--set", "initt=x"]
    )
    assert code != 0
    assert "no setting initt" in capsys.readouterr().err


def test_quick_grid_runs_from_a_checkpoint(tmp_path):
    torch.manual_seed(0)
    save_model(tmp_path / "ck", GLMFlash(model_config("tiny")))
    out = tmp_path / "exp"
    code = cli.main(
        [
            "experiment",
            "rl-ablations",
            "--out",
            str(out),
            "--quick",
            "--seeds",
            "31415",
            "--set",
            f"init={tmp_path / 'ck'}",
        ]
    )
    assert code == 0
    runs = sorted((out / "rl-ablations" / "runs").glob("*.json"))
    assert len(runs) == len(CHANGES)
    for path in runs:
        record = json.loads(path.read_text())
        assert record["status"] == "ok", record.get("error")
        m = record["metrics"]
        assert m["dev_total"] == 2 * 3 and 0 <= m["dev_passed"] <= m["dev_total"]
        assert m["dev_pass1"] == m["dev_passed"] / m["dev_total"]
        assert 0 <= m["untrained_pass1"] <= 1
        assert 0 <= m["invalid_rate"] <= 1
    assert "baseline" in (out / "rl-ablations" / "report.md").read_text()


def test_missing_init_fails_the_runs_with_a_clear_error(tmp_path):
    out = tmp_path / "exp"
    code = cli.main(
        [
            "experiment",
            "rl-ablations",
            "--out",
            str(out),
            "--quick",
            "--seeds",
            "31415",
            "--no-report",
        ]
    )
    assert code == 1
    record = json.loads(next((out / "rl-ablations" / "runs").glob("*.json")).read_text())
    assert record["status"] == "error" and "--set init=" in record["error"]
