"""`glmflash verify`: single-file and JSON-lines modes, outputs in order, errors as CLIError."""

import argparse
import json

import pytest

from glmflash.cli import CLIError
from glmflash.verify import cli

TASK = {"entry_point": "double_abc", "cases": [{"args": [3], "expected": 6},
                                               {"args": [-1], "expected": -2}]}
RIGHT = "def double_abc(x):\n    return 2 * x\n"
WRONG = "def double_abc(x):\n    return x + 3\n"


def run(*argv):
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return cli.run(parser.parse_args(["--timeout", "0.5", "--workers", "1", *argv]))


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
    assert run("--task-json", str(files / "task.json"), "--source-file", str(files / "wrong.py"),
               "--json") == 1
    assert json.loads(capsys.readouterr().out) == {"status": "fail", "passed": 1, "total": 2,
                                                   "reason": "case 1: wrong value"}


def test_jsonl_prints_one_verdict_a_line_in_order(files, capsys):
    sources = [RIGHT, "import os\n", WRONG, "def double_abc(x):\n    while True:\n        pass\n",
               RIGHT]
    lines = [json.dumps({"source": s, "task": TASK}) for s in sources]
    lines.insert(2, "")  # blank lines are skipped
    (files / "many.jsonl").write_text("\n".join(lines) + "\n")
    assert run("--jsonl", str(files / "many.jsonl")) == 1
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [o["status"] for o in out] == ["pass", "invalid", "fail", "timeout", "pass"]
    assert all(set(o) == {"status", "passed", "total", "reason"} and o["total"] == 2 for o in out)
    assert [o["passed"] for o in out] == [2, 0, 1, 0, 2]


@pytest.mark.parametrize("content, fragment", [
    ('{"source": "x", "task": ' + json.dumps(TASK) + "}\n{not json}\n",
     "many.jsonl:2: invalid JSON"),
    ('{"source": "x", "task": {"entry_point": "f", "cases": []}}\n', "many.jsonl:1: task 'cases'"),
    ('{"source": "x", "task": {"entry_point": "f"}}\n', "many.jsonl:1: task 'cases'"),
    ('{"task": ' + json.dumps(TASK) + "}\n", "many.jsonl:1: expected an object"),
    ('[1, 2]\n', "many.jsonl:1: expected an object"),
    ('{"source": "x", "task": {"entry_point": "1f", "cases": [{"args": [1], "expected": 1}]}}\n',
     "many.jsonl:1: task 'entry_point'"),
])
def test_malformed_jsonl_names_file_and_line(files, content, fragment):
    (files / "many.jsonl").write_text(content)
    with pytest.raises(CLIError, match=fragment.replace("{", r"\{")) as err:
        run("--jsonl", str(files / "many.jsonl"))
    assert "\n" not in str(err.value)


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
