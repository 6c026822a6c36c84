"""Crash safety of `glmflash pipeline`: killed with SIGKILL at random moments and rerun, the
quick pipeline ends with the results, logs and weights of a run never interrupted; and the
narrow windows that random kills hit only sometimes, each reproduced on purpose."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from glmflash.checkpoint import load_model, save_model
from glmflash.config import PipelinePlan, PretrainConfig, model_config
from glmflash.model.lm import GLMFlash
from glmflash.pipeline import Pipeline, select_by_dev_loss
from glmflash.train.pretrain import pretrain
from glmflash.train.rl import _best_so_far, train_rl
from glmflash.train.runlog import read_jsonl, trim_metrics

KILL_SEED = 1  # its draws fall in pretraining, RL and vision on the reference clock
STAGES = ("pretrain", "before", "rl", "after", "vision")
# what may differ: timings, the machine (one record per resume), where a process started
VOLATILE = {
    "machine",
    "machines",
    "peak_memory_bytes",
    "tokens_per_s",
    "rollouts_per_s",
    "speedup",  # of cached decoding over full recomputation
    "start_step",
}


def launch(out: Path, kill: tuple[str, float] | None = None) -> tuple[int, list[tuple[float, str]]]:
    """Run `glmflash pipeline --quick` into `out`; with kill = (anchor, s), SIGKILL its whole
    process group s seconds after the anchor: a stage's name (when it starts running) or a path
    under `out` (when it appears). Returns the exit status and the timed stderr lines."""
    cmd = [
        sys.executable,
        "-m",
        "glmflash",
        "pipeline",
        "--quick",
        "--out",
        str(out),
        "--device",
        "cpu",
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        start_new_session=True,
    )
    lines: list[tuple[float, str]] = []

    def read() -> None:
        for line in proc.stderr:
            lines.append((time.time(), line.rstrip()))

    reader = threading.Thread(target=read)
    reader.start()
    anchored = None
    while proc.poll() is None:  # not reaped yet, so the group id is still ours
        if (
            kill
            and anchored is None
            and (
                f"pipeline: {kill[0]} ..." in (x for _, x in lines)
                or "/" in kill[0]
                and (out / kill[0]).exists()
            )
        ):
            anchored = time.perf_counter()
        if anchored is not None and time.perf_counter() - anchored >= kill[1]:
            os.killpg(proc.pid, signal.SIGKILL)  # the verifier's workers die with it
            proc.wait()
            break
        time.sleep(0.002)
    reader.join()
    return proc.returncode, lines


FIRST_CKPT = "pretrain/run/checkpoints/step_000003"


def anchors(out: Path, lines: list[tuple[float, str]]) -> dict[str, float]:
    """When each stage started, pretraining's checkpoints appeared and the run ended (epoch s)."""
    times = {x.split()[1]: t for t, x in lines if x.startswith("pipeline: ") and x.endswith("...")}
    for step in (3, 6):
        times[f"pretrain/run/checkpoints/step_{step:06d}"] = (
            (out / f"pretrain/run/checkpoints/step_{step:06d}").stat().st_mtime
        )
    return {**times, "end": lines[-1][0]}


def where(out: Path, lines: list[tuple[float, str]]) -> str:
    """What a kill interrupted: the running stage and the checkpoints it had saved."""
    running = [x.split()[1] for _, x in lines if x.startswith("pipeline: ") and x.endswith(" ...")]
    if not running:
        return "startup"
    stage = running[-1]
    if (out / stage / "stage.json").is_file():
        return f"the report (after {stage})"
    saved = sorted(p.name for p in (out / stage / "run" / "checkpoints").glob("step_*"))
    return f"{stage}, checkpoints {saved}" if stage in ("pretrain", "rl") else stage


def strip(value: Any) -> Any:
    """`value` without its volatile fields."""
    if isinstance(value, dict):
        return {
            k: strip(v) for k, v in value.items() if k not in VOLATILE and not k.endswith("seconds")
        }
    if isinstance(value, list):
        return [strip(v) for v in value]
    return value


def files(out: Path, suffixes: tuple[str, ...]) -> list[str]:
    """Files of a pipeline folder, temporary (dot-named) folders aside."""
    return sorted(
        str(p.relative_to(out))
        for p in out.rglob("*")
        if p.suffix in suffixes
        and not any(part.startswith(".") for part in p.relative_to(out).parts)
    )


def records(out: Path, name: str) -> list[Any]:
    """A JSON or JSON-lines file, volatile fields dropped, paths made relative to `out`."""
    text = (out / name).read_text().replace(str(out), "OUT")
    rows = text.splitlines() if name.endswith(".jsonl") else [text]
    return [strip(json.loads(row)) for row in rows]


def test_pipeline_killed_at_random_moments_ends_as_an_uninterrupted_run(tmp_path):
    """Three kills at moments drawn from a seeded RNG, on the reference run's clock: in the
    first half of the time between pretraining's two checkpoints (so it resumes from step 3),
    between its last checkpoint and the end of RL, and in the stages after (evaluation,
    vision, the report)."""
    ref, crashed = tmp_path / "ref", tmp_path / "crashed"
    rc, lines = launch(ref)
    assert rc == 0, "\n".join(x for _, x in lines)
    at = anchors(ref, lines)
    last_ckpt = "pretrain/run/checkpoints/step_000006"
    windows = [
        (at[FIRST_CKPT], (at[FIRST_CKPT] + at[last_ckpt]) / 2),
        (at[last_ckpt], at["after"]),
        (at["after"], at["end"]),
    ]
    rng = random.Random(KILL_SEED)
    hits, killed = [], 0
    for lo, hi in windows:
        t = lo + rng.random() * (hi - lo)
        todo = [s for s in STAGES if not (crashed / s / "stage.json").is_file()] or ["vision"]
        anchor = max((a for a in at if a != "end" and at[a] <= t), key=at.get)
        if anchor != FIRST_CKPT and STAGES.index(anchor.split("/")[0]) < STAGES.index(todo[0]):
            anchor, t = todo[0], at[todo[0]] + rng.uniform(0, 0.5)  # passed: the next stage
        elif "/" in anchor and (crashed / anchor).exists():
            anchor = "pretrain"
        rc, lines = launch(crashed, (anchor, t - at[anchor]))
        assert rc in (0, -signal.SIGKILL), "\n".join(x for _, x in lines)
        killed += rc == -signal.SIGKILL
        hits.append(
            f"{t - at[anchor]:.2f} s after {anchor}: "
            + (where(crashed, lines) if rc else "finished first")
        )
    print("\n".join(hits))
    assert killed >= 2, hits
    rc, lines = launch(crashed)
    assert rc == 0, "\n".join(hits + [x for _, x in lines])

    names = files(ref, (".json", ".jsonl"))
    assert files(crashed, (".json", ".jsonl")) == names, hits
    for name in names:  # results.json, every stage.json, metrics, rollouts, checkpoint configs
        if name.endswith("run.json"):
            continue  # the settings, and one machine record per resume
        assert records(crashed, name) == records(ref, name), (name, hits)
    weights = files(ref, (".safetensors",))
    assert {
        "pretrain/run/checkpoints/step_000006/model.safetensors",
        "rl/run/best/model.safetensors",
        "vision/run/checkpoint/vision.safetensors",
        "vision/run/checkpoint/model.safetensors",
    } <= set(weights)
    assert files(crashed, (".safetensors",)) == weights, hits
    for name in weights:
        a, b = load_file(ref / name), load_file(crashed / name)
        assert a.keys() == b.keys(), name
        assert all(torch.equal(a[k], b[k]) for k in a), (name, hits)


class Killed(Exception):
    """The process dying at this point."""


def killed(*args, **kwargs) -> None:
    raise Killed


def test_pretraining_killed_before_its_first_checkpoint_starts_afresh(tmp_path, monkeypatch):
    """Killed after run.json was written but before the first checkpoint: nothing to resume
    from, so the rerun pretrains from step 0 instead of failing on every rerun."""
    out, plan = tmp_path / "p", PipelinePlan.quick(0)
    with monkeypatch.context() as m:
        m.setattr("glmflash.train.pretrain.save_training_state", killed)
        with pytest.raises(Killed):
            Pipeline(out, plan, "cpu", log=lambda _: None, fresh_processes=False).run()
    assert (out / "pretrain/run/run.json").is_file()
    monkeypatch.setattr(Pipeline, "confirm_eval", killed)  # stop once pretraining is done
    with pytest.raises(Killed):
        Pipeline(out, plan, "cpu", log=lambda _: None, fresh_processes=False).run()
    assert json.loads((out / "pretrain/stage.json").read_text())["summary"]["start_step"] == 0


def test_a_kill_while_pruning_checkpoints_leaves_none_half_deleted(tmp_path, monkeypatch):
    """An old checkpoint leaves the list before it is deleted: killed mid-deletion, pretraining
    leaves no half-deleted step_* folder for the checkpoint selection to read."""

    def dies_midway(path, *args, **kwargs) -> None:
        if Path(path).is_dir():
            (Path(path) / "config.json").unlink()
            raise Killed

    monkeypatch.setattr("glmflash.checkpoint.shutil.rmtree", dies_midway)
    cfg = PretrainConfig(
        preset="tiny",
        steps=2,
        batch_size=2,
        seq_len=32,
        eval_every=1,
        ckpt_every=1,
        keep_checkpoints=1,
        eval_batches=1,
        eval_tasks=0,
    )
    with pytest.raises(Killed):
        pretrain(cfg, tmp_path, "cpu", log=lambda _: None)
    assert select_by_dev_loss(tmp_path).name == "step_000002"


def test_a_kill_while_trimming_metrics_loses_no_row(tmp_path, monkeypatch):
    """A resume drops the rows past its checkpoint by writing a new file and renaming it over
    the old one: killed while writing, the old file is whole."""
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3)))

    def dies_writing(self: Path, *args, **kwargs) -> None:
        self.open("w").close()  # truncated, then killed
        raise Killed

    with monkeypatch.context() as m:
        m.setattr(Path, "write_text", dies_writing)
        with pytest.raises(Killed):
            trim_metrics(path, 2)
    assert [r["step"] for r in read_jsonl(path)] == [1, 2, 3]


def test_a_run_resumed_after_its_last_checkpoint_reports_as_the_uninterrupted_one(
    tmp_path, monkeypatch
):
    """Killed after the last checkpoint, before the stage was marked done: the rerun trains no
    step, yet reports the same losses (pretraining) and the same best and last dev scores (RL;
    the last score below the best)."""
    cfg = PretrainConfig(
        preset="tiny",
        steps=2,
        batch_size=2,
        seq_len=32,
        eval_every=2,
        ckpt_every=2,
        eval_batches=1,
        eval_tasks=0,
    )
    whole = pretrain(cfg, tmp_path / "pre", "cpu", log=lambda _: None)
    again = pretrain(cfg, tmp_path / "pre", "cpu", resume=True, log=lambda _: None)
    assert whole["dev_loss"] is not None and again["start_step"] == 2
    assert strip(again) == strip(whole)

    torch.manual_seed(0)
    init = save_model(tmp_path / "init", GLMFlash(model_config("tiny")))
    scores = iter([1.0, 0.5])
    monkeypatch.setattr(
        "glmflash.train.rl.evaluate_tasks", lambda *a, **k: SimpleNamespace(pass_rate=next(scores))
    )
    rl = PipelinePlan.quick(0).rl
    kw = dict(device="cpu", log=lambda _: None, progress=False)
    whole = train_rl(init, tmp_path / "rl", rl, **kw)
    again = train_rl(init, tmp_path / "rl", rl, resume=True, **kw)
    assert whole["best_dev"] == {"group": 0, "dev_pass1": 1.0, "last": 0.5}
    assert strip(again) == strip(whole)


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_kill_between_the_two_renames_of_best_gets_the_old_best_back(tmp_path, monkeypatch):
    """Replacing `best` moves the old folder aside, then renames the new one in: killed
    between the two, no `best` is left. The next reader gets the old one back, complete; the
    dead writer's temporary folder is removed, a live writer's is left alone."""
    old, new = (GLMFlash(model_config("tiny")) for _ in range(2))  # two draws of the init
    save_model(tmp_path / "best", old, best={"dev_pass1": 0.5})
    real_replace, calls = os.replace, []

    def dies_at_the_second_rename(src, dst) -> None:
        calls.append(dst)
        if len(calls) == 2:
            raise Killed
        real_replace(src, dst)

    with monkeypatch.context() as m:
        m.setattr("glmflash.checkpoint.os.replace", dies_at_the_second_rename)
        with pytest.raises(Killed):
            save_model(tmp_path / "best", new, best={"dev_pass1": 0.75})
    assert not (tmp_path / "best").exists()
    pid = dead_pid()
    for path in tmp_path.iterdir():  # as if written by a process now dead
        path.rename(path.with_name(path.name.replace(f"-{os.getpid()}", f"-{pid}")))
    alive = tmp_path / f".best.tmp-{os.getpid()}"
    alive.mkdir()
    assert _best_so_far(tmp_path) == {"dev_pass1": 0.5}
    restored, _ = load_model(tmp_path / "best")
    got, want, other = (m.state_dict() for m in (restored, old, new))
    assert all(torch.equal(got[k], v) for k, v in want.items())
    assert not torch.equal(got["embedding.weight"], other["embedding.weight"])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["best", alive.name])
