"""`glmflash verify`: single-file and JSON-lines modes, outputs in order, errors as CLIError."""

import argparse
import json
import subprocess
import sys

import pytest

from glmflash.cli import CLIError
from glmflash.commands import verify as command

TASK = {
    "entry_point": "double_abc",
    "cases": [{"args": [3], "expected": 6}, {"args": [-1], "expected": -2}],
}
RIGHT = "def double_abc(x):\n    return 2 * x\n"
WRONG = "def double_abc(x):\n    return x + 3\n"


def run(*argv, timeout: str = "0.5"):
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    return command.run(parser.parse_args(["--timeout", timeout, "--workers", "1", *argv]))


@pytest.fixture
def files(tmp_path):
    (tmp_path / "task.json").write_text(json.dumps(TASK))
    (tmp_path / "right.py").write_text(RIGHT)
    (tmp_path / "wrong.py").write_text(WRONG)
    return tmp_path


def test_single_program(files, capsys):
    task = str(files / "task.json")
    assert run("--task-json", task, "--source-file", str(files / "right.py")) == 0
    assert capsys.readouterr().out == "pass 2/2\n"
    assert (
        run(
            "--task-json",
            str(files / "task.json"),
            "--source-file",
            str(files / "wrong.py"),
            "--json",
        )
        == 1
    )
    assert json.loads(capsys.readouterr().out) == {
        "status": "fail",
        "passed": 1,
        "total": 2,
        "reason": "case 1: wrong value",
    }


def test_jsonl_prints_one_verdict_a_line_in_order(files, capsys):
    sources = [
        RIGHT,
        "import os\n",
        WRONG,
        "def double_abc(x):\n    while True:\n        pass\n",
        RIGHT,
    ]
    lines = [json.dumps({"source": s, "task": TASK}) for s in sources]
    lines.insert(2, "")  # blank lines are skipped
    (files / "many.jsonl").write_text("\n".join(lines) + "\n")
    assert run("--jsonl", str(files / "many.jsonl")) == 1
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [o["status"] for o in out] == ["pass", "invalid", "fail", "timeout", "pass"]
    assert all(set(o) == {"status", "passed", "total", "reason"} and o["total"] == 2 for o in out)
    assert [o["passed"] for o in out] == [2, 0, 1, 0, 2]


@pytest.mark.parametrize(
    "content, fragment",
    [
        ("{not json}\n", "many.jsonl:2: invalid JSON"),
        (
            '{"source": "x", "task": {"entry_point": "f", "cases": []}}\n',
            "many.jsonl:2: task 'cases'",
        ),
        ('{"source": "x", "task": {"entry_point": "f"}}\n', "many.jsonl:2: task 'cases'"),
        ('{"task": ' + json.dumps(TASK) + "}\n", "many.jsonl:2: expected an object"),
        ("[1, 2]\n", "many.jsonl:2: expected an object"),
        (
            '{"source": "x", "task": {"entry_point": "1f", '
            '"cases": [{"args": [1], "expected": 1}]}}\n',
            "many.jsonl:2: task 'entry_point'",
        ),
        (
            '{"source": "x", "task": {"entry_point": "\\uff46", '
            '"cases": [{"args": [1], "expected": 1}]}}\n',
            "many.jsonl:2: task 'entry_point' 'ｆ' is not in NFKC form",
        ),
        (
            '{"source": "x", "task": {"entry_point": "f", "cases": [{"args": ['
            + "[" * 2000
            + "]" * 2000
            + '], "expected": 1}]}}\n',
            "many.jsonl:2: JSON nested too deeply",
        ),
        (
            '{"source": "x", "task": {"entry_point": "f", "cases": [{"args": ['
            + "[" * 40
            + "]" * 40
            + '], "expected": 1}]}}\n',
            "many.jsonl:2: task case 0: a value is nested deeper than 32",
        ),
        (
            '{"source": "x", "task": {"entry_point": "f", "cases": [{"args": [1], "expected": '
            + "9" * 5000
            + "}]}}\n",
            "many.jsonl:2: Exceeds the limit",
        ),
    ],
)
def test_a_bad_record_is_reported_in_place_and_the_rest_are_judged(
    files, capsys, content, fragment
):
    good = json.dumps({"source": RIGHT, "task": TASK}) + "\n"
    (files / "many.jsonl").write_text(good + content + good, encoding="utf-8")
    assert run("--jsonl", str(files / "many.jsonl")) == 2
    captured = capsys.readouterr()
    first, bad, last = [json.loads(line) for line in captured.out.splitlines()]
    assert first["status"] == last["status"] == "pass"
    assert bad["line"] == 2 and bad["error"].split("/")[-1].startswith(fragment)
    assert captured.err.count("\n") == 1 and fragment in captured.err


def test_json_lines_split_on_newline_only(files, capsys):
    """U+0085, U+2028 and U+2029 are line breaks to str.splitlines, plain characters to JSON."""
    task = {"entry_point": "f", "cases": [{"args": ["a\x85b\u2028c\u2029"], "expected": 6}]}
    line = json.dumps(
        {"source": "def f(s):\n    return len(s)\n", "task": task}, ensure_ascii=False
    )
    assert "\u2028" in line
    (files / "many.jsonl").write_text(line + "\n", encoding="utf-8")
    assert run("--jsonl", str(files / "many.jsonl")) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "pass"


@pytest.mark.parametrize("value", ["nan", "inf", "1e308", "0", "-1"])
def test_timeout_must_be_a_finite_positive_number(files, value):
    with pytest.raises(CLIError, match="--timeout must be in"):
        run(
            "--task-json",
            str(files / "task.json"),
            "--source-file",
            str(files / "right.py"),
            "--timeout",
            value,
        )


def test_many_cases_and_large_outputs_are_judged_not_crashed(files, capsys):
    """100,000 cases (one output unit each: the whole budget), and an output inside the
    budget whose JSON is long (48,000 floats of 18-digit repr). The CPU budget is generous:
    the test is about the size of the messages, not the speed of a slow core."""
    many = {"entry_point": "f", "cases": [{"args": [i], "expected": i % 2} for i in range(100_000)]}
    floats = {"entry_point": "f", "cases": [{"args": [0], "expected": []}]}
    lines = [
        {"source": "def f(x):\n    return x % 2\n", "task": many},
        {"source": "def f(x):\n    return [x - 1 / 3] * 48000\n", "task": floats},
    ]
    (files / "many.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    assert run("--jsonl", str(files / "many.jsonl"), timeout="10") == 1
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert out[0] == {"status": "pass", "passed": 100_000, "total": 100_000, "reason": ""}
    assert out[1] == {"status": "fail", "passed": 0, "total": 1, "reason": "case 0: wrong value"}


def test_an_argument_too_big_for_a_worker_is_bad_input(files, capsys, monkeypatch):
    """The cap scales with the worker's memory; a small cap stands in for a 300 MB argument."""
    request = command.VerifierPool.request

    def capped(pool, task):
        pool.max_payload = 10_000
        return request(pool, task)

    monkeypatch.setattr(command.VerifierPool, "request", capped)
    big = {"entry_point": "double_abc", "cases": [{"args": ["x" * 20_000], "expected": 1}]}
    lines = [{"source": RIGHT, "task": big}, {"source": RIGHT, "task": TASK}]
    (files / "many.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    assert run("--jsonl", str(files / "many.jsonl")) == 2
    bad, good = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert "more than the 10,000 a worker accepts" in bad["error"] and good["status"] == "pass"


def test_a_failing_verifier_exits_3(files, capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("the verifier worker failed to start (exit status 1)")

    monkeypatch.setattr(command.VerifierPool, "verify_many", broken)
    assert (
        run("--task-json", str(files / "task.json"), "--source-file", str(files / "right.py")) == 3
    )
    assert "the verifier failed" in capsys.readouterr().err


def test_malformed_task_file_and_usage_errors(files):
    (files / "bad.json").write_text('{"entry_point": "double_abc",\n "cases": [}')
    with pytest.raises(CLIError, match=r"bad.json:2: invalid JSON"):
        run("--task-json", str(files / "bad.json"), "--source-file", str(files / "right.py"))
    (files / "nocases.json").write_text('{"entry_point": "double_abc", "cases": []}')
    with pytest.raises(CLIError, match=r"nocases.json: task 'cases'"):
        run("--task-json", str(files / "nocases.json"), "--source-file", str(files / "right.py"))
    with pytest.raises(CLIError, match="cannot read"):
        run("--task-json", str(files / "missing.json"), "--source-file", str(files / "right.py"))
    with pytest.raises(CLIError, match="give --jsonl"):
        run("--task-json", str(files / "task.json"))
    with pytest.raises(CLIError, match="not both"):
        run("--jsonl", str(files / "task.json"), "--task-json", str(files / "task.json"))


def test_verify_starts_without_torch(files):
    """Only the chosen command's module is imported: judging a program never loads torch."""
    code = (
        "import sys; from glmflash.cli import main; "
        f"status = main(['verify', '--task-json', {str(files / 'task.json')!r}, "
        f"'--source-file', {str(files / 'right.py')!r}]); "
        "print(status, 'torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert out.splitlines()[-1] == "0 False"
