"""TensorBoard events beside metrics.jsonl: read back, they hold the same numbers."""

from __future__ import annotations

import math

import pytest

from glmflash.config import PretrainConfig
from glmflash.experiments.registry import Experiment
from glmflash.experiments.runner import TENSORBOARD, run_experiment
from glmflash.train.pretrain import pretrain
from glmflash.train.runlog import METRICS, read_jsonl

event_accumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator", reason="the extra [tensorboard]"
)


def scalars(folder) -> dict[str, list[tuple[int, float]]]:
    acc = event_accumulator.EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def expected(rows) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        for key, value in row.items():
            if key != "step" and isinstance(value, (int, float)) and math.isfinite(value):
                out.setdefault(key, []).append((row["step"], value))
    return out


def test_pretraining_events_equal_its_metrics(tmp_path):
    cfg = PretrainConfig(
        preset="tiny",
        steps=4,
        batch_size=2,
        seq_len=16,
        warmup=1,
        eval_every=2,
        ckpt_every=2,
        eval_tasks=0,
        eval_batches=1,
    )
    pretrain(cfg, tmp_path, "cpu")
    want = expected(read_jsonl(tmp_path / METRICS))
    got = scalars(tmp_path)
    assert set(got) == set(want) and {"loss", "dev_loss", "lr"} <= set(got)
    for tag, points in want.items():  # events store float32
        assert [s for s, _ in got[tag]] == [s for s, _ in points]
        assert [v for _, v in got[tag]] == pytest.approx([v for _, v in points], rel=1e-6)


def curve_run(config: dict, seed: int) -> dict:
    values = [[step, config["a"] * step + seed] for step in (0, 5, 10)]
    return {"score": values[-1][1], "curves": {"score": values}}


def test_experiment_runs_write_their_curves(tmp_path):
    exp = Experiment(
        name="tb-toy",
        run=curve_run,
        metric="score",
        seeds=(0, 1),
        conditions={"x": {"a": 1.0}, "y": {"a": 2.0}},
        comparisons=[("x", "y")],
    )
    run_experiment(exp, tmp_path, log=lambda _: None)
    got = scalars(tmp_path / "tb-toy" / TENSORBOARD / "y__seed1")
    assert got["score"] == [(0, 1.0), (5, 11.0), (10, 21.0)]
    assert got["final/score"] == [(10, 21.0)]


def test_rl_and_vision_events_equal_their_metrics(tmp_path, monkeypatch):
    import torch

    from glmflash.checkpoint import save_model
    from glmflash.config import RLConfig, VisionConfig, model_config
    from glmflash.model.lm import GLMFlash
    from glmflash.train.rl import train_rl
    from glmflash.train.vision import train_vision

    torch.manual_seed(0)
    init = save_model(tmp_path / "ck", GLMFlash(model_config("tiny")))
    cfg = RLConfig(
        families=("double",),
        ladder_share=0.0,
        groups=2,
        group_size=2,
        tasks_per_step=1,
        eval_every=2,
        dev_per_family=1,
        max_new_tokens=4,
    )
    train_rl(init, tmp_path / "rl", cfg, device="cpu", log=lambda _: None, progress=False)
    want, got = expected(read_jsonl(tmp_path / "rl" / METRICS)), scalars(tmp_path / "rl")
    assert set(got) == set(want) and "reward_mean" in got
    for tag, points in want.items():
        assert [s for s, _ in got[tag]] == [s for s, _ in points]
        assert [v for _, v in got[tag]] == pytest.approx([v for _, v in points], rel=1e-6)

    out = tmp_path / "vision"
    train_vision(
        out,
        VisionConfig(
            preset="tiny", steps=2, batch_size=4, align_steps=2, align_batch_size=4, eval_size=10
        ),
        device="cpu",
        progress=False,
        plots=False,
    )
    rows = list(read_jsonl(out / METRICS))
    got = scalars(out)
    for stage in ("align", "full"):
        mine = [(r["step"], r["loss"]) for r in rows if r["stage"] == stage]
        assert [s for s, _ in got[f"{stage}/loss"]] == [s for s, _ in mine]
        assert [v for _, v in got[f"{stage}/loss"]] == pytest.approx([v for _, v in mine], rel=1e-6)
