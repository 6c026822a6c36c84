"""Running an experiment's grid: every (condition, seed) once, in parallel, resumably.

    OUT/NAME/experiment.json                 the definition, the seeds run, one entry per session
    OUT/NAME/runs/<condition>__seed<k>.json  one finished run: configuration, seed, status,
                                             metrics (with learning curves), timing

Each run is a pure function (configuration, seed) -> metrics, so runs are independent and
their order does not matter. Backend "local": they execute in worker processes started by
`spawn` (a fresh interpreter: no state inherited from the parent), each limited to one
thread, so N workers use N cores and the numbers do not depend on N; a worker writes its run's
file atomically (a temporary file, then a rename), so a run's file exists only when the run is
complete. Backend "ray": each run is a Ray task with one CPU (and GPUs if asked) on a local
Ray instance or a cluster (`address`); the task returns its record and this process writes
the same file, so the folder, --resume and the results are those of the local backend. An
exception inside a run is recorded in its file (status "error", with the traceback) and the
other runs go on; --resume skips the runs that finished with status "ok" and retries the rest.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import math
import multiprocessing
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from glmflash.experiments.registry import Experiment, RunFn
from glmflash.processes import die_with_parent
from glmflash.progress import Progress

DEFINITION = "experiment.json"
RUNS = "runs"
TENSORBOARD = "tensorboard"  # OUT/NAME/tensorboard/<condition>__seed<k>/: each run's curves
BACKENDS = ("local", "ray")
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class RunnerError(RuntimeError):
    """A problem with the output folder or the grid, for the user to fix."""


@dataclass(frozen=True)
class Job:
    condition: str
    seed: int
    config: dict[str, Any]
    path: Path


@dataclass(frozen=True)
class Summary:
    folder: Path
    executed: int
    failed: int
    skipped: int
    wall_seconds: float


def run_path(folder: Path, condition: str, seed: int) -> Path:
    return folder / RUNS / f"{condition}__seed{seed}.json"


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to a temporary file in the same folder, then rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_run(path: Path) -> dict[str, Any] | None:
    """A saved run, or None when the file is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _check_metrics(metrics: Any, metric: str) -> None:
    if not isinstance(metrics, dict):
        raise TypeError(f"a run must return a dict of metrics, got {type(metrics).__name__}")
    value = metrics.get(metric)
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(
            f"the run's primary metric {metric!r} is missing or not a finite number: {value!r}"
        )
    json.dumps(metrics, allow_nan=False)  # must be storable as it is


def run_job(run: RunFn, experiment: str, metric: str, job: Job) -> dict[str, Any]:
    """Run one job and return its record; exceptions become status "error"."""
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t0, c0 = time.perf_counter(), time.process_time()
    record: dict[str, Any] = {
        "experiment": experiment,
        "condition": job.condition,
        "seed": job.seed,
        "config": job.config,
    }
    _one_thread()  # the run's module (imported to unpickle `run`) may have loaded torch
    try:
        metrics = run(dict(job.config), job.seed)
        _check_metrics(metrics, metric)
        record.update(status="ok", metrics=metrics)
    except Exception as e:  # a failed run is data: record it and let the others go on
        record.update(
            status="error", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()
        )
    record.update(
        started=started,
        seconds=time.perf_counter() - t0,
        cpu_seconds=time.process_time() - c0,
        pid=os.getpid(),
    )
    return record


def save_record(job: Job, record: dict[str, Any]) -> None:
    """The run's file, and its curves as TensorBoard events under OUT/NAME/tensorboard/."""
    from glmflash.train.tensorboard import write_curves

    write_json_atomic(job.path, record)
    if record["status"] == "ok":
        write_curves(job.path.parent.parent / TENSORBOARD / job.path.stem, record["metrics"])


def execute(run: RunFn, experiment: str, metric: str, job: Job) -> dict[str, Any]:
    """Run one job and save its record atomically (in the worker that ran it)."""
    record = run_job(run, experiment, metric, job)
    save_record(job, record)
    return record


def _one_thread() -> None:
    """torch, if loaded, on one thread: N workers then use N cores, and no result depends
    on N (the order of floating-point reductions follows the thread count)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def _worker_init(parent: int) -> None:
    """Worker initializer: one thread for the native libraries that are imported later too;
    the worker dies with its parent (no orphan writing into the experiment's folder)."""
    die_with_parent(parent)
    os.environ.update(ONE_THREAD)
    _one_thread()


def _run_on_ray(
    experiment: Experiment,
    jobs: list[Job],
    workers: int,
    address: str | None,
    gpus_per_run: float,
    done: Callable[[dict[str, Any]], None],
    lost: list[Job],
) -> None:
    """Each job a Ray task (one CPU, `gpus_per_run` GPUs); records are written here as the
    tasks finish. Without `address`, a local instance with `workers` CPUs is started."""
    try:
        import ray
    except ImportError:
        raise RunnerError("the ray backend needs ray: pip install 'glmflash[ray]'") from None
    module = sys.modules.get(getattr(experiment.run, "__module__", ""))
    if module is not None and not module.__name__.startswith("glmflash."):
        ray.cloudpickle.register_pickle_by_value(module)  # a user's file: workers can't import it
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(
            address=address,
            num_cpus=None if address else workers,
            include_dashboard=False,
            log_to_driver=False,
            runtime_env={"env_vars": ONE_THREAD},
        )
    try:
        task = ray.remote(num_cpus=1, num_gpus=gpus_per_run, max_retries=0)(run_job)
        pending = {
            task.remote(experiment.run, experiment.name, experiment.metric, job): job
            for job in jobs
        }
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            job = pending.pop(ready[0])
            try:
                record = ray.get(ready[0])
            except ray.exceptions.RayError:  # the worker died: like a broken process pool
                lost.append(job)
                continue
            save_record(job, record)
            done(record)
    finally:
        if started_here:
            ray.shutdown()


def plan(
    experiment: Experiment,
    folder: Path,
    seeds: tuple[int, ...],
    quick: bool,
    resume: bool,
    overrides: dict[str, Any] | None = None,
) -> tuple[list[Job], int]:
    """The jobs still to run (seed-major, so paired runs finish together) and how many
    finished runs are skipped. Refuses to mix settings or to overwrite without --resume."""
    runs = folder / RUNS
    existing = sorted(runs.glob("*.json")) if runs.is_dir() else []
    if existing and not resume:
        raise RunnerError(
            f"{folder} already holds {len(existing)} run(s); pass --resume to "
            f"continue it or choose another --out"
        )
    jobs, skipped = [], 0
    for seed in seeds:
        for condition in experiment.conditions:
            config = experiment.condition_config(condition, quick, overrides)
            try:  # as it will read back from the run's file (tuples become lists)
                config = json.loads(json.dumps(config, allow_nan=False))
            except (TypeError, ValueError) as e:
                raise RunnerError(f"condition {condition!r} must be JSON data: {e}") from None
            job = Job(condition, seed, config, run_path(folder, condition, seed))
            saved = read_run(job.path)
            if saved is not None and saved.get("config") != job.config:
                raise RunnerError(
                    f"{job.path} was run with other settings "
                    f"({saved.get('config')}, now {job.config}); choose another "
                    f"--out"
                )
            if saved is not None and saved.get("status") == "ok":
                skipped += 1
            else:
                jobs.append(job)
    return jobs, skipped


def _start_session(
    folder: Path,
    experiment: Experiment,
    seeds: tuple[int, ...],
    quick: bool,
    session: dict[str, Any],
) -> None:
    """Write the definition, the union of the seeds run so far, and this session's entry."""
    path = folder / DEFINITION
    old = read_run(path) or {}
    write_json_atomic(
        path,
        {
            **experiment.describe(),
            "quick": quick,
            "seeds": sorted(set(old.get("seeds", [])) | set(seeds)),
            "sessions": [*old.get("sessions", []), session],
        },
    )


def _end_session(folder: Path, started: str, figures: dict[str, Any]) -> None:
    path = folder / DEFINITION
    data = read_run(path)
    if data is not None:
        for session in data["sessions"]:
            if session["started"] == started:
                session.update(figures)
        write_json_atomic(path, data)


def _check_backend(workers: int, backend: str, address: str | None, gpus_per_run: float) -> None:
    if workers < 1:
        raise RunnerError(f"--workers must be at least 1, got {workers}")
    if backend not in BACKENDS:
        raise RunnerError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    if backend == "local" and (address is not None or gpus_per_run):
        raise RunnerError("--address and --gpus-per-run need --backend ray")
    if gpus_per_run < 0:
        raise RunnerError(f"--gpus-per-run must be >= 0, got {gpus_per_run}")


def _run_here(experiment: Experiment, jobs: list[Job], done: Callable[[dict], None]) -> None:
    """The runs one after another in this process; its torch thread count is restored after."""
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    try:
        for job in jobs:
            done(execute(experiment.run, experiment.name, experiment.metric, job))
    finally:
        if threads is not None:
            torch.set_num_threads(threads)


def _run_in_processes(
    experiment: Experiment,
    jobs: list[Job],
    workers: int,
    done: Callable[[dict], None],
    lost: list[Job],
) -> None:
    """The runs in `workers` spawned processes; the jobs of a pool that broke (a worker killed)
    go to `lost`."""
    context = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(
        workers, mp_context=context, initializer=_worker_init, initargs=(os.getpid(),)
    ) as pool:
        futures = {
            pool.submit(execute, experiment.run, experiment.name, experiment.metric, job): job
            for job in jobs
        }
        try:
            for future in cf.as_completed(futures):
                try:
                    done(future.result())
                except cf.process.BrokenProcessPool:
                    lost.append(futures[future])
        except KeyboardInterrupt:
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def _tally(
    experiment: Experiment,
    counts: dict[str, int],
    show: Callable[..., None],
    log: Callable[[str], None],
) -> Callable[[dict[str, Any]], None]:
    """What happens as each run's record comes back: counted (executed, failed), a failure
    logged with its error, the progress line shown with the run's metric."""

    def done(record: dict[str, Any]) -> None:
        counts["executed"] += 1
        figures: dict[str, Any] = {
            "last": f"{record['condition']}/seed{record['seed']}",
            "s": float(record["seconds"]),
        }
        if record["status"] == "ok":
            figures[experiment.metric] = float(record["metrics"][experiment.metric])
        else:
            counts["failed"] += 1
            log(
                f"{experiment.name}: run {record['condition']} seed {record['seed']} failed: "
                f"{record['error']}"
            )
        show(**figures)

    return done


def run_experiment(
    experiment: Experiment,
    out: str | Path,
    seeds: tuple[int, ...] | None = None,
    workers: int = 1,
    resume: bool = False,
    quick: bool = False,
    overrides: dict[str, Any] | None = None,
    log: Callable[[str], None] | None = None,
    backend: str = "local",
    address: str | None = None,
    gpus_per_run: float = 0.0,
) -> Summary:
    """Run the grid of `experiment` into OUT/NAME. Backend "local": with workers == 1 the runs
    execute in this process (one thread, as in a worker); otherwise in `workers` spawned
    processes. Backend "ray": as Ray tasks, on a cluster at `address` or on a local instance
    with `workers` CPUs. `overrides` replace settings of every condition (--set KEY=VALUE).
    One piece on purpose: plan, session record, runs and summary, in the order they happen."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    _check_backend(workers, backend, address, gpus_per_run)
    seeds = (
        tuple(seeds)
        if seeds is not None
        else (experiment.quick_seeds if quick else experiment.seeds)
    )
    if not seeds or len(set(seeds)) != len(seeds):
        raise RunnerError(f"seeds must be distinct and non-empty, got {seeds}")
    folder = Path(out) / experiment.name
    jobs, skipped = plan(experiment, folder, seeds, quick, resume, overrides)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    session = {"started": started, "workers": workers, "backend": backend}
    _start_session(
        folder, experiment, seeds, quick, {**session, "planned": len(jobs), "skipped": skipped}
    )
    total = len(jobs) + skipped
    log(
        f"{experiment.name}: {len(jobs)} run(s) to do, {skipped} already finished, "
        f"{len(experiment.conditions)} condition(s) x {len(seeds)} seed(s), "
        + (
            f"on Ray ({address or f'local, {workers} CPUs'})"
            if backend == "ray"
            else f"{workers} worker(s)"
        )
    )
    progress = Progress(total, skipped, unit="run", desc=experiment.name, every_s=0.0)
    counts = {"executed": 0, "failed": 0}
    lost: list[Job] = []
    t0 = time.perf_counter()
    done = _tally(
        experiment, counts, lambda **fig: progress.update(skipped + counts["executed"], **fig), log
    )

    try:
        if backend == "ray" and jobs:
            _run_on_ray(experiment, jobs, workers, address, gpus_per_run, done, lost)
        elif workers == 1 and backend == "local":
            _run_here(experiment, jobs, done)
        elif jobs and backend == "local":
            _run_in_processes(experiment, jobs, workers, done, lost)
    finally:
        progress.close()
        wall = time.perf_counter() - t0
        _end_session(folder, started, {**counts, "wall_seconds": wall})
    if lost:
        raise RunnerError(
            f"a worker process died (killed, or out of memory) while "
            f"{len(lost)} run(s) were pending, e.g. {lost[0].condition} seed "
            f"{lost[0].seed}; rerun with --resume to finish them"
        )
    log(
        f"{experiment.name}: {counts['executed']} run(s) in {wall:.1f} s, {counts['failed']} "
        f"failed, {skipped} skipped -> {folder}"
    )
    return Summary(folder, counts["executed"], counts["failed"], skipped, wall)
