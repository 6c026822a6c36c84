"""Test-code tasks (HumanEval's kind): instrumentation, judging, and HumanEval's 164 problems
against the sandbox, with plain Python execution as the independent reference."""

import json
import subprocess
import sys

import pytest

from glmflash.verify import VerifierPool, humaneval
from glmflash.verify.sandbox import Malformed, judge_asserts
from glmflash.verify.task import CheckTask

TEST = """
def check(candidate):
    for x in range(5):
        assert candidate(x) == 2 * x
    assert candidate(-1) == -2, "negative"
    assert True
"""


@pytest.fixture(scope="module")
def pool():
    with VerifierPool(2, timeout=3.0) as p:
        yield p


@pytest.mark.parametrize(
    "body, status, passed, reason",
    [
        ("return 2 * x", "pass", 3, ""),
        ("return 2 * x if x >= 0 else x", "fail", 2, "assert 1 failed"),
        ("return x + x if x < 3 else 0", "fail", 2, "assert 0 failed"),
        ("return 2 * x // (x + 1) * (x + 1)", "crash", 1, "assert 1 raised ZeroDivisionError"),
        ("import os\n    return os.getpid()", "fail", 1, "assert 0 failed"),
        ("return open('/etc/passwd').read()", "crash", 1, "assert 0 raised PermissionError"),
    ],
)
def test_each_assert_is_reported_and_judged_here(pool, body, status, passed, reason):
    """A failing assert does not stop the others (assert 2 still counts as held); general
    Python runs (an import of a loaded module), what the sandbox refuses is a crash."""
    v = pool.verify(f"def f(x):\n    {body}\n", CheckTask("f", TEST))
    assert (v.status, v.passed, v.total, v.reason) == (status, passed, 3, reason)


def test_check_that_raises_or_never_asserts():
    with VerifierPool(1, timeout=1.0) as p:
        raising = CheckTask("f", "def check(candidate):\n    candidate(0)\n    assert False\n")
        v = p.verify("def f(x):\n    return 1 // x\n", raising)
        assert (v.status, v.reason) == ("crash", "check raised ZeroDivisionError")
        skipped = CheckTask(
            "f", "def check(candidate):\n    if candidate(0):\n        assert True\n"
        )
        assert p.verify("def f(x):\n    return 0\n", skipped).reason == "no assert ran"


@pytest.mark.parametrize(
    "test, message",
    [
        ("def check(candidate):\n    return 1\n", "has no assert"),
        ("assert True\n", "must define check"),
        ("def check(candidate)\n", "does not parse"),
    ],
)
def test_bad_test_code_is_refused(test, message):
    with pytest.raises(ValueError, match=message):
        CheckTask("f", test)


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"asserts": []},
        {"asserts": [], "error": 1},
        {"asserts": [[0, 1]], "error": ""},
        {"asserts": [[7, 1, ""]], "error": ""},
        {"asserts": [[0, "1", ""]], "error": ""},
        {"asserts": [[True, 1, ""]], "error": ""},
        {"asserts": [[0, 1, ""]], "error": "", "x": 0},
    ],
)
def test_forged_or_broken_reports_are_malformed(body):
    with pytest.raises(Malformed):
        judge_asserts(body, 3)


REFERENCE = """
import json, signal, sys
def alarm(*_):
    raise TimeoutError
signal.signal(signal.SIGALRM, alarm)
out = []
for program, test, entry in json.load(sys.stdin):
    signal.alarm(3)
    try:
        namespace = {}
        exec(program + "\\n" + test + "\\ncheck(" + entry + ")\\n", namespace)
        out.append(True)
    except BaseException:
        out.append(False)
    finally:
        signal.alarm(0)
print(json.dumps(out))
"""


def reference_passes(sources, tasks):
    """HumanEval's own way, in a plain interpreter: program, test and check() in one namespace;
    a program passes when nothing raises (within 3 s)."""
    items = [(s, t.test, t.entry_point) for s, t in zip(sources, tasks, strict=True)]
    out = subprocess.run(
        [sys.executable, "-c", REFERENCE],
        input=json.dumps(items),
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    return json.loads(out.splitlines()[-1])


def test_humaneval_canonical_pass_and_pass_bodies_fail(pool):
    for mode, expected in (("canonical", "pass"), ("empty", None)):
        sources, tasks, labels = humaneval.programs(mode)
        assert len(sources) == 164
        verdicts = pool.verify_many(sources, tasks)
        wrong = [
            lab
            for lab, v in zip(labels, verdicts, strict=True)
            if (v.status == "pass") != bool(expected)
        ]
        assert wrong == [], mode


def test_humaneval_mutants_agree_with_plain_python(pool):
    """Every mutant gets the sandbox verdict pass exactly when plain execution passes it; most
    fail (the rest survive HumanEval's own asserts, which the reference confirms)."""
    sources, tasks, labels = humaneval.programs("mutated")
    assert len(sources) > 200
    sandboxed = [v.status == "pass" for v in pool.verify_many(sources, tasks)]
    reference = reference_passes(sources, tasks)
    assert [lab for lab, a, b in zip(labels, sandboxed, reference, strict=True) if a != b] == []
    assert sum(sandboxed) < 0.2 * len(sources)


def test_mutants_change_the_entry_function_once():
    program = "def g(a):\n    return a - 1\n\ndef f(x):\n    return g(x) + 2 < 5\n"
    assert humaneval.mutants(program, "f") == [
        "def g(a):\n    return a - 1\n\ndef f(x):\n    return g(x) + 2 <= 5\n",
        "def g(a):\n    return a - 1\n\ndef f(x):\n    return g(x) + 2 < 6\n",
    ]
