"""Verifier throughput: the sandboxed pool against in-process exec and a process per program.

The mix is what RL produces: short functions of the eight families, right or wrong, plus
hostile programs that finish (rejected at validation, raising, recursing, wrong type). The
in-process baseline (validate, exec, call, compare; the reference lab's verifier) cannot be
run on hanging programs at all: one `while True` stops it for good. `ratios` are our
speed / baseline speed.
"""

from __future__ import annotations

import builtins
import json
import random
import subprocess
import sys
import time
from typing import Any

from glmflash.verify.sandbox import VerifierPool, default_size, same
from glmflash.verify.task import Case, Task
from glmflash.verify.validate import ALLOWED_BUILTINS, validate

# family: (argument kind, correct body, wrong body, reference function)
FAMILIES: dict[str, tuple[str, str, str, Any]] = {
    "increment": ("int", "return x + 1", "return x + 2", lambda x: x + 1),
    "double": ("int", "return 2 * x", "return x * x", lambda x: 2 * x),
    "square": ("int", "return x * x", "return 2 * x", lambda x: x * x),
    "absolute": ("int", "return abs(x)", "return x", abs),
    "nonnegative": ("int", "return x >= 0", "return x > 0", lambda x: x >= 0),
    "even": ("int", "return x % 2 == 0", "return x % 2", lambda x: x % 2 == 0),
    "reverse": ("str", "return x[::-1]", "return x", lambda x: x[::-1]),
    "list_sum": ("list", "return sum(x)", "return len(x)", sum),
}
HOSTILE = [  # each finishes quickly and never passes
    "import os\n",
    "def {name}(x):\n    return x.__class__\n",
    "def {name}(x):\n    return {name}(x)\n",
    "def {name}(x):\n    return 1 // (x - x)\n",
    "def {name}(x):\n    return True\n",
    "def {name}(x):\n    return eval('x')\n",
]
HANGS = [
    "def {name}(x):\n    while True:\n        pass\n",
    "def {name}(x):\n    return 9 ** 9 ** 9\n",
]


def _argument(kind: str, rng: random.Random) -> Any:
    if kind == "int":
        return rng.randint(-50, 50)
    if kind == "str":
        return "".join(rng.choice("abcdefgh") for _ in range(rng.randint(0, 8)))
    return [rng.randint(-9, 9) for _ in range(rng.randint(0, 6))]


def program_mix(n: int, hang_fraction: float = 0.0, seed: int = 0) -> tuple[list[str], list[Task]]:
    """n (source, task) pairs: 45% correct, 40% wrong, 15% hostile, `hang_fraction` hanging."""
    rng = random.Random(seed)
    n_hang = round(n * hang_fraction)
    hang_at = set(rng.sample(range(n), n_hang))
    sources, tasks = [], []
    for i in range(n):
        family = rng.choice(sorted(FAMILIES))
        kind, right, wrong, reference = FAMILIES[family]
        name = f"{family}_{rng.randrange(16**6):06x}"
        args = [_argument(kind, rng) for _ in range(8)]
        tasks.append(Task(name, tuple(Case((a,), reference(a)) for a in args)))
        draw = rng.random()
        if i in hang_at:
            template = rng.choice(HANGS)
        elif draw < 0.45:
            template = "def {name}(x):\n    " + right + "\n"
        elif draw < 0.85:
            template = "def {name}(x):\n    " + wrong + "\n"
        else:
            template = rng.choice(HOSTILE)
        sources.append(template.format(name=name))
    return sources, tasks


def inprocess_passes(sources: list[str], tasks: list[Task]) -> list[bool]:
    """The baseline: validate, exec in this process with restricted builtins, compare."""
    safe = {name: getattr(builtins, name) for name in ALLOWED_BUILTINS}
    passes = []
    for source, task in zip(sources, tasks, strict=True):
        ok = False
        if validate(source, task.entry_point, 1) is None:
            namespace = {"__builtins__": dict(safe)}
            try:
                exec(compile(source, "<candidate>", "exec"), namespace)
                function = namespace[task.entry_point]
                ok = all(same(function(*c.args), c.expected) for c in task.cases)
            except Exception:
                ok = False
        passes.append(ok)
    return passes


FRESH_RUNNER = (
    "import json, sys\nd = json.load(sys.stdin)\nns = {}\nexec(d['source'], ns)\n"
    "print(json.dumps([repr(ns[d['entry']](*a)) for a in d['args']]))\n"
)


def fresh_process_rate(sources: list[str], tasks: list[Task], timeout: float) -> float:
    """Programs/s when each program gets its own new interpreter (no warm workers)."""
    start = time.perf_counter()
    for source, task in zip(sources, tasks, strict=True):
        message = json.dumps(
            {
                "source": source,
                "entry": task.entry_point,
                "args": [list(c.args) for c in task.cases],
            }
        )
        try:
            subprocess.run(
                [sys.executable, "-I", "-S", "-c", FRESH_RUNNER],
                input=message,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            pass
    return len(sources) / (time.perf_counter() - start)


def bench_verify(
    n_programs: int = 600,
    hang_fraction: float = 0.02,
    timeout: float = 1.0,
    workers: int | None = None,
    n_fresh: int = 40,
    seed: int = 0,
) -> dict[str, Any]:
    """Programs verified per second on the mix, without and with hanging programs."""
    workers = workers or default_size()
    sources, tasks = program_mix(n_programs, 0.0, seed)
    hang_sources, hang_tasks = program_mix(n_programs, hang_fraction, seed + 1)

    start = time.perf_counter()
    baseline = inprocess_passes(sources, tasks)
    inprocess = n_programs / (time.perf_counter() - start)

    with VerifierPool(workers, timeout=timeout) as pool:
        pool.verify_many(sources[:workers], tasks[:workers])  # start the workers
        start = time.perf_counter()
        verdicts = pool.verify_many(sources, tasks)
        sandboxed = n_programs / (time.perf_counter() - start)
        start = time.perf_counter()
        hang_verdicts = pool.verify_many(hang_sources, hang_tasks)
        with_hangs = n_programs / (time.perf_counter() - start)

    fresh = fresh_process_rate(sources[:n_fresh], tasks[:n_fresh], timeout) if n_fresh else None
    statuses: dict[str, int] = {}
    for v in verdicts:
        statuses[v.status] = statuses.get(v.status, 0) + 1
    return {
        "n_programs": n_programs,
        "workers": workers,
        "timeout_s": timeout,
        "hanging_programs": sum(v.status == "timeout" for v in hang_verdicts),
        "statuses": statuses,
        "agrees_with_inprocess": sum(
            (v.status == "pass") == ok for v, ok in zip(verdicts, baseline, strict=True)
        ),
        "sandboxed_programs_per_s": sandboxed,
        "sandboxed_with_hangs_programs_per_s": with_hangs,
        "inprocess_programs_per_s": inprocess,
        "inprocess_with_hangs_programs_per_s": 0.0,  # never returns from the first hang
        "fresh_process_programs_per_s": fresh,
        "ratios": {
            "sandboxed_vs_inprocess": sandboxed / inprocess,
            "sandboxed_with_hangs_vs_inprocess": with_hangs / inprocess,
            **({"sandboxed_vs_fresh_process": sandboxed / fresh} if fresh else {}),
        },
    }
