"""Stage 2 of the verifier: run candidates outside this process and judge what they return.

The trust boundary: expected outputs never leave this process. A pool of warm worker
processes (`worker.py`, started with `python -s -P -S -B`, an environment holding only the
fixed hash seed, stdio on /dev/null, limits on memory, file size and core dumps, root dropped
to 'nobody') receives one message per program: the source, the entry point and the case
arguments. Each program runs in a fresh child forked by its worker, with CPU, process and
descriptor limits, a seccomp allow-list of system calls and an audit hook that refuses open,
import, exec, sockets, fork, kill and every other audited operation. What comes
back is plain data tagged with its exact type; a value that is not plain data (a subclass, an
object with a rigged __eq__) cannot even be sent. Here each case is compared by exact type and
value, so the only way to pass is to return the right values: a child that forges its message
or exits early gains nothing it could not get by returning constants.

The worker enforces the CPU-time budget (the wall clock only as a backstop) and kills the
child's process group; this process keeps a deadline per worker past that backstop and
replaces any worker that overruns it, dies or sends bytes that are not a well-formed reply.
"""

from __future__ import annotations

import atexit
import json
import marshal
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glmflash.verify import worker as wire
from glmflash.verify.task import CheckTask, Task
from glmflash.verify.validate import ALLOWED_BUILTINS, validate

STATUSES = ("pass", "fail", "invalid", "timeout", "crash")
WORKER_PATH = str(Path(wire.__file__).resolve())
BACKSTOP_GRACE = 2.0  # seconds past the worker's own backstop before a silent worker is replaced
MAX_TIMEOUT = 60.0  # seconds of CPU a program may be given
PYTHON_SAFE_PATH = ("-P",) if sys.version_info >= (3, 11) else ()  # no script dir on sys.path


@dataclass(frozen=True)
class Verdict:
    status: str  # one of STATUSES
    passed: int  # cases whose output matched in type and value
    total: int
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "passed": self.passed,
            "total": self.total,
            "reason": self.reason,
        }


class Malformed(ValueError):
    """A reply that is not exactly what an honest worker writes."""


def decode(tagged: Any, depth: int = 0) -> Any:
    """Inverse of worker.encode; refuses any shape that encode does not produce."""
    if depth > wire.MAX_DEPTH + 1 or type(tagged) is not list or len(tagged) != 2:
        raise Malformed("bad value")
    tag, payload = tagged
    if tag == "N" and payload is None:
        return None
    if tag == "b" and type(payload) is bool:
        return payload
    if tag in ("i", "f", "s") and type(payload) is str:
        return int(payload, 16) if tag == "i" else float(payload) if tag == "f" else payload
    if tag in ("l", "t") and type(payload) is list:
        items = [decode(v, depth + 1) for v in payload]
        return items if tag == "l" else tuple(items)
    if tag == "d" and type(payload) is list:
        if any(type(pair) is not list or len(pair) != 2 for pair in payload):
            raise Malformed("bad dict")
        return {decode(k, depth + 1): decode(v, depth + 1) for k, v in payload}
    raise Malformed("bad value")


def _exact_key(key: Any) -> Any:
    """A dict key that also carries its type, so {1: x}, {True: x} and {1.0: x} differ."""
    if type(key) is tuple:
        return (tuple, tuple(map(_exact_key, key)))
    return (type(key), key)


def same(actual: Any, expected: Any) -> bool:
    """Equal in exact type and value, recursively: 1, True, 1.0 differ; NaN equals nothing."""
    kind = type(expected)
    if type(actual) is not kind:
        return False
    if kind is list or kind is tuple:
        return len(actual) == len(expected) and all(map(same, actual, expected))
    if kind is dict:
        keyed = {_exact_key(k): v for k, v in actual.items()}
        return len(keyed) == len(expected) and all(
            _exact_key(k) in keyed and same(keyed[_exact_key(k)], v) for k, v in expected.items()
        )
    return kind in (int, bool, float, str, type(None)) and actual == expected


def judge(task: Task | CheckTask, status: bytes, data: bytes, timeout: float) -> Verdict:
    """Turn a worker's reply into a verdict by checking every case against the task."""
    total = task.total
    if status == wire.TIMEOUT:
        clock = "of wall-clock time" if data == b"wall" else "of CPU time"
        return Verdict("timeout", 0, total, f"ran past {timeout:g} s {clock}")
    if status == wire.DIED:
        return Verdict("crash", 0, total, data.decode("utf-8", "replace")[:100])
    if status != wire.RESULT:
        return Verdict("crash", 0, total, "result message too large")
    try:
        kind, body = json.loads(data)
        if kind in ("invalid", "crash") and type(body) is str:
            return Verdict(kind, 0, total, body[:100])
        if kind != "ok":
            raise Malformed("bad message")
        if isinstance(task, CheckTask):
            return judge_asserts(body, total)
        if type(body) is not list or len(body) != total:
            raise Malformed("bad message")
        outcomes = [(tag, decode(p) if tag == "v" else p) for tag, p in body]
        if any(tag not in ("v", "e", "x") for tag, _ in outcomes):
            raise Malformed("bad case tag")
    except (ValueError, TypeError, RecursionError, MemoryError, OverflowError):
        return Verdict("crash", 0, total, "malformed result")
    passed, first_problem, first_raise = 0, "", ""
    for i, ((tag, value), case) in enumerate(zip(outcomes, task.cases, strict=True)):
        if tag == "v" and same(value, case.expected):
            passed += 1
        elif tag == "e":
            first_raise = first_raise or f"case {i} raised {str(value)[:60]}"
        elif first_problem:
            continue
        elif tag == "v" and type(value) is not type(case.expected):
            first_problem = (
                f"case {i}: returned {type(value).__name__}, "
                f"expected {type(case.expected).__name__}"
            )
        elif tag == "v":
            first_problem = f"case {i}: wrong value"
        else:
            first_problem = f"case {i}: {str(value)[:60]}"
    if first_raise:
        return Verdict("crash", passed, total, first_raise)
    if passed == total:
        return Verdict("pass", passed, total)
    return Verdict("fail", passed, total, first_problem)


def judge_asserts(body: Any, total: int) -> Verdict:
    """A check task's verdict from its report {asserts: [[index, times held, failure]], error}:
    pass needs check() to return, at least one assert to run and none to fail or raise."""
    if (
        type(body) is not dict
        or set(body) != {"asserts", "error"}
        or type(body["error"]) is not str
        or type(body["asserts"]) is not list
    ):
        raise Malformed("bad check report")
    held, failed, raised = set(), "", ""
    for entry in body["asserts"]:
        if (
            type(entry) is not list
            or len(entry) != 3
            or type(entry[0]) is not int
            or not (0 <= entry[0] < total)
            or type(entry[1]) is not int
            or type(entry[2]) is not str
        ):
            raise Malformed("bad assert report")
        index, times, why = entry
        if why.startswith("e:"):
            raised = raised or f"assert {index} raised {why[2:60]}"
        elif why:
            failed = failed or f"assert {index} failed"
        elif times > 0:
            held.add(index)
    if body["error"]:
        return Verdict("crash", len(held), total, f"check raised {body['error'][:60]}")
    if raised:
        return Verdict("crash", len(held), total, raised)
    if failed:
        return Verdict("fail", len(held), total, failed)
    if not held:
        return Verdict("fail", 0, total, "no assert ran")
    return Verdict("pass", len(held), total)


def _arity(task: Task) -> int | None:
    counts = {len(c.args) for c in task.cases}
    return counts.pop() if len(counts) == 1 else None


def default_size() -> int:
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else os.cpu_count() or 1


class _Worker:
    """One warm worker process, the pool's ends of its two pipes, and the job it holds."""

    def __init__(self, config: str):
        request_read, self.request_fd = os.pipe()
        self.reply_fd, reply_write = os.pipe()
        try:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-s",
                    *PYTHON_SAFE_PATH,
                    "-S",
                    "-B",
                    WORKER_PATH,
                    str(request_read),
                    str(reply_write),
                    config,
                ],
                pass_fds=(request_read, reply_write),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env={"PYTHONHASHSEED": wire.HASH_SEED},
                cwd="/",
            )
        finally:
            os.close(request_read)
            os.close(reply_write)
        os.set_blocking(self.reply_fd, False)
        self.buffer = bytearray()
        self.job: tuple[int, int, float, int] | None = None  # (index, seq, deadline, cap)
        self.answered = 0

    def send(self, frame: bytes) -> None:
        view = memoryview(frame)
        while view:
            view = view[os.write(self.request_fd, view) :]

    def receive(self, max_message: int) -> tuple[int, bytes, bytes] | None:
        """Read what is available; return (seq, status, data) once a reply is complete.

        Raises Malformed when the worker closed its pipe or wrote an impossible header.
        """
        try:
            chunk = os.read(self.reply_fd, 1 << 16)
        except BlockingIOError:
            return None
        if not chunk:
            raise Malformed("worker closed its pipe")
        self.buffer += chunk
        if len(self.buffer) < wire.REPLY.size:
            return None
        seq, status, length = wire.REPLY.unpack_from(self.buffer)
        if length > max_message or len(self.buffer) > wire.REPLY.size + length:
            raise Malformed("worker sent an impossible reply")
        if len(self.buffer) < wire.REPLY.size + length:
            return None
        data = bytes(self.buffer[wire.REPLY.size :])
        self.buffer.clear()
        self.answered += 1
        return seq, status, data

    def stop(self) -> None:
        """SIGTERM lets the worker kill its running child's group; SIGKILL if it lingers."""
        for fd in (self.request_fd, self.reply_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.process.poll() is None:
            self.process.terminate()
            self.process.send_signal(signal.SIGCONT)  # in case it was stopped
            try:
                self.process.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class VerifierPool:
    """Validate candidates here, run them in `size` sandboxed workers, judge them here.

    timeout: CPU seconds per program (all its cases), at most MAX_TIMEOUT; memory_mb:
    address-space cap of each worker; max_output: elements plus characters a program may return
    over all cases. Use as a context manager, or call close(). One verify_many runs at a time
    per pool.
    """

    def __init__(
        self,
        size: int | None = None,
        *,
        timeout: float = 1.0,
        memory_mb: int = 512,
        max_output: int = 100_000,
        _skip_validation: bool = False,
    ):
        if (size is not None and size < 1) or memory_mb <= 0 or max_output <= 0:
            raise ValueError("size, memory_mb and max_output must be positive")
        if not 0 < timeout <= MAX_TIMEOUT:  # also refuses NaN
            raise ValueError(f"timeout must be in (0, {MAX_TIMEOUT:g}] seconds, got {timeout}")
        self.size = size or default_size()
        self.timeout = float(timeout)
        self.max_output = max_output
        self.max_payload = memory_mb * (1 << 20) // 8  # the worker holds it twice while reading
        self._config = json.dumps(
            {"memory_mb": memory_mb, "max_output": max_output, "builtins": sorted(ALLOWED_BUILTINS)}
        )
        self._skip_validation = _skip_validation  # tests of the sandbox alone; never in training
        self._workers: list[_Worker] = []
        self._seq = 0
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def verify(self, source: str, task: Task | CheckTask) -> Verdict:
        return self.verify_many([source], [task])[0]

    def verify_many(
        self, sources: Sequence[str], tasks: Sequence[Task | CheckTask]
    ) -> list[Verdict]:
        """Verdicts in the order of `sources`; programs run in parallel over the workers.

        A `Task`'s candidate passes the syntax gate first; a `CheckTask`'s is general Python
        and meets the process layers alone."""
        if len(sources) != len(tasks):
            raise ValueError(f"{len(sources)} sources but {len(tasks)} tasks")
        if os.getpid() != self._pid:
            raise RuntimeError("a VerifierPool cannot be used from a forked process")
        verdicts: list[Verdict | None] = [None] * len(sources)
        jobs: deque[tuple[int, bytes]] = deque()
        for i, (source, task) in enumerate(zip(sources, tasks, strict=True)):
            payload = self.request(task)
            if isinstance(task, CheckTask):
                reason = None if isinstance(source, str) else "source is not a string"
            elif not self._skip_validation:
                reason = validate(source, task.entry_point, _arity(task))
            else:
                reason = None
            if reason:
                verdicts[i] = Verdict("invalid", 0, task.total, reason)
            else:
                jobs.append((i, payload + marshal.dumps(source)))
        if jobs:
            with self._lock:
                self._run(jobs, tasks, verdicts)
        return verdicts  # type: ignore[return-value]

    def request(self, task: Task | CheckTask) -> bytes:
        """The task's part of a request: ("cases", entry point, case arguments) or ("check",
        entry point, instrumented test), checked to be sendable; raises ValueError naming what
        is wrong, so a caller can skip just this task."""
        if isinstance(task, CheckTask):
            request = ("check", task.entry_point, task.instrumented[0])
        elif not task.cases:
            raise ValueError(f"task {task.entry_point!r} has no cases: nothing to verify")
        else:
            request = ("cases", task.entry_point, [list(c.args) for c in task.cases])
        try:
            payload = marshal.dumps(request)
        except ValueError as err:  # an object marshal cannot write, or nesting past its limit
            raise ValueError(
                f"task {task.entry_point!r}: arguments are not plain data ({err})"
            ) from None
        if len(payload) > self.max_payload:
            raise ValueError(
                f"task {task.entry_point!r}: arguments take {len(payload):,} bytes, "
                f"more than the {self.max_payload:,} a worker accepts"
            )
        return payload

    def _run(
        self,
        jobs: deque[tuple[int, bytes]],
        tasks: Sequence[Task | CheckTask],
        verdicts: list[Verdict | None],
    ) -> None:
        while len(self._workers) < self.size:
            self._workers.append(_Worker(self._config))
        idle, busy = list(self._workers), {}
        selector = selectors.DefaultSelector()
        try:
            while jobs or busy:
                while jobs and idle:
                    index, payload = jobs.popleft()
                    worker = self._dispatch(idle.pop(), index, payload, tasks[index].total)
                    busy[worker.reply_fd] = worker
                    selector.register(worker.reply_fd, selectors.EVENT_READ, worker)
                wait = min(w.job[2] for w in busy.values()) - time.monotonic()
                for key, _ in selector.select(max(wait, 0.0)):
                    worker = key.data
                    index, seq, _, cap = worker.job
                    try:
                        reply = worker.receive(cap)
                        if reply is None:
                            continue
                        if reply[0] != seq:
                            raise Malformed("reply to another request")
                        verdicts[index] = judge(tasks[index], reply[1], reply[2], self.timeout)
                    except (Malformed, OSError):
                        self._check_started(worker)
                        verdicts[index] = Verdict(
                            "crash", 0, tasks[index].total, "verifier worker died"
                        )
                        worker = self._replace(worker, selector, busy)
                    else:
                        selector.unregister(worker.reply_fd)
                        del busy[worker.reply_fd]
                    worker.job = None
                    idle.append(worker)
                for worker in [w for w in busy.values() if time.monotonic() > w.job[2]]:
                    index = worker.job[0]
                    verdicts[index] = Verdict(
                        "timeout", 0, tasks[index].total, "worker did not answer in time"
                    )
                    idle.append(self._replace(worker, selector, busy))
        finally:
            for worker in busy.values():  # interrupted: jobs in flight are abandoned
                worker.stop()
                self._workers.remove(worker)
            selector.close()

    def _dispatch(self, worker: _Worker, index: int, payload: bytes, n_cases: int) -> _Worker:
        self._seq += 1
        cap = wire.message_cap(self.max_output, n_cases)
        frame = wire.REQUEST.pack(self._seq, self.timeout, cap, len(payload)) + payload
        try:
            worker.send(frame)
        except OSError:  # it died while idle: start another and send there
            worker = self._replace(worker)
            worker.send(frame)
        deadline = time.monotonic() + wire.wall_limit(self.timeout) + BACKSTOP_GRACE
        worker.job = (index, self._seq, deadline, cap)
        return worker

    @staticmethod
    def _check_started(worker: _Worker) -> None:
        """A worker that exits with an error status before its first answer is broken (bad
        interpreter, missing file), not attacked: a candidate can at most kill it by a signal.
        """
        if worker.answered == 0:
            try:
                code = worker.process.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                return
            if code > 0:
                raise RuntimeError(
                    f"the verifier worker failed to start (exit status {code}): "
                    f"{' '.join(worker.process.args[:5])}"
                )

    def _replace(
        self,
        worker: _Worker,
        selector: selectors.BaseSelector | None = None,
        busy: dict[int, _Worker] | None = None,
    ) -> _Worker:
        if busy is not None and busy.get(worker.reply_fd) is worker:
            selector.unregister(worker.reply_fd)
            del busy[worker.reply_fd]
        worker.stop()
        fresh = _Worker(self._config)
        self._workers[self._workers.index(worker)] = fresh
        return fresh

    def close(self) -> None:
        if os.getpid() != self._pid:
            return  # a forked copy: the workers belong to the parent
        with self._lock:
            for worker in self._workers:
                worker.stop()
            self._workers.clear()

    def __enter__(self) -> VerifierPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


_default_pool: VerifierPool | None = None
_default_lock = threading.Lock()


def default_pool() -> VerifierPool:
    """The pool behind verify() and verify_many(): created on first use, closed at exit."""
    global _default_pool
    with _default_lock:
        if _default_pool is None or _default_pool._pid != os.getpid():
            _default_pool = VerifierPool()
            atexit.register(_default_pool.close)
        return _default_pool


def verify(source: str, task: Task) -> Verdict:
    return default_pool().verify(source, task)


def verify_many(sources: Sequence[str], tasks: Sequence[Task]) -> list[Verdict]:
    return default_pool().verify_many(sources, tasks)
