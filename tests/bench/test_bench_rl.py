"""`glmflash bench rl`: the warm-up step is not counted, the phases are the steps' own, the
baseline samples the first timed step's prompts with the same seed by full recomputation;
where bf16 matmuls are fast, one update is timed in fp32 and bf16 on the same rollouts;
the command runs end to end on a tiny checkpoint. No timing assertions."""

import json
from types import SimpleNamespace

import pytest
import torch

from glmflash.bench import rl as bench_rl_module
from glmflash.bench.rl import bench_rl
from glmflash.checkpoint import save_model
from glmflash.config import PipelinePlan, model_config
from glmflash.data import derive_seed
from glmflash.model.lm import GLMFlash
from glmflash.train.rl import rl_tasks
from tests.bench.test_bench_smoke import bench


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ckpt") / "tiny"
    save_model(folder, GLMFlash(model_config("tiny")))
    return folder


def test_warm_up_is_left_out_and_the_phases_are_the_steps(checkpoint, monkeypatch):
    """A stand-in step whose seconds grow with each call: the figures are the means over the
    timed steps (calls 2 and 3), never the warm-up's; `other` is the step's remainder; the
    baseline samples the first timed step's tasks, seed and weights without the cache."""
    calls, sampled = [], []

    def fake_step(learner, batch, g0):
        calls.append(g0)
        k = len(calls)
        return {
            "sample_seconds": 1.0 * k,
            "verify_seconds": 2.0 * k,
            "update_seconds": 3.0 * k,
            "mean_len": 10.0 * k,
            "truncation_rate": 0.0,
        }

    clock = iter(range(0, 1000, 10))  # each step takes 10 "seconds", the baseline too
    monkeypatch.setattr(bench_rl_module.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(bench_rl_module, "rl_step", fake_step)
    monkeypatch.setattr(bench_rl_module, "autocast_dtype", lambda *a: None)  # an fp32 host
    monkeypatch.setattr(  # the baseline's sampling: the RL step's own, without the cache
        "glmflash.train.rl.generate",
        lambda model, prompts, *a, **kw: sampled.append((prompts, kw, len(calls))),
    )
    r = bench_rl(checkpoint, steps=2)
    cfg = PipelinePlan.full(seed=0).rl
    n = cfg.tasks_per_step
    assert calls == [0, n, 2 * n]  # one warm-up, two timed, consecutive batches
    assert r["phase_seconds"] == {"sample": 2.5, "verify": 5.0, "update": 7.5, "other": -5.0}
    assert r["step_seconds"] == 10 and r["rollouts_per_s"] == n * cfg.group_size / 10
    assert r["mean_completion_tokens"] == 25.0
    ((prompts, kw, steps_before),) = sampled
    assert steps_before == 1  # after the warm-up, on the weights the first timed step uses
    owners = [t for t in rl_tasks(cfg)[n : 2 * n] for _ in range(cfg.group_size)]
    assert prompts == [t.prompt for t in owners]
    assert kw["use_cache"] is False and kw["seed"] == derive_seed("rl", cfg.seed, n)
    # the first timed step with the baseline's 10 s of sampling instead of its 2 s
    assert r["ratios"]["rl_sampling_cached_vs_full"] == 10 / 2
    assert r["ratios"]["rl_step_vs_full_recompute_sampling"] == (10 - 2 + 10) / 10


def test_bf16_updates_are_timed_against_fp32_on_the_same_rollouts(checkpoint, monkeypatch):
    """Where bf16 matmuls are fast, one update on one set of rollouts (the first step with
    reward spread) is timed in fp32 and in bf16 in turn: the ratio is fp32's best over
    bf16's; the stage's own steps keep the stage's precision (fp32)."""
    from glmflash.train.rl import Rollouts

    G = PipelinePlan.full(seed=0).rl.group_size
    flat = torch.zeros(4, G, dtype=torch.float64)
    spread = flat.clone()
    spread[0, 0] = 1.0
    batches = iter([flat, spread])  # the first step has no spread: it is skipped

    def fake_roll_out(learner, batch, g0):
        return Rollouts(batch, [SimpleNamespace(prompt_ids=[g0])] * 4 * G, [], next(batches), 0, 0)

    seen, clock = [], [0.0]
    seconds = {None: 30.0, torch.bfloat16: 10.0}

    def fake_update(model, reference, opt, params, prompts, completions, adv, cfg, amp):
        seen.append((amp, prompts[0][0], bool(adv.any())))
        clock[0] += seconds[amp] + len(seen)  # later rounds slower: the best is the first

    def fake_step(learner, batch, g0):
        assert learner.amp is None  # the stage's precision
        clock[0] += 10.0
        return {
            "sample_seconds": 1.0,
            "verify_seconds": 1.0,
            "update_seconds": 4.0,
            "mean_len": 1.0,
            "truncation_rate": 0.0,
        }

    monkeypatch.setattr(bench_rl_module.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(bench_rl_module, "rl_step", fake_step)
    monkeypatch.setattr(bench_rl_module, "roll_out", fake_roll_out)
    monkeypatch.setattr(bench_rl_module, "policy_update", fake_update)
    fast = {"auto": torch.bfloat16, "bf16": torch.bfloat16, "fp32": None}  # an AMX host
    monkeypatch.setattr(bench_rl_module, "autocast_dtype", lambda dev, p: fast[p])
    monkeypatch.setattr("glmflash.train.rl.generate", lambda *a, **kw: None)
    r = bench_rl(checkpoint, steps=2)
    n = PipelinePlan.full(seed=0).rl.tasks_per_step
    assert seen == [(None, n, True), (torch.bfloat16, n, True)] * 2  # same rollouts, in turn
    assert r["update_dtype"] == "float32"
    assert r["update_seconds_same_rollouts"] == {"fp32": 31.0, "bf16": 12.0}
    assert r["ratios"]["update_fp32_vs_bf16"] == 31.0 / 12.0


def test_command_runs_on_a_checkpoint(checkpoint):
    r = json.loads(bench("rl", "--json", "--checkpoint", str(checkpoint), "--steps", "1"))
    cfg = PipelinePlan.full(seed=0).rl
    assert r["bench"] == "rl" and r["rollouts_per_step"] == cfg.tasks_per_step * cfg.group_size
    phases = r["phase_seconds"]
    assert abs(sum(phases.values()) - r["step_seconds"]) < 1e-9
    assert all(phases[p] > 0 for p in ("sample", "verify", "update"))
    ratios = {"rl_step_vs_full_recompute_sampling", "rl_sampling_cached_vs_full"}
    if "update_seconds_same_rollouts" in r:  # bf16 matmuls are fast on this machine
        ratios.add("update_fp32_vs_bf16")
    assert set(r["ratios"]) == ratios
    assert "cpu_capability" in r["environment"]


def test_without_a_checkpoint_is_a_user_error():
    from glmflash.errors import CLIError

    with pytest.raises(CLIError, match="--checkpoint"):
        bench("rl")


def test_a_missing_checkpoint_folder_is_a_user_error(tmp_path):
    from glmflash.errors import CLIError

    with pytest.raises(CLIError, match="not found"):
        bench("rl", "--checkpoint", str(tmp_path / "nowhere"))
