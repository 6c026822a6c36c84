"""The experiment runner: parallel workers, atomic run files, resume, failures, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from glmflash.commands.experiment import parse_seeds
from glmflash.experiments import registry
from glmflash.experiments.registry import Experiment
from glmflash.experiments.runner import RunnerError, run_experiment, run_path


def toy_run(config: dict, seed: int) -> dict:
    """A pure toy run: its value is known in closed form; each call leaves a mark on disk."""
    with open(config["log"], "a") as f:
        f.write(f"{config['shift']} {seed}\n")
    if config.get("fail_seed") == seed:
        raise RuntimeError("deliberate failure")
    value = config["shift"] + 0.01 * seed
    metrics = {"score": value, "curves": {"score": [[0, 0.0], [1, value]]}}
    if config.get("threads"):
        import torch

        metrics["threads"] = torch.get_num_threads()
    return metrics


def toy(tmp_path: Path, fail_seed: int | None = None, **extra) -> Experiment:
    log = str(tmp_path / "calls.log")
    return Experiment(
        name="toy",
        run=toy_run,
        metric="score",
        seeds=(0, 1),
        conditions={
            "low": {"shift": 0.0, "log": log},
            "high": {"shift": 1.0, "log": log, "fail_seed": fail_seed},
        },
        comparisons=[("low", "high")],
        **extra,
    )


def calls(tmp_path: Path) -> list[str]:
    path = tmp_path / "calls.log"
    return path.read_text().splitlines() if path.exists() else []


def test_two_workers_run_the_grid_and_save_json(tmp_path):
    out = tmp_path / "out"
    exp = toy(tmp_path)
    exp.conditions["low"]["threads"] = True
    summary = run_experiment(exp, out, workers=2, log=lambda _: None)
    assert (summary.executed, summary.failed, summary.skipped) == (4, 0, 0)
    assert sorted(calls(tmp_path)) == ["0.0 0", "0.0 1", "1.0 0", "1.0 1"]
    for condition, shift in (("low", 0.0), ("high", 1.0)):
        for seed in (0, 1):
            record = json.loads(run_path(out / "toy", condition, seed).read_text())
            assert record["status"] == "ok" and record["seed"] == seed
            assert record["condition"] == condition and record["config"]["shift"] == shift
            assert record["metrics"]["score"] == pytest.approx(shift + 0.01 * seed)
            assert record["metrics"]["curves"]["score"][-1][0] == 1
            assert record["seconds"] >= 0
            if condition == "low":  # each worker runs torch on one thread
                assert record["metrics"]["threads"] == 1
    assert not list((out / "toy" / "runs").glob(".*"))  # no temporary files left behind
    definition = json.loads((out / "toy" / "experiment.json").read_text())
    assert definition["seeds"] == [0, 1] and definition["comparisons"] == [["low", "high"]]
    assert definition["sessions"][-1]["executed"] == 4


def test_resume_skips_finished_runs_and_refuses_to_overwrite(tmp_path):
    out = tmp_path / "out"
    exp = toy(tmp_path)
    run_experiment(exp, out, seeds=(0,), log=lambda _: None)
    assert len(calls(tmp_path)) == 2
    with pytest.raises(RunnerError, match="--resume"):
        run_experiment(exp, out, seeds=(0, 1), log=lambda _: None)
    summary = run_experiment(exp, out, seeds=(0, 1), resume=True, log=lambda _: None)
    assert (summary.executed, summary.skipped) == (2, 2)
    assert sorted(calls(tmp_path)) == ["0.0 0", "0.0 1", "1.0 0", "1.0 1"]  # none twice
    summary = run_experiment(exp, out, seeds=(0, 1), resume=True, log=lambda _: None)
    assert (summary.executed, summary.skipped) == (0, 4)
    assert len(calls(tmp_path)) == 4
    definition = json.loads((out / "toy" / "experiment.json").read_text())
    assert definition["seeds"] == [0, 1] and len(definition["sessions"]) == 3


def test_resume_refuses_runs_made_with_other_settings(tmp_path):
    out = tmp_path / "out"
    run_experiment(toy(tmp_path), out, seeds=(0,), log=lambda _: None)
    changed = toy(tmp_path, description="changed", quick={"shift": 5.0})
    with pytest.raises(RunnerError, match="other settings"):
        run_experiment(changed, out, seeds=(0,), resume=True, quick=True, log=lambda _: None)


def test_a_failed_run_is_recorded_and_the_others_finish(tmp_path):
    out = tmp_path / "out"
    messages: list[str] = []
    summary = run_experiment(toy(tmp_path, fail_seed=1), out, workers=2, log=messages.append)
    assert (summary.executed, summary.failed) == (4, 1)
    failed = json.loads(run_path(out / "toy", "high", 1).read_text())
    assert failed["status"] == "error" and "deliberate failure" in failed["error"]
    assert "RuntimeError" in failed["traceback"]
    for condition, seed in (("low", 0), ("low", 1), ("high", 0)):
        assert json.loads(run_path(out / "toy", condition, seed).read_text())["status"] == "ok"
    assert any("failed" in m for m in messages)
    # resume retries only the failed run (it fails again: the run is deterministic)
    summary = run_experiment(toy(tmp_path, fail_seed=1), out, resume=True, log=lambda _: None)
    assert (summary.executed, summary.skipped, summary.failed) == (1, 3, 1)
    assert calls(tmp_path).count("1.0 1") == 2


def bad_metric_run(config: dict, seed: int) -> dict:
    return {"score": float("nan")} if seed else {"other": 1.0}


def test_runs_without_a_finite_primary_metric_are_failures(tmp_path):
    exp = Experiment(
        name="bad",
        conditions={"a": {}},
        seeds=(0, 1),
        run=bad_metric_run,
        metric="score",
        comparisons=[],
    )
    summary = run_experiment(exp, tmp_path, log=lambda _: None)
    assert summary.failed == 2
    errors = [json.loads(run_path(tmp_path / "bad", "a", s).read_text())["error"] for s in (0, 1)]
    assert all("score" in e for e in errors)


def test_experiment_definitions_are_checked():
    with pytest.raises(ValueError, match="unknown condition"):
        Experiment(
            name="x",
            conditions={"a": {}},
            seeds=(0,),
            run=toy_run,
            metric="m",
            comparisons=[("a", "b")],
        )
    with pytest.raises(ValueError, match="distinct"):
        Experiment(
            name="x", conditions={"a": {}}, seeds=(0, 0), run=toy_run, metric="m", comparisons=[]
        )
    with pytest.raises(ValueError, match="__seed"):
        Experiment(
            name="x",
            conditions={"a__seed1": {}},
            seeds=(0,),
            run=toy_run,
            metric="m",
            comparisons=[],
        )


def test_registry_holds_the_builtin_experiments():
    names = registry.names()
    assert {"data-diversity", "curriculum"} <= set(names)
    dd = registry.get("data-diversity")
    assert len(dd.seeds) == 10 and len(dd.conditions) == 6
    assert {(a.split("@")[1], b.split("@")[1]) for a, b in dd.comparisons} == {
        ("50", "50"),
        ("100", "100"),
        ("200", "200"),
    }
    cur = registry.get("curriculum")
    assert len(cur.seeds) == 10
    assert {"curriculum", "interleaved", "blocked"} <= set(cur.conditions)
    with pytest.raises(ValueError, match="unknown experiment"):
        registry.get("no-such-experiment")


def test_a_user_module_file_registers_an_experiment(tmp_path):
    module = tmp_path / "my_toy_experiments.py"
    module.write_text(
        "from glmflash.experiments.registry import Experiment, register\n"
        "def run(config, seed):\n    return {'m': config['v'] * seed}\n"
        "register(Experiment(name='user-toy', conditions={'a': {'v': 1}, 'b': {'v': 2}},\n"
        "                    seeds=(1, 2), run=run, metric='m', comparisons=[('a', 'b')]))\n"
    )
    registry.load_module(str(module))
    summary = run_experiment(
        registry.get("user-toy"), tmp_path / "out", workers=2, log=lambda _: None
    )
    assert summary.executed == 4 and summary.failed == 0
    record = json.loads(run_path(tmp_path / "out" / "user-toy", "b", 2).read_text())
    assert record["metrics"]["m"] == 4


def test_parse_seeds():
    assert parse_seeds("0,1,2") == (0, 1, 2)
    assert parse_seeds("0-3,7") == (0, 1, 2, 3, 7)
    for bad in ("", "a", "1,1", "0-2,2"):
        with pytest.raises(ValueError):
            parse_seeds(bad)


def test_experiment_command_end_to_end(tmp_path):
    import argparse

    from glmflash.cli import CLIError
    from glmflash.commands import experiment as command

    module = tmp_path / "cli_toy_experiments.py"
    module.write_text(
        "from glmflash.experiments.registry import Experiment, register\n"
        "def run(config, seed):\n    return {'m': config['v'] + seed % 2}\n"
        "register(Experiment(name='cli-toy', conditions={'a': {'v': 0}, 'b': {'v': 1}},\n"
        "                    seeds=(0, 1, 2), run=run, metric='m', comparisons=[('a', 'b')]))\n"
    )
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    out = tmp_path / "out"
    argv = ["cli-toy", "--out", str(out), "--module", str(module), "--seeds", "0,1"]
    assert command.run(parser.parse_args(argv)) == 0
    assert "| a | b | 2 |" in (out / "cli-toy" / "report.md").read_text()
    with pytest.raises(CLIError, match="--resume"):
        command.run(parser.parse_args(argv))
    assert command.run(parser.parse_args([*argv, "--resume"])) == 0
    with pytest.raises(CLIError, match="unknown experiment"):
        command.run(parser.parse_args(["nope", "--out", str(out)]))
