"""Pretraining: schedule, a tiny run, exact resume (RNGs included), data parallel == single
process, the balance loss and bias balancing in the loop, MTP with evaluation, errors."""

import json
import os
import random
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from glmflash.checkpoint import checkpoint_dirs
from glmflash.cli import main
from glmflash.config import PretrainConfig, model_config
from glmflash.model.lm import GLMFlash
from glmflash.train.distributed import DistInfo
from glmflash.train.pretrain import prepare_run, pretrain, training_stream
from glmflash.train.runlog import TrainError
from glmflash.train.schedule import Schedule, lr_at

FAST = dict(
    preset="tiny",
    steps=4,
    batch_size=4,
    seq_len=32,
    warmup=1,
    eval_every=2,
    eval_batches=1,
    eval_tasks=0,
    ckpt_every=2,
    precision="fp32",
)


def weights(run_dir) -> dict[str, torch.Tensor]:
    return load_file(str(checkpoint_dirs(run_dir)[-1] / "model.safetensors"))


def losses(run_dir) -> list[float]:
    return [json.loads(line)["loss"] for line in (run_dir / "metrics.jsonl").open()]


def test_schedule_warmup_then_cosine():
    sched = Schedule.of(PretrainConfig(steps=100, warmup=10, lr=1.0, min_lr_ratio=0.1))
    assert lr_at(0, sched) == pytest.approx(0.1) and lr_at(9, sched) == pytest.approx(1.0)
    assert lr_at(10, sched) == pytest.approx(1.0)
    assert lr_at(55, sched) == pytest.approx(0.55)
    assert lr_at(100, sched) == pytest.approx(0.1)
    assert all(lr_at(s, sched) >= lr_at(s + 1, sched) for s in range(10, 100))


def test_wsd_is_stable_then_decays_in_its_last_fraction():
    sched = Schedule(1.0, 100, 10, "wsd", 0.1)
    assert lr_at(0, sched) == pytest.approx(0.1)
    assert all(lr_at(s, sched) == 1.0 for s in range(10, 80))  # decay_fraction 0.2
    # 1 - sqrt decay over steps 80..99: lr = 0.1 + 0.9 (1 - sqrt((s - 79) / 20))
    assert lr_at(84, sched) == pytest.approx(0.1 + 0.9 * (1 - 0.5))
    assert lr_at(99, sched) == pytest.approx(0.1)
    assert all(lr_at(s, sched) > lr_at(s + 1, sched) for s in range(79, 99))
    # the stable part does not depend on the run's length: any budget branches off it
    longer = Schedule.of(
        PretrainConfig(steps=400, warmup=10, lr=1.0, min_lr_ratio=0.1, schedule="wsd")
    )
    assert [lr_at(s, sched) for s in range(80)] == [lr_at(s, longer) for s in range(80)]


@pytest.mark.parametrize("optimizer, balance", [("adamw", "aux"), ("muon", "bias")])
def test_a_wsd_branch_equals_the_run_from_scratch(tmp_path, optimizer, balance):
    wsd = {**FAST, "schedule": "wsd", "decay_fraction": 0.25, "keep_checkpoints": 4}
    wsd["optimizer"] = optimizer
    model = {"balance": balance}
    pretrain(
        PretrainConfig(**{**wsd, "steps": 8}), tmp_path / "stable", "cpu", model_overrides=model
    )
    budget = PretrainConfig(**{**wsd, "steps": 6})  # decays over its steps 4, 5
    pretrain(budget, tmp_path / "scratch", device="cpu", model_overrides=model)
    source = tmp_path / "stable" / "checkpoints" / "step_000004"
    pretrain(budget, tmp_path / "branch", "cpu", model_overrides=model, branch_from=source)
    assert losses(tmp_path / "branch") == losses(tmp_path / "scratch")[4:]
    a, b = weights(tmp_path / "scratch"), weights(tmp_path / "branch")
    assert all(torch.equal(a[k], b[k]) for k in a)
    # a branch whose schedule or settings would differ from the run from scratch is refused
    with pytest.raises(TrainError, match="schedules differ"):
        late = tmp_path / "stable" / "checkpoints" / "step_000006"  # stable past 6's decay start
        late_cfg = PretrainConfig(**{**wsd, "steps": 6, "decay_fraction": 0.5})
        pretrain(late_cfg, tmp_path / "x", "cpu", model_overrides=model, branch_from=late)
    with pytest.raises(TrainError, match="pretrain.lr differ"):
        lr_cfg = PretrainConfig(**{**wsd, "steps": 6, "lr": 1e-2})
        pretrain(lr_cfg, tmp_path / "y", "cpu", model_overrides=model, branch_from=source)
    with pytest.raises(TrainError, match="model.linear_kind differ"):
        other = {**model, "linear_kind": "delta"}
        pretrain(budget, tmp_path / "z", device="cpu", branch_from=source, model_overrides=other)


def test_a_branch_keeps_the_dtypes_its_stable_run_chose(tmp_path, monkeypatch):
    wsd = {**FAST, "schedule": "wsd", "precision": "auto", "optimizer": "muon", "steps": 8}
    wsd["keep_checkpoints"] = 4
    pretrain(PretrainConfig(**wsd), tmp_path / "stable", device="cpu")
    chosen = json.loads((tmp_path / "stable" / "run.json").read_text())["machines"][0]["dtypes"]

    def no_calibration(*args, **kwargs):
        raise AssertionError("a branch must not calibrate its dtypes again")

    monkeypatch.setattr("glmflash.train.runlog.autocast_dtype", no_calibration)
    monkeypatch.setattr("glmflash.machine.fast_matmul_dtype", no_calibration)
    source = tmp_path / "stable" / "checkpoints" / "step_000004"
    pretrain(PretrainConfig(**{**wsd, "steps": 6}), tmp_path / "b", "cpu", branch_from=source)
    branch = json.loads((tmp_path / "b" / "run.json").read_text())["machines"][0]["dtypes"]
    assert branch == chosen


def test_tiny_run_learns_and_writes_everything(tmp_path):
    cfg = PretrainConfig(**{**FAST, "steps": 12, "lr": 1e-2, "ckpt_every": 6})
    summary = pretrain(cfg, tmp_path / "run", device="cpu")
    run = tmp_path / "run"
    assert (run / "loss.png").stat().st_size > 0 and (run / "summary.json").is_file()
    rows = losses(run)
    assert len(rows) == 12 and rows[-1] < rows[0] - 0.3
    assert summary["dev_loss"] > 0
    assert [p.name for p in checkpoint_dirs(run)] == ["step_000006", "step_000012"]
    [m] = json.loads((run / "run.json").read_text())["machines"]  # the machine beside timings
    assert m["start_step"] == 0 and m["cpu_capability"] and m["cores"] >= 1
    assert m["dtypes"]["autocast"] == "none"
    assert ("newton_schulz" in m["dtypes"]) == (cfg.optimizer == "muon")


def test_resume_reproduces_the_uninterrupted_run(tmp_path):
    cfg = PretrainConfig(**FAST)
    pretrain(cfg, tmp_path / "a", device="cpu")
    pretrain(cfg, tmp_path / "b", device="cpu")
    # interrupt b after its step-2 checkpoint: drop what came later, then resume
    shutil.rmtree(checkpoint_dirs(tmp_path / "b")[-1])
    pretrain(cfg, tmp_path / "b", device="cpu", resume=True)
    starts = [
        m["start_step"] for m in json.loads((tmp_path / "b" / "run.json").read_text())["machines"]
    ]
    assert starts == [0, 2]  # each part of a resumed run names its machine
    wa, wb = weights(tmp_path / "a"), weights(tmp_path / "b")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert losses(tmp_path / "a") == losses(tmp_path / "b")


def test_bad_input_is_one_clear_line(tmp_path, capsys):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:  # a choice the parser itself refuses
        main(["pretrain", "--preset", "nope", "--out", str(out)])
    assert exit_info.value.code == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err
    assert main(["pretrain", "--preset", "tiny", "--steps", "-3", "--out", str(out)]) == 2
    assert "steps" in capsys.readouterr().err
    assert main(["pretrain", "--preset", "tiny", "--out", str(out), "--resume"]) == 2
    assert "nothing to resume" in capsys.readouterr().err
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["pretrain", "--preset", "tiny", "--out", str(blocker / "sub")]) == 2
    assert "cannot write" in capsys.readouterr().err
    with pytest.raises(TrainError, match="already holds a run"):
        pretrain(PretrainConfig(**FAST), tmp_path / "r2", device="cpu")
        pretrain(PretrainConfig(**FAST), tmp_path / "r2", device="cpu")


def test_resume_names_every_changed_setting(tmp_path):
    """A resume under other settings is refused with each changed one named: a training
    setting, a model option, and a setting the recorded run predates."""
    cfg = PretrainConfig(**FAST)
    prepare_run(cfg, tmp_path, False, {}, DistInfo())
    other = PretrainConfig(**{**FAST, "lr": cfg.lr * 2})
    with pytest.raises(
        TrainError, match=r"differ from the run in .*: model\.d_model, pretrain\.lr$"
    ):
        prepare_run(other, tmp_path, True, {"d_model": 48}, DistInfo())
    record = json.loads((tmp_path / "run.json").read_text())
    del record["pretrain"]["warmup"]  # written before the setting existed
    (tmp_path / "run.json").write_text(json.dumps(record))
    with pytest.raises(TrainError, match=r"differ from the run in .*: pretrain\.warmup$"):
        prepare_run(cfg, tmp_path, True, {}, DistInfo())


def test_corrupt_checkpoint_on_resume(tmp_path, capsys):
    cfg = PretrainConfig(**{**FAST, "steps": 2})
    pretrain(cfg, tmp_path / "r", device="cpu")
    target = checkpoint_dirs(tmp_path / "r")[-1] / "model.safetensors"
    target.write_bytes(target.read_bytes()[:100])
    assert main(["pretrain", "--out", str(tmp_path / "r"), "--resume"]) == 2
    assert "model.safetensors" in capsys.readouterr().err


def test_two_processes_equal_one(tmp_path):
    """torchrun with 2 CPU ranks == one process on the same global batch (float tolerance).
    The balance loss is off: it is a per-rank statistic, as in any data-parallel MoE."""
    args = [
        "--preset",
        "tiny",
        "--steps",
        "3",
        "--batch-size",
        "4",
        "--seq-len",
        "32",
        "--eval-tasks",
        "0",
        "--precision",
        "fp32",
        "--eval-every",
        "3",
        "--set",
        "model.balance_coef=0",
        "--device",
        "cpu",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    single = subprocess.run(
        [sys.executable, "-m", "glmflash", "pretrain", "--out", str(tmp_path / "one"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert single.returncode == 0, single.stderr
    multi = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-port",
            "29517",
            "-m",
            "glmflash",
            "pretrain",
            "--out",
            str(tmp_path / "two"),
            *args,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert multi.returncode == 0, multi.stderr[-3000:]
    w1, w2 = weights(tmp_path / "one"), weights(tmp_path / "two")
    for k in w1:
        assert torch.allclose(w1[k], w2[k], atol=1e-5, rtol=1e-4), k
    assert losses(tmp_path / "one") == pytest.approx(losses(tmp_path / "two"), rel=1e-5)


def test_mtp_run_evaluates_and_trains_its_head(tmp_path):
    """--set model.mtp=true: the periodic evaluation (dev loss and dev pass@1) runs, and the
    MTP head's weights move."""
    cfg = PretrainConfig(**{**FAST, "steps": 2, "eval_every": 2, "eval_tasks": 1})
    pretrain(cfg, tmp_path / "run", device="cpu", model_overrides={"mtp": True})
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [r["step"] for r in rows if "dev_loss" in r and "dev_pass1" in r] == [2]
    torch.manual_seed(cfg.seed)
    start = GLMFlash(model_config("tiny", mtp=True)).state_dict()
    trained = weights(tmp_path / "run")
    assert not torch.equal(trained["mtp_proj.weight"], start["mtp_proj.weight"])


def test_balance_loss_is_in_the_training_loss(tmp_path):
    """One step from the same start with balance_coef 0 and 1: the routers end apart only if
    the balance loss (whose gradient reaches the router) is part of the loss trained on."""
    cfg = PretrainConfig(**{**FAST, "steps": 1, "eval_every": 1, "ckpt_every": 1})
    runs = {}
    for coef in (0.0, 1.0):
        pretrain(cfg, tmp_path / str(coef), device="cpu", model_overrides={"balance_coef": coef})
        runs[coef] = weights(tmp_path / str(coef))
    routers = [k for k in runs[0.0] if k.endswith("moe.router.weight")]
    assert len(routers) == 4
    assert all(not torch.equal(runs[0.0][k], runs[1.0][k]) for k in routers)
    assert [json.loads(line)["aux"] for line in (tmp_path / "0.0" / "metrics.jsonl").open()] == [
        0.0
    ]


@pytest.mark.parametrize("mtp", [False, True])
def test_bias_balancing_is_updated_by_each_step(tmp_path, mtp):
    """balance=bias: after one step each MoE's selection bias (the MTP block's too) is
    rate * sign(mean load - load), the load being the initial model's routing of the first
    training batch."""
    cfg = PretrainConfig(**{**FAST, "steps": 1, "eval_every": 1, "ckpt_every": 1})
    options = {"balance": "bias", "bias_rate": 0.25, "mtp": mtp}
    pretrain(cfg, tmp_path / "run", device="cpu", model_overrides=options)
    torch.manual_seed(cfg.seed)  # the run's initial model and first batch, recomputed
    model = GLMFlash(model_config("tiny", **options)).train()
    x, y = training_stream(cfg, DistInfo()).batch(0, cfg.batch_size)
    load = model(x, y).load
    expected = 0.25 * torch.sign(load.mean(-1, keepdim=True) - load)
    trained = weights(tmp_path / "run")
    names = [f"layers.{i}.moe.select_bias" for i in range(4)] + ["mtp_block.moe.select_bias"] * mtp
    bias = torch.stack([trained[name] for name in names])
    assert expected.abs().sum() > 0 and torch.equal(bias, expected)


def test_resume_restores_the_global_rngs(tmp_path, monkeypatch):
    """The model draws nothing from the global RNGs after its initialisation, so a stand-in for
    dropout does: a training forward scales the loss by draws from torch, random and numpy.
    The resumed run equals the uninterrupted one only if all three states are restored."""
    forward = GLMFlash.forward

    def noisy(self, tokens, targets=None):
        out = forward(self, tokens, targets)
        if self.training and out.loss is not None:
            noise = float(torch.rand(())) + random.random() + float(np.random.rand())
            out.loss = out.loss * (1 + 0.1 * noise)
        return out

    monkeypatch.setattr(GLMFlash, "forward", noisy)
    cfg = PretrainConfig(**FAST)
    pretrain(cfg, tmp_path / "a", device="cpu")
    pretrain(cfg, tmp_path / "b", device="cpu")
    shutil.rmtree(checkpoint_dirs(tmp_path / "b")[-1])  # killed after the step-2 checkpoint
    pretrain(cfg, tmp_path / "b", device="cpu", resume=True)
    wa, wb = weights(tmp_path / "a"), weights(tmp_path / "b")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert losses(tmp_path / "a") == losses(tmp_path / "b")


def test_indexer_warmup_trains_the_indexer_alone_then_everything(tmp_path):
    """During the dense warm-up the loss is the indexer's KL: every other weight stays at its
    init; after it, the whole model trains and the KL is still logged."""
    cfg = PretrainConfig(**{**FAST, "steps": 2, "indexer_warmup": 2, "ckpt_every": 2})
    overrides = {"sparse_kind": "indexer"}
    pretrain(cfg, tmp_path / "warm", device="cpu", model_overrides=overrides)
    torch.manual_seed(cfg.seed)
    init = GLMFlash(model_config("tiny", **overrides)).state_dict()
    after = weights(tmp_path / "warm")
    changed = {n for n, w in after.items() if not torch.equal(w, init[n])}
    assert changed and all(".indexer." in n for n in changed)
    rows = [json.loads(line) for line in (tmp_path / "warm" / "metrics.jsonl").open()]
    assert all(r["indexer_kl"] > 0 for r in rows)

    cfg = PretrainConfig(**{**FAST, "steps": 2, "indexer_warmup": 1, "ckpt_every": 2})
    pretrain(cfg, tmp_path / "both", device="cpu", model_overrides=overrides)
    changed = {n for n, w in weights(tmp_path / "both").items() if not torch.equal(w, init[n])}
    assert any(".indexer." not in n for n in changed)


def test_precision_auto_is_decided_once_per_run(tmp_path, monkeypatch):
    """auto follows the calibration at the run's first start (bf16 where fast, else fp32), and
    a resume keeps that choice even when the calibration now says otherwise."""
    from glmflash import machine

    cfg = PretrainConfig(**{**FAST, "precision": "auto"})
    for name, first, later in (("fast", 3.0, 0.02), ("slow", 0.02, 3.0)):
        monkeypatch.setattr(machine, "bf16_speedup", lambda device="cpu", s=first: s)
        pretrain(cfg, tmp_path / name, device="cpu")
        shutil.rmtree(checkpoint_dirs(tmp_path / name)[-1])
        monkeypatch.setattr(machine, "bf16_speedup", lambda device="cpu", s=later: s)
        pretrain(cfg, tmp_path / name, device="cpu", resume=True)
        runs = json.loads((tmp_path / name / "run.json").read_text())["machines"]
        chosen = [m["dtypes"]["autocast"] for m in runs]
        assert chosen == (["bfloat16"] * 2 if first > 1 else ["none"] * 2), name
        assert [m["start_step"] for m in runs] == [0, 2]


def test_model_settings_are_typed_and_the_old_spelling_warns():
    """--set model.KEY=VALUE parses through the one KEY=VALUE parser (strict booleans, the
    field's type); --model-option KEY=VALUE still works, with a warning."""
    from glmflash.commands.pretrain import model_overrides

    got = model_overrides(
        ["model.linear_kind=delta", "model.mtp=true", "model.sparse_window=64"], []
    )
    assert got == {"linear_kind": "delta", "mtp": True, "sparse_window": 64}
    with pytest.warns(UserWarning, match="--set model.KEY=VALUE"):
        assert model_overrides([], ["elu_conv=false"]) == {"elu_conv": False}
    for bad, message in (
        ("lr=1e-3", "expected model.KEY=VALUE"),
        ("model.mtp=yes", "mtp: expected true or false"),
        ("model.bogus=1", "unknown setting 'bogus'"),
        ("model.d_model", "expected KEY=VALUE"),
    ):
        with pytest.raises(ValueError, match=message):
            model_overrides([bad], [])
