"""Stage 2: the worker pool runs programs out of process and judges them by exact type/value."""

import ast
import contextlib
import json
import math
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from glmflash.verify import Case, Task, Verdict, VerifierPool, sandbox, verify, verify_many, worker
from glmflash.verify.sandbox import Malformed, decode, judge, same

DOUBLE = Task("double_abc", (Case((3,), 6), Case((-2,), -4), Case((0,), 0), Case((7,), 14)))
RIGHT = "def double_abc(x):\n    return 2 * x\n"


@pytest.fixture(scope="module")
def pool():
    with VerifierPool(2, timeout=0.5) as p:
        yield p


def returning(expr: str) -> str:
    return f"def f(x):\n    return {expr}\n"


# ---- exact comparison, against an independent reference -------------------------------------


def canonical(v):
    """Reference for `same`: a type-tagged tree, with floats compared by value and NaN unique."""
    t = type(v)
    if t in (list, tuple):
        return (t.__name__, tuple(canonical(x) for x in v))
    if t is dict:
        return ("dict", frozenset((canonical(k), canonical(x)) for k, x in v.items()))
    if t is float and math.isnan(v):
        return ("nan", object())
    if t is float:
        return ("float", v + 0.0)
    return (t.__name__, v)


def random_value(rng, depth=0):
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 0:
        return rng.randint(-3, 3)
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.choice([0.0, -0.0, 1.0, 2.5, math.inf, math.nan])
    if kind == 3:
        return rng.choice(["", "a", "1", "é\ud800"])
    if kind == 4:
        return None
    if kind == 5:
        return rng.choice([2**70, -(2**5000)])
    if kind == 6:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if kind == 7:
        return tuple(random_value(rng, depth + 1) for _ in range(rng.randint(0, 3)))
    return {
        rng.choice([1, True, 1.0, "k", (1,), None]): random_value(rng, depth + 1)
        for _ in range(rng.randint(0, 2))
    }


def mutate(v, rng):
    """A nearby value: same shape with one leaf retyped (1 -> True -> 1.0, list <-> tuple)."""
    t = type(v)
    if t in (list, tuple) and v and rng.random() < 0.7:
        i = rng.randrange(len(v))
        items = list(v)
        items[i] = mutate(items[i], rng)
        return t(items)
    swaps = {
        int: lambda x: float(x) if abs(x) < 2**60 else x + 1,
        bool: int,
        float: lambda x: int(x) if math.isfinite(x) else x,
        list: tuple,
        tuple: list,
        str: lambda x: x + "",
        type(None): lambda x: 0,
        dict: lambda x: {**x},
    }
    return swaps[t](v)


def test_same_matches_the_reference_on_random_values():
    rng = random.Random(0)
    outcomes = set()
    for _ in range(3000):
        a = random_value(rng)
        b = a if rng.random() < 0.3 else mutate(a, rng) if rng.random() < 0.7 else random_value(rng)
        expect = canonical(a) == canonical(b)
        assert same(a, b) is expect and same(b, a) is expect, (a, b)
        outcomes.add(expect)
    assert outcomes == {True, False}


@pytest.mark.parametrize(
    "actual, expected, equal",
    [
        (1, 1, True),
        (True, 1, False),
        (1, True, False),
        (1.0, 1, False),
        (1, 1.0, False),
        ([1], [1], True),
        ((1,), [1], False),
        ([1], (1,), False),
        ([[1, True]], [[1, 1]], False),
        ({"a": 1}, {"a": 1}, True),
        ({True: "a"}, {1: "a"}, False),
        ({1.0: "a"}, {1: "a"}, False),
        (math.nan, math.nan, False),
        (0.0, -0.0, True),
        (None, None, True),
        (None, 0, False),
        ("1", 1, False),
        (2**5000, 2**5000, True),
        ({1, 2}, {1, 2}, False),
    ],
    ids=lambda v: repr(v)[:12],
)
def test_same_is_exact(actual, expected, equal):
    assert same(actual, expected) is equal


def test_encode_decode_round_trip_keeps_exact_types():
    rng = random.Random(1)
    for _ in range(500):
        value = random_value(rng)
        wire = json.loads(json.dumps(worker.encode(value, [10**6])))
        back = decode(wire)
        assert canonical(back) == canonical(value) or "nan" in repr(canonical(value))
        assert type(back) is type(value)


def test_encode_refuses_what_is_not_plain_data():
    class Int(int):
        pass

    cyclic = []
    cyclic.append(cyclic)
    for value in (Int(3), {1, 2}, b"x", object(), cyclic, "x" * 101, [0] * 100):
        with pytest.raises(worker.Refused):
            worker.encode(value, [100])


@pytest.mark.parametrize(
    "tagged",
    [
        ["i"],
        ["i", 3],
        ["q", "1"],
        ["l", "x"],
        ["N", 0],
        ["b", 1],
        ["d", [[["s", "a"]]]],
        ["d", [[["l", []], ["N", None]]]],
        7,
        None,
        ["l", [["i", "zz"]]],
    ],
)
def test_decode_refuses_malformed_values(tagged):
    with pytest.raises((Malformed, ValueError, TypeError)):
        decode(tagged)


# ---- judging replies (what a compromised worker could send) ---------------------------------


def reply(*results):
    return json.dumps(["ok", list(results)]).encode()


@pytest.mark.parametrize(
    "status, data, expected, passed",
    [
        (
            worker.RESULT,
            reply(*[["v", ["i", format(2 * c.args[0], "x")]] for c in DOUBLE.cases]),
            "pass",
            4,
        ),
        (
            worker.RESULT,
            reply(["v", ["i", "6"]], ["v", ["i", "6"]], ["v", ["i", "0"]], ["v", ["i", "e"]]),
            "fail",
            3,
        ),
        (
            worker.RESULT,
            reply(
                ["v", ["i", "6"]],
                ["v", ["i", "-4"]],
                ["v", ["b", False]],
                ["x", "output too large"],
            ),
            "fail",
            2,
        ),
        (
            worker.RESULT,
            reply(
                ["v", ["i", "6"]], ["e", "ZeroDivisionError"], ["v", ["i", "0"]], ["v", ["i", "e"]]
            ),
            "crash",
            3,
        ),
        (worker.RESULT, reply(["v", ["i", "6"]]), "crash", 0),  # too few results
        (worker.RESULT, reply(*[["v", ["i", "6"]]] * 5), "crash", 0),  # too many
        (worker.RESULT, reply(*[["p", ["i", "6"]]] * 4), "crash", 0),  # unknown tag
        (worker.RESULT, reply(*[["v", ["i", "6", "7"]]] * 4), "crash", 0),
        (worker.RESULT, b"not json", "crash", 0),
        (worker.RESULT, b"[" * 100000, "crash", 0),
        (worker.RESULT, json.dumps(["pass", 4]).encode(), "crash", 0),
        (worker.RESULT, json.dumps(["invalid", "does not compile"]).encode(), "invalid", 0),
        (worker.TIMEOUT, b"", "timeout", 0),
        (worker.DIED, b"killed by SIGKILL", "crash", 0),
        (worker.TOO_BIG, b"", "crash", 0),
    ],
)
def test_judge(status, data, expected, passed):
    verdict = judge(DOUBLE, status, data, 1.0)
    assert (verdict.status, verdict.passed, verdict.total) == (expected, passed, 4)


# ---- end to end ---------------------------------------------------------------------------


def test_right_and_wrong(pool):
    assert pool.verify(RIGHT, DOUBLE) == Verdict("pass", 4, 4, "")
    wrong = pool.verify("def double_abc(x):\n    return x * x\n", DOUBLE)
    assert (wrong.status, wrong.passed) == ("fail", 1)  # only 0 * 0 == 2 * 0
    half = pool.verify("def double_abc(x):\n    return 2 * x if x > 0 else x\n", DOUBLE)
    assert (half.status, half.passed) == ("fail", 3)


def test_raising_on_one_case_is_a_crash_that_still_counts_the_others(pool):
    v = pool.verify("def double_abc(x):\n    return 2 * x // (x + 2)\n", DOUBLE)
    assert v.status == "crash" and "ZeroDivisionError" in v.reason and v.passed == 1


@pytest.mark.parametrize(
    "expr, expected, status",
    [
        ("1", 1, "pass"),
        ("True", 1, "fail"),
        ("1", True, "fail"),
        ("1.0", 1, "fail"),
        ("[1]", [1], "pass"),
        ("(1,)", [1], "fail"),
        ("[1]", (1,), "fail"),
        ("(1, [2])", (1, [2]), "pass"),
        ("{'a': [1, None]}", {"a": [1, None]}, "pass"),
        ("{True: 1}", {1: 1}, "fail"),
        ("2 ** 5000", 2**5000, "pass"),
        ("-(2 ** 5000)", 2**5000, "fail"),
        ("float('nan')", math.nan, "fail"),
        ("float('inf')", math.inf, "pass"),
        ("'é' + chr(55296)", "é\ud800", "pass"),
        ("None", None, "pass"),
        ("None", 0, "fail"),
        ("{1, 2}", [1, 2], "fail"),
        ("'x' * 200000", "x", "fail"),
    ],
    ids=lambda v: repr(v)[:16],
)
def test_exact_types_end_to_end(pool, expr, expected, status):
    v = pool.verify(returning(expr), Task("f", (Case((0,), expected),)))
    assert v.status == status, v


def test_many_in_order_over_more_programs_than_workers(pool):
    rng = random.Random(2)
    kinds = {
        "pass": RIGHT,
        "fail": "def double_abc(x):\n    return x + 1\n",
        "invalid": "def double_abc(x):\n    return x.real\n",
        "crash": "def double_abc(x):\n    return 1 // 0\n",
        "timeout": "def double_abc(x):\n    while True:\n        pass\n",
    }
    wanted = [rng.choice(["pass", "fail", "invalid", "crash"]) for _ in range(40)] + ["timeout"]
    rng.shuffle(wanted)
    verdicts = pool.verify_many([kinds[k] for k in wanted], [DOUBLE] * len(wanted))
    assert [v.status for v in verdicts] == wanted
    assert all(v.total == 4 for v in verdicts)


def test_arguments_are_fresh_per_case(pool):
    task = Task("f", (Case(([1, 2],), 3), Case(([1, 2],), 3)))
    source = "def f(xs):\n    xs += [0]\n    return sum(xs) + len(xs) - 3\n"
    assert pool.verify(source, task).status == "pass"


def test_a_worker_killed_while_idle_is_replaced(pool):
    pool.verify(RIGHT, DOUBLE)
    victim = pool._workers[0].process
    victim.kill()
    victim.wait()
    verdicts = pool.verify_many([RIGHT] * 6, [DOUBLE] * 6)
    assert [v.status for v in verdicts] == ["pass"] * 6
    assert all(w.process.poll() is None for w in pool._workers)


def test_a_stuck_worker_meets_the_backstop(monkeypatch):
    monkeypatch.setattr(sandbox, "BACKSTOP_GRACE", 0.3)
    with VerifierPool(1, timeout=0.3) as p:
        p.verify(RIGHT, DOUBLE)
        stuck = p._workers[0].process
        os.kill(stuck.pid, signal.SIGSTOP)
        try:
            v = p.verify(RIGHT, DOUBLE)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stuck.pid, signal.SIGCONT)
        assert v.status == "timeout" and "did not answer" in v.reason
        assert stuck.poll() is not None or stuck.wait(timeout=5) is not None
        assert p.verify(RIGHT, DOUBLE).status == "pass"


def test_close_stops_every_worker():
    p = VerifierPool(2, timeout=0.5)
    assert p.verify(RIGHT, DOUBLE).status == "pass"
    processes = [w.process for w in p._workers]
    p.close()
    assert all(proc.poll() is not None for proc in processes)


def test_default_pool_is_created_once_and_reused():
    assert verify(RIGHT, DOUBLE).status == "pass"
    first = sandbox.default_pool()
    assert [v.status for v in verify_many([RIGHT, "x"], [DOUBLE, DOUBLE])] == ["pass", "invalid"]
    assert sandbox.default_pool() is first


def test_a_worker_that_cannot_start_is_an_error_not_a_verdict(monkeypatch):
    monkeypatch.setattr(sandbox, "WORKER_PATH", "/nonexistent/worker.py")
    with VerifierPool(1, timeout=0.5) as p, pytest.raises(RuntimeError, match="failed to start"):
        p.verify(RIGHT, DOUBLE)


def test_bad_arguments():
    with pytest.raises(ValueError):
        VerifierPool(0)
    with pytest.raises(ValueError):
        VerifierPool(timeout=0)
    with VerifierPool(1) as p:
        with pytest.raises(ValueError):
            p.verify_many([RIGHT], [])
        with pytest.raises(ValueError, match="no cases"):
            p.verify(RIGHT, Task("double_abc", ()))


# ---- determinism, budgets, unicode ----------------------------------------------------------


def test_verdicts_do_not_depend_on_the_worker():
    """Set iteration order of strings follows the hash seed: every worker has the same one, so
    an order-dependent program gets one verdict over 50 runs on 4 workers (replaced midway)."""
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota"]
    order = subprocess.run(
        [sys.executable, "-c", f"print(list(set({words!r})))"],
        env={"PYTHONHASHSEED": worker.HASH_SEED},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    task = Task("f", (Case((0,), ast.literal_eval(order)),))
    source = f"def f(x):\n    return list(set({words!r}))\n"
    with VerifierPool(4, timeout=0.5) as p:
        first = p.verify_many([source] * 25, [task] * 25)
        p._replace(p._workers[0])
        p._replace(p._workers[1])
        second = p.verify_many([source] * 25, [task] * 25)
    assert [v.status for v in first + second] == ["pass"] * 50


def test_the_budget_is_cpu_time_and_the_wall_clock_only_a_backstop(pool):
    """A busy loop is stopped for its CPU time; a program blocked on a lock uses none and runs
    until the wall-clock backstop, WALL_FACTOR times longer."""
    busy = pool.verify("def double_abc(x):\n    while True:\n        pass\n", DOUBLE)
    assert busy.status == "timeout" and busy.reason == "ran past 0.5 s of CPU time"
    with VerifierPool(1, timeout=0.2, _skip_validation=True) as bare:
        loader = (
            "[c for c in ().__class__.__base__.__subclasses__() "
            "if c.__name__ == 'BuiltinImporter'][0]"
        )
        blocked = (
            f"def double_abc(x):\n    lock = {loader}.load_module('_thread')"
            ".allocate_lock()\n    lock.acquire()\n    lock.acquire()\n"
        )
        start = time.monotonic()
        v = bare.verify(blocked, DOUBLE)
        elapsed = time.monotonic() - start
    assert v.status == "timeout" and v.reason == "ran past 0.2 s of wall-clock time"
    assert elapsed >= worker.wall_limit(0.2)


def test_cpu_seconds_reads_the_same_time_as_the_kernel_reports_at_exit():
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nt = time.process_time()\n"
            "while time.process_time() - t < 0.4:\n    pass\n"
            "input()",
        ],
        stdin=subprocess.PIPE,
    )
    deadline = time.monotonic() + 20
    while worker.cpu_seconds(child.pid) < 0.4 and time.monotonic() < deadline:
        time.sleep(0.05)
    seen = worker.cpu_seconds(child.pid)
    child.stdin.close()
    _, _, usage = os.wait4(child.pid, 0)
    child.returncode = 0
    assert 0.4 <= seen <= usage.ru_utime + usage.ru_stime + 0.02


def test_unicode_names_and_named_escapes_compile_in_the_sandbox(pool):
    """Python reads identifiers in NFKC form (fullwidth ｆ is f) and compiles \\N{...} with
    unicodedata, which the worker loads before it drops its privileges."""
    source = (
        "def ｆ(ｘ):\n    ａｌｐｈａ = '\\N{GREEK SMALL LETTER ALPHA}'\n"
        "    return ａｌｐｈａ * ｘ\n"
    )
    assert pool.verify(source, Task("f", (Case((2,), "αα"), Case((0,), "")))).status == "pass"
    with pytest.raises(ValueError, match="not in NFKC form"):
        Task("ｆ", (Case((1,), 1),))


def test_values_nested_past_what_a_reply_can_carry_are_refused():
    deep = []
    for _ in range(worker.MAX_DEPTH + 1):
        deep = [deep]
    Task("f", (Case((deep[0],), deep[0]),))  # exactly at the limit
    with pytest.raises(ValueError, match="nested deeper"):
        Task("f", (Case((0,), deep),))
    with pytest.raises(ValueError, match="nested deeper"):
        Task("f", (Case(([deep],), 0),))
