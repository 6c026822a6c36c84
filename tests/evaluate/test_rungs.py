"""Evaluation per rung: one batched pass scores each rung as evaluating it alone would."""

import json

import numpy as np
import pytest
import torch

from glmflash.checkpoint import save_model
from glmflash.cli import main
from glmflash.config import model_config
from glmflash.config.evaluation import Sampling
from glmflash.data import ladder
from glmflash.data.code_tasks import split_of_name
from glmflash.evaluate import coding
from glmflash.evaluate.coding import evaluate_tasks
from glmflash.evaluate.rungs import (
    RUNGS,
    evaluate_rungs,
    miss_chance,
    parse_rungs,
    rung_table,
    rung_tasks,
)
from glmflash.generate import Completion
from glmflash.model.lm import GLMFlash


def test_parse_rungs():
    assert parse_rungs("all") == RUNGS
    assert parse_rungs("unseen_depth3, depth1") == ("unseen_depth3", "depth1")
    for bad in ("depth9", "", " , "):
        with pytest.raises(ValueError, match="unknown rung"):
            parse_rungs(bad)


def test_seed_rungs_differ_only_in_the_name():
    named = {
        r: rung_tasks(r, "confirm", 8)
        for r in ("seed_families", "seed_neutral_names", "seed_misleading_names")
    }
    fam, neu, mis = named.values()
    assert [t.prompt.split("\n")[0] for t in fam] == [t.prompt.split("\n")[0] for t in neu]
    assert all(t.name.startswith(f"{t.family}_") for t in fam)
    assert all(t.name.startswith("f_") for t in neu)
    assert all(not t.name.startswith(f"{t.family}_") for t in mis)
    assert all(split_of_name(t.name) == "confirm" for ts in named.values() for t in ts)


def test_batched_rungs_equal_one_rung_at_a_time(monkeypatch):
    """A stand-in model answers a fixed, uneven share of each rung's prompts with the reference
    body (the rest with `return 0`): the batched per-rung counts must equal rung-by-rung
    evaluation and the number of references given."""
    rungs = ("depth1", "unseen_depth2", "seed_neutral_names")
    reference = {t.prompt: t.reference for r in rungs for t in rung_tasks(r, "dev", 6, 2)}
    good = {p for i, p in enumerate(sorted(reference)) if i % 3 != 1}

    def fake_generate(model, prompts, max_new_tokens, temperature, top_p=1.0, seed=0):
        return [
            Completion([], [], reference[p] if p in good else "    return 0\n", "eos")
            for p in prompts
        ]

    monkeypatch.setattr(coding, "generate", fake_generate)
    results = evaluate_rungs(None, rungs, "dev", 6, Sampling("sample", 2, 2, seed=2))
    table = rung_table(results)
    assert list(table) == list(rungs)
    for rung in rungs:
        todo = rung_tasks(rung, "dev", 6, 2)
        alone = evaluate_tasks(None, todo)
        expected = sum(t.prompt in good for t in todo)
        assert table[rung]["greedy"] == [expected, 6] == [alone.solved, alone.total]
        assert table[rung]["samples"] == [2 * expected, 12] and table[rung]["pass@2"][1] == 6
    assert 0 < sum(v["greedy"][0] for v in table.values()) < 18
    assert rung_tasks("unseen_depth2", "dev", 3, 2) == ladder.rung_tasks(
        "unseen_depth2", "dev", 3, 2
    )


def test_eval_command_per_rung_saves_every_record(tmp_path, capsys):
    torch.manual_seed(0)
    save_model(tmp_path / "ck", GLMFlash(model_config("tiny")))
    out = tmp_path / "eval.json"
    args = [
        "eval",
        "--checkpoint",
        str(tmp_path / "ck"),
        "--rungs",
        "depth1,unseen_depth3",
        "--per-rung",
        "2",
        "--mode",
        "sample",
        "--samples",
        "2",
        "--max-new-tokens",
        "4",
        "--device",
        "cpu",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    data = json.loads(out.read_text())
    assert list(data["rungs"]) == ["depth1", "unseen_depth3"]
    assert len(data["greedy"]["records"]) == 4 and len(data["sampled"]["records"]) == 8
    assert {r["group"] for r in data["sampled"]["records"]} == {"depth1", "unseen_depth3"}
    assert data["sampled"]["n_samples"] == 2 and data["sampled"]["temperature"] == 0.8
    assert data["greedy"]["temperature"] == 0.0
    assert main([*args[:4], "--rungs", "depth9", "--device", "cpu"]) == 2
    assert "unknown rung depth9" in capsys.readouterr().err
    assert main([*args, "--k", "3"]) == 2  # k above samples = 2
    assert "k must be in [0, samples=2]" in capsys.readouterr().err


@pytest.mark.parametrize(
    "reading, n",
    [
        ({"depth1": [100, 128], "unseen_depth3": [4, 128]}, 128),
        ({"depth1": [20, 32], "unseen_depth3": [1, 32]}, 64),
        ({"depth1": [60, 128], "unseen_depth3": [0, 128]}, 20),
    ],
)
def test_miss_chance_against_drawing_the_model_and_the_confirm_reading(reading, n):
    """A direct simulation of the predictive: draw each rung's rate from its posterior (uniform
    prior), then a confirm count of n tasks; the bar is missed when any rung's line fails."""
    bar = {"depth1": (">=", 0.5), "unseen_depth3": (">", 0.0)}
    gen = np.random.default_rng(0)
    draws = 200_000
    holds = np.ones(draws, dtype=bool)
    for rung, (op, share) in bar.items():
        solved, tried = reading[rung]
        counts = gen.binomial(n, gen.beta(1 + solved, 1 + tried - solved, draws)) / n
        holds &= counts >= share if op == ">=" else counts > share
    simulated = 1 - holds.mean()
    assert miss_chance(reading, n, bar) == pytest.approx(simulated, abs=4e-3)


def test_miss_chance_sits_on_the_bar_line():
    """On the line: 7% of 100 tasks is 7 tasks, though 0.07 * 100 is 7.000000000000001 in
    floating point, so a rate at 7% read from a huge sample misses about half the time."""
    bar = {"unseen_depth2": (">=", 0.07)}
    assert miss_chance({"unseen_depth2": [7_000, 100_000]}, 100, bar) < 0.5
    assert miss_chance({"unseen_depth2": [100_000, 100_000]}, 100, bar) == pytest.approx(0.0)
    assert miss_chance({"unseen_depth2": [0, 100_000]}, 100, bar) == pytest.approx(1.0)
