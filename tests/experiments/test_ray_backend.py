"""The Ray backend: the same files, the same results and the same resume as the local one."""

from __future__ import annotations

import json

import pytest

from glmflash.experiments.registry import Experiment
from glmflash.experiments.runner import RunnerError, run_experiment, run_path

ray = pytest.importorskip("ray", reason="the ray backend's extra: pip install 'glmflash[ray]'")


def torch_run(config: dict, seed: int) -> dict:
    """A small seeded torch computation: results compare exactly between backends only if
    both run it alike (same seed, one thread)."""
    import torch

    if config.get("fail_seed") == seed:
        raise RuntimeError("deliberate failure")
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(64, 64, generator=g, dtype=torch.float64)
    value = float((a @ a.T).trace() * config["scale"])
    return {"score": value, "threads": torch.get_num_threads()}


def grid(**high) -> Experiment:
    return Experiment(
        name="ray-toy",
        run=torch_run,
        metric="score",
        seeds=(0, 1, 2),
        conditions={"low": {"scale": 1.0}, "high": {"scale": 2.0, **high}},
        comparisons=[("low", "high")],
    )


def records(folder) -> dict[str, dict]:
    """Each run's file without what differs by nature between runs (timing, process)."""
    volatile = {"started", "seconds", "cpu_seconds", "pid", "traceback"}
    return {
        p.name: {k: v for k, v in json.loads(p.read_text()).items() if k not in volatile}
        for p in sorted((folder / "runs").glob("*.json"))
    }


@pytest.fixture(scope="module")
def local_ray():
    """One local instance with 2 CPUs for the module (the runner uses it and leaves it up)."""
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}},
    )
    yield
    ray.shutdown()


def test_ray_backend_writes_what_the_local_backend_writes(tmp_path, local_ray):
    local = run_experiment(grid(fail_seed=2), tmp_path / "local", workers=2, log=lambda _: None)
    on_ray = run_experiment(
        grid(fail_seed=2), tmp_path / "ray", workers=2, log=lambda _: None, backend="ray"
    )
    assert (on_ray.executed, on_ray.failed) == (local.executed, local.failed) == (6, 1)
    assert records(on_ray.folder) == records(local.folder)
    assert len(records(on_ray.folder)) == 6
    assert all(
        r["metrics"]["threads"] == 1 for r in records(on_ray.folder).values() if r["status"] == "ok"
    )
    session = json.loads((on_ray.folder / "experiment.json").read_text())["sessions"][-1]
    assert session["backend"] == "ray" and session["executed"] == 6

    # resume on Ray: only the missing and the failed run are done again
    run_path(on_ray.folder, "low", 1).unlink()
    again = run_experiment(
        grid(fail_seed=2),
        tmp_path / "ray",
        workers=2,
        log=lambda _: None,
        backend="ray",
        resume=True,
    )
    assert (again.executed, again.failed, again.skipped) == (2, 1, 4)
    assert records(again.folder) == records(local.folder)


def test_backend_arguments_are_checked(tmp_path):
    with pytest.raises(RunnerError, match="unknown backend"):
        run_experiment(grid(), tmp_path, backend="slurm", log=lambda _: None)
    with pytest.raises(RunnerError, match="need --backend ray"):
        run_experiment(grid(), tmp_path, address="10.0.0.1:6379", log=lambda _: None)
