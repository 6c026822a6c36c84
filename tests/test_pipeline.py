"""`glmflash pipeline --quick`: every stage runs on the tiny preset, and a rerun resumes."""

import json

import pytest

from glmflash.cli import main
from glmflash.evaluate.rungs import RUNGS, clears_bar


def test_quick_pipeline_end_to_end_and_resume(tmp_path, capsys):
    out = tmp_path / "p"
    assert main(["pipeline", "--quick", "--out", str(out), "--device", "cpu"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["preset"] == "tiny"
    for key in ("pretrain", "before", "rl", "after", "vision", "total"):
        assert results["wall_seconds"][key] >= 0
    rl = results["rl"]
    for key in ("greedy_pass1_trained", "passk_trained", "passk_all"):
        assert set(rl[key]) == {"before", "after"} and rl[key]["before"][1] > 0
    assert rl["passk_all"]["before"][1] == 8  # one confirm task per family
    assert rl["sampling"] == {"k": 2, "temperature": 0.8}  # the quick plan's
    for fam, v in rl["per_family_samples"].items():  # pass_k = 2 samples of each task
        assert v["before"][1] == v["after"][1] == 2, fam
        assert (v["after"][0] > 0) == (rl["per_family"][fam]["after"][0] > 0)
    assert results["vision"]["heldout_correct"][1] == 20
    assert results["peak_memory_bytes"] > 0
    for when in ("before", "after"):  # the quick plan's 3 trained-family prompts
        check = results["decoding"][when]
        assert check["prompts"] == check["identical"] == 3 and check["speedup"] > 0, when
    assert results["machine"]["dtypes"]["newton_schulz"] in ("float32", "bfloat16")
    report = (out / "report.md").read_text()
    assert "greedy pass@1" in report and "## Example generations" in report
    assert "before RL 3/3 identical" in report and "after RL 3/3 identical" in report
    # transcripts of model output are not labelled Python (a formatter would rewrite them)
    assert "```text" in report and "```python" not in report
    assert "sampled pass@2, all eight families" in report and "pass@8" not in report
    assert f"CPU capability {results['machine']['cpu_capability']}" in report
    assert (out / "families.png").stat().st_size > 0
    assert list(results["ladder"]) == list(RUNGS)
    for rung, v in results["ladder"].items():
        assert v["before"][1] == v["after"][1] == 2, rung  # ladder_per_rung of the quick plan
    assert report.index("## The task ladder") < report.index("## Seed families")
    assert all(f"| {rung} |" in report for rung in RUNGS)
    assert (out / "ladder.png").stat().st_size > 0
    before = {rung: v["before"] for rung, v in results["ladder"].items()}
    assert results["competence_bar"]["cleared_on_confirm"] == clears_bar(before)
    step = int(results["pretrain"]["selected"].rsplit("_", 1)[1])  # the checkpoint evaluated
    assert results["pretrain"]["tokens"] == step * 4 * 64  # the quick plan's batch x seq_len
    bar_line = "cleared after" if clears_bar(before) else "not cleared after"
    assert f"{bar_line} {step * 256:,} pretraining tokens" in report
    ladder_json = json.loads((out / "before" / "ladder.json").read_text())
    assert sum(n for _, n in ladder_json["per_family"].values()) == 2 * len(RUNGS)
    capsys.readouterr()
    # a second run finds every stage done and only rewrites the report
    assert main(["pipeline", "--quick", "--out", str(out), "--device", "cpu"]) == 0
    assert capsys.readouterr().err.count("already done") == 5
    again = json.loads((out / "results.json").read_text())  # from the stage records read back
    for key in ("ladder", "rl", "vision", "pretrain", "wall_seconds", "plan"):
        assert again[key] == results[key], key
    # every stage in this process (the default gives each its own) comes out the same
    one = tmp_path / "one"
    argv = ["pipeline", "--quick", "--out", str(one), "--device", "cpu", "--one-process"]
    assert main(argv) == 0
    alone = json.loads((one / "results.json").read_text())
    assert alone["ladder"] == results["ladder"] and alone["vision"] == results["vision"]
    # to float rounding: in one process the kernels may sum in another order (seen in fp32 on a
    # CPU without bf16: 4.5119338 against 4.5119343)
    assert alone["pretrain"]["dev_loss"] == pytest.approx(results["pretrain"]["dev_loss"], rel=1e-6)
    rollouts = "rl/run/rollouts.jsonl"  # the tasks drawn, completions and rewards
    assert (one / rollouts).read_text() == (out / rollouts).read_text()
    speed = "rollouts_per_s"  # a timing
    assert {k: v for k, v in alone["rl"].items() if k != speed} == {
        k: v for k, v in rl.items() if k != speed
    }


def test_checkpoint_selection_takes_the_lowest_dev_loss_and_the_later_on_a_tie(tmp_path):
    from glmflash.pipeline import select_by_dev_loss

    def checkpoint(step, dev_loss):
        folder = tmp_path / "checkpoints" / f"step_{step:06d}"
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps({"meta": {"dev_loss": dev_loss}}))

    for step, loss in ((10, 0.7), (20, 0.5), (30, None), (40, 0.5), (50, 0.6)):
        checkpoint(step, loss)
    assert select_by_dev_loss(tmp_path).name == "step_000040"
    (tmp_path / "checkpoints" / "step_000040" / "config.json").write_text(
        json.dumps({"meta": {"dev_loss": 0.4}})
    )
    assert select_by_dev_loss(tmp_path).name == "step_000040"
    for step in (10, 20, 40, 50):
        checkpoint(step + 100, None)
    assert select_by_dev_loss(tmp_path).name == "step_000040"
