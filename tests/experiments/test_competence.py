"""Tokens to competence: the bar against hand-made counts, and a tiny harness run whose
branches are runs fully decayed at their budgets."""

import json
from dataclasses import replace

import pytest

from glmflash.config import PretrainConfig
from glmflash.experiments import competence
from glmflash.experiments.competence import (
    clears_bar,
    measure,
    tokens_to_bar,
    tokens_to_margin,
    update_table,
)
from glmflash.train.runlog import TrainError

AT_BAR = {
    "depth1": [16, 32],
    "depth1_heldout_phrasings": [5, 32],
    "unseen_depth2": [5, 32],
    "unseen_depth3": [1, 32],
}  # 50%, 15.6%, 15.6%, 3.1%: every line just met
SMALL = PretrainConfig(
    preset="tiny",
    batch_size=4,
    seq_len=32,
    warmup=1,
    eval_batches=1,
    eval_tasks=0,
    precision="fp32",
    decay_fraction=0.25,
)  # a harness run of a few seconds


def test_the_bar_holds_only_when_every_line_holds():
    assert clears_bar(AT_BAR)
    for rung, below in [
        ("depth1", 15),
        ("depth1_heldout_phrasings", 4),
        ("unseen_depth2", 4),
        ("unseen_depth3", 0),
    ]:
        assert not clears_bar({**AT_BAR, rung: [below, 32]}), rung
    low = {**AT_BAR, "unseen_depth3": [0, 32]}
    points = [
        {"tokens": 300, "rungs": AT_BAR},
        {"tokens": 100, "rungs": low},
        {"tokens": 200, "rungs": AT_BAR},
    ]
    assert tokens_to_bar(points) == 200
    assert tokens_to_bar(points[1:2]) is None


def test_margin_asks_more_than_the_bar():
    """A reading just at the bar clears it but would miss it on confirm about half the time;
    the margin waits for the budget whose reading leaves a fresh draw little room to miss."""
    at = {r: [k * 4, n * 4] for r, (k, n) in AT_BAR.items()}  # the same shares, 128 tasks
    wide = {**at, "unseen_depth3": [10, 128], "depth1_heldout_phrasings": [38, 128]}
    wide = {**wide, "unseen_depth2": [59, 128], "depth1": [120, 128]}
    points = [{"tokens": 100, "rungs": at}, {"tokens": 200, "rungs": wide}]
    assert tokens_to_bar(points) == 100
    assert tokens_to_margin(points, n=128) == 200
    assert tokens_to_margin(points[:1], n=128) is None


def test_table_keeps_one_row_per_name_and_seed(tmp_path):
    path = tmp_path / "table.json"
    update_table(path, "a", {"seed": 0, "tokens_to_bar": None})
    update_table(path, "a", {"seed": 1, "tokens_to_bar": 5})
    rows = update_table(path, "a", {"seed": 0, "tokens_to_bar": 7})
    assert sorted((r["name"], r["seed"], r["tokens_to_bar"]) for r in rows) == [
        ("a", 0, 7),
        ("a", 1, 5),
    ]
    assert json.loads(path.read_text()) == rows


TINY = {"context": 256}  # every ladder prompt fits


def test_a_tiny_harness_run_branches_and_evaluates_every_budget(tmp_path):
    cfg = replace(SMALL, optimizer="muon")
    rungs = ("depth1", "unseen_depth3")
    anyone = {"depth1": (">=", 0.0)}  # a bar any model clears
    row = measure(
        cfg, [8, 4], tmp_path, TINY, per_rung=2, rungs=rungs, log=lambda m: None, bar=anyone
    )
    assert [p["steps"] for p in row["points"]] == [4, 8]
    assert [p["tokens"] for p in row["points"]] == [4 * 128, 8 * 128]
    assert row["tokens_to_bar"] == row["tokens_to_margin"] == 4 * 128
    assert row["miss_chance"] == pytest.approx([0.0, 0.0])  # nothing misses "depth1 >= 0"
    assert row["machine"]["cpu_capability"] and row["tokens_per_s"] > 0
    for p in row["points"]:
        assert set(p["rungs"]) == set(rungs) and all(n == 2 for _, n in p["rungs"].values())
        assert all(v > 0 for v in p["body_loss"].values())
    # budget 4 is a branch of the stable run from its step 3 (decay over the last step)
    branch = json.loads((tmp_path / "budget_000004" / "run.json").read_text())
    assert branch["branch_from"].endswith("step_000003") and branch["pretrain"]["steps"] == 4
    stable = [json.loads(x) for x in (tmp_path / "stable" / "metrics.jsonl").open()]
    branched = [json.loads(x) for x in (tmp_path / "budget_000004" / "metrics.jsonl").open()]
    assert [r["step"] for r in branched] == [4] and branched[0]["lr"] == cfg.lr * cfg.min_lr_ratio
    assert stable[3]["lr"] == cfg.lr  # step 4 of the stable run: still stable
    # killed in the branch before its checkpoint: the branch starts afresh, the rest is reused
    import shutil

    shutil.rmtree(tmp_path / "budget_000004" / "checkpoints")
    (tmp_path / "budget_000004" / "point.json").unlink()
    stable_point = (tmp_path / "stable" / "point.json").read_text()
    again = measure(cfg, [4, 8], tmp_path, TINY, per_rung=2, rungs=rungs, log=lambda m: None)
    assert again["points"] == row["points"]
    assert (tmp_path / "stable" / "point.json").read_text() == stable_point
    # the same folder with other settings is refused, not reused
    with pytest.raises(TrainError, match="lr"):
        measure(replace(cfg, lr=1e-2), [4, 8], tmp_path, TINY, per_rung=2, rungs=rungs)


@pytest.mark.parametrize("budgets", ["", "0", "1"])
def test_bad_budgets_are_refused(tmp_path, budgets):
    with pytest.raises(Exception, match="budgets"):
        measure(PretrainConfig(preset="tiny"), [int(b) for b in budgets.split(",") if b], tmp_path)


def test_body_loss_is_the_loss_of_the_body_given_the_prompt():
    import torch

    from glmflash.config import model_config
    from glmflash.evaluate.rungs import rung_tasks
    from glmflash.model.lm import GLMFlash
    from glmflash.tokenizer import encode

    torch.manual_seed(0)
    model = GLMFlash(model_config("tiny", context=256)).eval()
    [task] = rung_tasks("depth1", "dev", 1)
    prompt = encode(task.prompt, bos=True)
    whole = encode(task.prompt, bos=True) + encode(task.reference, eos=True)

    def summed(ids):  # the model's own mean loss, times the number of targets
        x, y = torch.tensor([ids[:-1]]), torch.tensor([ids[1:]])
        with torch.no_grad():
            return float(model(x, y).loss) * (len(ids) - 1)

    by_difference = (summed(whole) - summed(prompt)) / (len(whole) - len(prompt))
    assert competence.body_loss(model, "depth1", "dev", 1) == pytest.approx(by_difference, rel=1e-4)


def test_the_command_refuses_bad_input_in_one_line(tmp_path, capsys):
    from glmflash.cli import main

    base = ["competence", "--out", str(tmp_path), "--name", "x", "--runs", str(tmp_path / "r")]
    assert main([*base, "--budgets", "5"]) == 2  # not past the plan's warm-up
    assert main([*base, "--budgets", "80", "--set", "lr=fast"]) == 2
    assert main([*base, "--budgets", "80", "--set", "nonsense=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("glmflash competence: error:") for line in err)
    assert not (tmp_path / "r").exists()


def test_larger_budgets_extend_the_stable_run_instead_of_retraining(tmp_path):
    cfg = SMALL
    quiet = dict(per_rung=1, rungs=("depth1",), log=lambda m: None)
    short = measure(cfg, [4, 8], tmp_path / "h", TINY, **quiet)
    longer = measure(cfg, [4, 8, 12], tmp_path / "h", TINY, **quiet)
    assert longer["points"][:2] == short["points"]  # measured once, kept
    # the 8-step stable run is now budget 8's point; the 12-step one continues it from step 6
    record = json.loads((tmp_path / "h" / "stable" / "run.json").read_text())
    assert record["branch_from"].endswith("budget_000008/checkpoints/step_000006")
    assert record["pretrain"]["steps"] == 12
    # and equals the 12-step stable run trained from step 0
    fresh = measure(cfg, [12], tmp_path / "fresh", TINY, **quiet)
    assert longer["points"][-1]["dev_loss"] == fresh["points"][-1]["dev_loss"]
    # an extension killed before its first checkpoint starts again as the same branch
    import shutil

    shutil.rmtree(tmp_path / "h" / "stable" / "checkpoints")
    (tmp_path / "h" / "stable" / "point.json").unlink()
    again = measure(cfg, [4, 8, 12], tmp_path / "h", TINY, **quiet)
    assert again["points"] == longer["points"]
    record = json.loads((tmp_path / "h" / "stable" / "run.json").read_text())
    assert record["branch_from"].endswith("budget_000008/checkpoints/step_000006")
