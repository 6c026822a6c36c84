"""Reports: the statistics against brute-force references, the sentences, the plots."""

from __future__ import annotations

import argparse
import itertools
import json

import numpy as np
import pytest

from glmflash.experiments import report
from glmflash.experiments.registry import Experiment
from glmflash.experiments.runner import run_experiment

PNG = b"\x89PNG\r\n\x1a\n"


def table_run(config: dict, seed: int) -> dict:
    """Metric values read from a table in the configuration: {seed: value}."""
    if seed in config.get("fail", []):
        raise RuntimeError("boom")
    value = config["values"][seed]
    return {
        "score": value,
        "other": -value,
        "curves": {"score": [[0, 0.0], [5, value / 2], [10, value]]},
    }


def make(tmp_path, conditions: dict[str, list[float]], comparisons, seeds, fail=()):
    exp = Experiment(
        name="t",
        seeds=tuple(seeds),
        run=table_run,
        metric="score",
        secondary=("other",),
        comparisons=comparisons,
        conditions={
            c: {"values": v, "fail": list(fail) if c == "b" else []} for c, v in conditions.items()
        },
    )
    run_experiment(exp, tmp_path, log=lambda _: None)
    return tmp_path / "t"


def brute_force_p(d) -> float:
    d = np.asarray(d, dtype=float)
    sums = [abs(np.dot(s, d)) for s in itertools.product((-1, 1), repeat=len(d))]
    return float(np.mean(np.array(sums) >= abs(d.sum()) - 1e-12))


def test_null_data_says_nothing_is_significant_and_writes_the_plots(tmp_path):
    rng = np.random.default_rng(0)
    a = rng.normal(0.5, 0.05, 10)
    flips = np.array([1, -1] * 5)
    b = a + flips * np.abs(rng.normal(0, 0.02, 10))  # differences of both signs
    folder = make(tmp_path, {"a": a.tolist(), "b": b.tolist()}, [("a", "b")], range(10))
    text = report.write_report(folder).read_text()
    assert "| condition | seeds | score mean [95% CI] | other mean [95% CI] |" in text
    assert "| a | 10 |" in text and "| b | 10 |" in text
    assert "Nothing is significant" in text
    results = json.loads((folder / "results.json").read_text())
    (row,) = results["comparisons"]["score"]
    assert row["p"] == pytest.approx(brute_force_p(b - a))
    assert row["p"] > 0.05 and row["p_holm"] == pytest.approx(row["p"])
    assert row["difference"] == pytest.approx(np.mean(b - a))
    for name in ("curves.png", "paired.png", "forest.png"):
        assert (folder / name).read_bytes()[:8] == PNG
        assert f"]({name})" in text


def test_a_clear_effect_is_significant_with_holm_across_comparisons(tmp_path):
    rng = np.random.default_rng(1)
    base = rng.normal(0.5, 0.05, 10)
    conditions = {
        "a": base.tolist(),
        "b": (base + 0.1 + rng.normal(0, 0.01, 10)).tolist(),
        "c": (base + rng.normal(0, 0.01, 10)).tolist(),
    }
    folder = make(tmp_path, conditions, [("a", "b"), ("a", "c")], range(10))
    text = report.write_report(folder).read_text()
    results = json.loads((folder / "results.json").read_text())
    ab, ac = results["comparisons"]["score"]
    assert ab["p"] == pytest.approx(2 / 2**10)  # all ten seeds favour b: the exact floor
    assert ab["seeds_agree"] == 10 and ab["low"] > 0
    assert ab["low"] <= ab["difference"] <= ab["high"]
    p_sorted = sorted([ab["p"], ac["p"]])  # Holm for m = 2: 2 p_(1), max(that, p_(2))
    expected = {ab["p"]: min(1, 2 * p_sorted[0])}
    expected[p_sorted[1]] = max(min(1, 2 * p_sorted[0]), p_sorted[1])
    assert ab["p_holm"] == pytest.approx(expected[ab["p"]])
    assert ac["p_holm"] == pytest.approx(expected[ac["p"]])
    assert ac["p"] == pytest.approx(brute_force_p(np.array(conditions["c"]) - base))
    assert "Significant at alpha = 0.05" in text and "b vs a" in text
    assert "Nothing is significant" not in text.split("(secondary)")[0]
    # the secondary metric is the negation: the same p, the opposite difference
    sab = results["comparisons"]["other"][0]
    assert sab["p"] == pytest.approx(ab["p"]) and sab["difference"] == pytest.approx(
        -ab["difference"]
    )
    stats_b = results["conditions"]["b"]["score"]
    assert stats_b["mean"] == pytest.approx(np.mean(conditions["b"]))
    assert stats_b["low"] < stats_b["mean"] < stats_b["high"]


def test_failed_runs_are_listed_and_left_out_of_the_pairs(tmp_path):
    values = [0.1 * i for i in range(6)]
    folder = make(
        tmp_path, {"a": values, "b": [v + 1 for v in values]}, [("a", "b")], range(6), fail=(2,)
    )
    text = report.write_report(folder).read_text()
    results = json.loads((folder / "results.json").read_text())
    (row,) = results["comparisons"]["score"]
    assert row["n"] == 5 and 2 not in row["seeds"]
    assert "## Failed runs" in text and "b seed 2: RuntimeError: boom" in text
    assert results["conditions"]["b"]["score"]["n"] == 5


def test_too_few_seeds_are_called_out(tmp_path):
    folder = make(tmp_path, {"a": [0.0, 0.0, 0.0], "b": [1.0, 1.0, 1.0]}, [("a", "b")], range(3))
    text = report.write_report(folder).read_text()
    assert "Nothing is significant" in text and "2/2^3 = 0.25" in text


def test_report_command_finds_every_experiment_folder(tmp_path, capsys):
    from glmflash.cli import CLIError
    from glmflash.commands import report as command

    make(tmp_path, {"a": [0.0, 1.0], "b": [1.0, 0.0]}, [("a", "b")], range(2))
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    assert command.run(parser.parse_args([str(tmp_path)])) == 0
    assert str(tmp_path / "t" / "report.md") in capsys.readouterr().out
    with pytest.raises(CLIError, match="no experiment"):
        command.run(parser.parse_args([str(tmp_path / "t" / "runs")]))
    # an experiment whose run files are gone keeps its report; beside others it is skipped
    empty = tmp_path / "u"
    empty.mkdir()
    (empty / "experiment.json").write_text((tmp_path / "t" / "experiment.json").read_text())
    (empty / "report.md").write_text("the committed report")
    assert command.run(parser.parse_args([str(tmp_path)])) == 0
    assert (empty / "report.md").read_text() == "the committed report"
    assert f"skipped {empty}" in capsys.readouterr().err
    with pytest.raises(CLIError, match="no runs"):
        command.run(parser.parse_args([str(empty)]))


def passes_run(config: dict, seed: int) -> dict:
    """Per-task greedy outcomes read from the configuration, as the ladder arms record them."""
    passes = {rung: table[seed - 1] for rung, table in config["passes"].items()}
    return {"score": float(np.mean(passes["x"])), "greedy_passes": passes}


def test_per_rung_gains_resample_tasks_and_holm_runs_over_rungs(tmp_path):
    """Rung x rises in every seed, rung y does not move: the per-rung table's means, its
    sign-flip p against brute force, Holm's adjustment over the two rungs, and an interval
    that resamples tasks (wider than the seeds alone give when seeds agree)."""
    seeds = range(1, 8)
    rng = np.random.default_rng(0)
    base = {s: [0, 0, 1, 0, 0, 0, 1, 0] for s in seeds}
    trained = {s: [int(v) for v in rng.random(8) < 0.6] for s in seeds}
    for s in seeds:  # every seed gains at least one task
        trained[s][0] = 1
    exp = Experiment(
        name="t",
        seeds=tuple(seeds),
        run=passes_run,
        metric="score",
        comparisons=[("a", "b")],
        conditions={
            "a": {"passes": {"x": list(base.values()), "y": list(base.values())}},
            "b": {"passes": {"x": list(trained.values()), "y": list(base.values())}},
        },
    )
    run_experiment(exp, tmp_path, log=lambda _: None)
    summary = report.summarize(tmp_path / "t")
    x, y = summary["rungs"]["a_vs_b"]["rows"]
    assert (x["rung"], y["rung"], x["n"], x["tasks"]) == ("x", "y", 7, 8)
    rate_a = [np.mean(base[s]) for s in seeds]
    rate_b = [np.mean(trained[s]) for s in seeds]
    assert x["mean_a"] == pytest.approx(np.mean(rate_a))
    assert x["difference"] == pytest.approx(np.mean(rate_b) - np.mean(rate_a))
    assert x["p"] == pytest.approx(brute_force_p(np.subtract(rate_b, rate_a)))
    assert (y["difference"], y["p"], y["p_holm"]) == (0.0, 1.0, 1.0)
    assert x["p_holm"] == pytest.approx(min(1.0, 2 * x["p"]))
    seeds_only = report.stats.bootstrap_mean(np.subtract(rate_b, rate_a))
    assert 0 < x["low"] < x["difference"] < x["high"]
    assert x["high"] - x["low"] > seeds_only.high - seeds_only.low  # tasks resampled too
    text = report.markdown(summary, [])
    assert "## Per rung: `b` against `a`" in text
    assert "Significant after Holm over 2 rungs: x." in text
    assert "no rung can pass this test" not in text  # 7 seeds, 2 rungs: 2 * 2 / 2^7 < 0.05
    few = {**summary["rungs"]["a_vs_b"], "rows": [{**r, "n": 5} for r in (x, y)]}
    assert "0.125 > 0.05, so no rung can pass this test" in report._rung_lines(few, 0.05)[-2]
