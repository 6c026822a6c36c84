"""pass@k curves before and after training: the gains against math.comb, the readings on
constructed cases, the report section and figure."""

from __future__ import annotations

import json
from math import comb

import numpy as np
import pytest

from glmflash.evaluate import pass_curve
from glmflash.experiments import report
from glmflash.experiments.registry import Experiment
from glmflash.experiments.runner import run_experiment

PNG = b"\x89PNG\r\n\x1a\n"


def reference_pass(n: int, c: int, k: int) -> float:
    return 1 - comb(n - c, k) / comb(n, k)


@pytest.mark.parametrize(("n", "ks"), [(64, [1, 2, 4, 8, 16, 32, 64]), (6, [1, 2, 4, 6]), (1, [1])])
def test_ks_double_up_to_n(n, ks):
    assert pass_curve.ks_up_to(n) == ks


@pytest.mark.parametrize(("n", "tasks", "seeds"), [(8, 5, 1), (16, 12, 3)])
def test_gains_are_the_mean_difference_of_the_exact_estimator(n, tasks, seeds):
    rng = np.random.default_rng(n)
    base = {s: rng.integers(0, n + 1, tasks).tolist() for s in range(seeds)}
    after = {s: rng.integers(0, n + 1, tasks).tolist() for s in range(seeds)}
    after[99] = [n] * tasks  # a seed without a base reading is left out
    rows = pass_curve.gains(n, base, after, pass_curve.ks_up_to(n))
    for row in rows:
        k = row["k"]
        per_seed = [
            np.mean([reference_pass(n, c, k) for c in after[s]])
            - np.mean([reference_pass(n, c, k) for c in base[s]])
            for s in range(seeds)
        ]
        assert row["gain"] == pytest.approx(np.mean(per_seed), abs=1e-12)
        assert row["after"] - row["base"] == pytest.approx(row["gain"], abs=1e-12)
        assert row["low"] <= row["gain"] <= row["high"]
    assert [r["k"] for r in rows] == pass_curve.ks_up_to(n)
    same = pass_curve.gains(n, base, base, [1, n])
    assert all(r["gain"] == r["low"] == r["high"] == 0 for r in same)


def test_readings_tell_new_solutions_from_sharpening():
    """Base: half the tasks passed in 1 of 64 samples, half never. Sharpening lifts the first
    half to 48 of 64 (pass@64 stays 0.5); new solutions also pass the other half sometimes."""
    n, tasks = 64, 40
    base = {s: [1] * 20 + [0] * 20 for s in range(3)}
    sharpened = {s: [48] * 20 + [0] * 20 for s in range(3)}
    widened = {s: [1] * 20 + [8] * 20 for s in range(3)}
    narrowed = {s: [0] * tasks for s in range(3)}
    ks = pass_curve.ks_up_to(n)
    assert pass_curve.reading(pass_curve.gains(n, base, sharpened, ks)).startswith("sharpening")
    assert pass_curve.reading(pass_curve.gains(n, base, widened, ks)).startswith("new solutions")
    assert pass_curve.reading(pass_curve.gains(n, base, narrowed, ks)).startswith("narrowing")
    assert pass_curve.reading(pass_curve.gains(n, base, base, ks)) == "no change the design detects"
    with pytest.raises(ValueError, match="no seed"):
        pass_curve.gains(n, {0: [1]}, {1: [1]}, ks)


def passes_run(config: dict, seed: int) -> dict:
    """A stand-in arm: its passing samples per rung read from the configuration (one more on
    unseen depth 2 for odd seeds, so that seeds differ)."""
    shift = {"unseen_depth2": seed % 2}
    return {
        "unseen": 0.0,
        "passk_samples": 8,
        "passes": {r: [c + shift.get(r, 0) for c in v] for r, v in config["passes"].items()},
    }


def test_report_writes_the_pass_curves_of_a_comparison(tmp_path):
    exp = Experiment(
        name="p",
        seeds=(0, 1, 2, 3),
        run=passes_run,
        metric="unseen",
        comparisons=[("base", "after")],
        conditions={
            "base": {"passes": {"rl_only": [0, 0, 0, 0, 2, 0], "unseen_depth2": [1] * 6}},
            "after": {"passes": {"rl_only": [3, 2, 4, 1, 6, 2], "unseen_depth2": [7] * 6}},
        },
    )
    run_experiment(exp, tmp_path, log=lambda _: None)
    text = report.write_report(tmp_path / "p").read_text()
    results = json.loads((tmp_path / "p" / "results.json").read_text())
    entry = results["pass_curves"]["base_vs_after"]
    assert (entry["a"], entry["b"]) == ("base", "after")
    table = entry["rungs"]
    assert table["rl_only"]["reading"].startswith("new solutions")
    assert table["unseen_depth2"]["reading"].startswith("sharpening")
    first = table["unseen_depth2"]["rows"][0]
    assert first["gain"] == pytest.approx(6 / 8)  # 1 -> 7 of 8 on every task, every seed
    assert "## pass@k: `after` against `base`" in text and "| rl_only |" in text
    assert (tmp_path / "p" / "passk_base_vs_after.png").read_bytes()[:8] == PNG
