"""Your own tasks and HumanEval: loading with clear errors, saving every record, resuming
without evaluating anything twice, and scores that follow from the saved records."""

from __future__ import annotations

import json
from math import comb

import pytest
import torch

from glmflash import cli
from glmflash import tokenizer as tok
from glmflash.checkpoint import save_model
from glmflash.config import model_config
from glmflash.config.evaluation import Sampling
from glmflash.evaluate import coding, user_tasks
from glmflash.generate import Completion
from glmflash.model.lm import GLMFlash

DOUBLE = {
    "prompt": "# Double x.\ndef f(x):\n",
    "entry_point": "f",
    "cases": [{"args": [3], "expected": 6}, {"args": [-1], "expected": -2}],
}
CHECK = {
    "prompt": "def g(s):\n",
    "entry_point": "g",
    "group": "strings",
    "test": "def check(candidate):\n    assert candidate('ab') == 'ba'\n",
}
RIGHT = {"f": "    return 2 * x\n", "g": "    return s[::-1]\n"}


def write(path, items) -> str:
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in items) + "\n")
    return str(path)


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", ":2: invalid JSON"),
        ("[1, 2]", ":2: expected a JSON object"),
        (json.dumps({**DOUBLE, "prompt": ""}), ":2: 'prompt' must be a non-empty string"),
        (json.dumps({**DOUBLE, "test": CHECK["test"]}), ":2: give either 'cases' or 'test'"),
        (json.dumps({"prompt": "x", "entry_point": "f"}), ":2: give either 'cases' or 'test'"),
        (json.dumps({**DOUBLE, "colour": 1}), ":2: unknown field(s) colour"),
        (json.dumps({**DOUBLE, "entry_point": "1f"}), ":2: task 'entry_point'"),
        (json.dumps({**DOUBLE, "cases": []}), ":2: task 'cases' must be a non-empty list"),
        (json.dumps({**CHECK, "test": "x = 1"}), ":2: task 'test' must define check"),
        (json.dumps({**DOUBLE, "group": 3}), ":2: 'group' must be a non-empty string"),
        (json.dumps({**DOUBLE, "id": 1}), ":2: duplicate id '1'"),
    ],
)
def test_a_malformed_line_is_named_with_what_is_wrong(tmp_path, line, message):
    path = write(tmp_path / "t.jsonl", [DOUBLE, line])
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        user_tasks.load_tasks(path)


def test_load_reads_both_kinds_and_skips_blank_lines(tmp_path):
    path = write(tmp_path / "t.jsonl", [DOUBLE, "", CHECK])
    a, b = user_tasks.load_tasks(path)
    assert (a.name, a.family, a.task.entry_point, len(a.task.cases)) == ("1", "all", "f", 2)
    assert (b.name, b.family, b.task.total) == ("3", "strings", 1)
    with pytest.raises(ValueError, match="holds no task"):
        user_tasks.load_tasks(write(tmp_path / "e.jsonl", [""]))


def scripted(passes: dict[str, list[bool]], calls: list):
    """A stand-in for `generate`: sample j of the task with entry point e is right when
    passes[e][j]; every prompt handed over is noted in `calls`."""

    def fake(model, prompts, **kwargs):
        seen: dict[str, int] = {}
        out = []
        for p in prompts:
            text = p if isinstance(p, str) else tok.decode(p)
            entry = "f" if "def f" in text else "g"
            j = seen[text] = seen.get(text, -1) + 1
            calls.append(text)
            body = RIGHT[entry] if passes[entry][j] else "    return 0\n"
            ids = tok.encode(body)
            out.append(
                Completion(p if isinstance(p, list) else tok.encode(p), ids, body, "complete")
            )
        return out

    return fake


def test_scores_come_from_the_saved_records_per_group(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(
        coding,
        "generate",
        scripted({"f": [True, False, True, False], "g": [False, False, False, True]}, calls),
    )
    tasks = user_tasks.load_tasks(write(tmp_path / "t.jsonl", [DOUBLE, CHECK]))
    records = tmp_path / "out.records.jsonl"
    model = GLMFlash(model_config("tiny"))
    s = user_tasks.evaluate_saved(model, tasks, records, False, Sampling("sample", 4, 2))
    pass_at_2 = {c: 1 - comb(4 - c, 2) / comb(4, 2) for c in (1, 2)}
    assert s["per_group"] == {"all": [pass_at_2[2], 1], "strings": [pass_at_2[1], 1]}
    assert s["overall"] == [pass_at_2[2] + pass_at_2[1], 2] and s["evaluated_now"] == 2
    saved = [json.loads(line) for line in records.read_text().splitlines()]
    assert [(r["id"], r["status"]) for r in saved] == [
        ("1", "pass"),
        ("1", "fail"),
        ("1", "pass"),
        ("1", "fail"),
        ("2", "fail"),
        ("2", "fail"),
        ("2", "fail"),
        ("2", "pass"),
    ]


def test_resume_evaluates_nothing_twice(tmp_path, monkeypatch):
    items = [{**DOUBLE, "prompt": f"# Double x ({i}).\ndef f(x):\n"} for i in range(40)]
    tasks = user_tasks.load_tasks(write(tmp_path / "t.jsonl", items))
    records = tmp_path / "out.records.jsonl"
    model = GLMFlash(model_config("tiny"))
    calls = []
    fake = scripted({"f": [True]}, calls)
    chunks = []

    def dies_after_two_chunks(model, prompts, **kwargs):
        if len(chunks) == 2:
            raise KeyboardInterrupt
        chunks.append(len(prompts))
        return fake(model, prompts, **kwargs)

    monkeypatch.setattr(coding, "generate", dies_after_two_chunks)
    with pytest.raises(KeyboardInterrupt):
        user_tasks.evaluate_saved(model, tasks, records, False)
    assert len(records.read_text().splitlines()) == 2 * user_tasks.CHUNK
    monkeypatch.setattr(coding, "generate", fake)
    calls.clear()
    s = user_tasks.evaluate_saved(model, tasks, records, True)
    assert len(calls) == 40 - 2 * user_tasks.CHUNK == s["evaluated_now"]
    assert s["overall"] == [40.0, 40]
    assert len(records.read_text().splitlines()) == 40
    s = user_tasks.evaluate_saved(model, tasks, records, True)
    assert s["evaluated_now"] == 0 and s["overall"] == [40.0, 40]


def test_humaneval_prompts_are_cut_for_the_model_but_judged_whole(tmp_path, monkeypatch):
    """Each of HumanEval's prompts is longer than the tiny model's context: the model sees its
    tail, the verifier the whole prompt and the completion (here the canonical solution)."""
    from glmflash.verify import humaneval

    canonical = {p["task_id"]: p["canonical_solution"] for p in humaneval.problems()}
    tasks = user_tasks.humaneval_tasks()[:12]
    shown = []

    def answer(model, prompts, **kwargs):
        shown.extend(prompts)
        return [
            Completion(p, tok.encode(canonical[t.name]), canonical[t.name], "complete")
            for p, t in zip(prompts, tasks, strict=True)
        ]

    monkeypatch.setattr(coding, "generate", answer)
    model = GLMFlash(model_config("tiny"))
    s = user_tasks.evaluate_saved(model, tasks, tmp_path / "r.jsonl", False)
    assert s["overall"] == [12.0, 12] and s["prompts_cut"] == 12
    keep = model.cfg.context - 1 - user_tasks.MIN_ROOM
    assert all(isinstance(p, list) and len(p) == keep for p in shown)


def test_eval_command_end_to_end(tmp_path, capsys):
    torch.manual_seed(0)
    save_model(tmp_path / "ck", GLMFlash(model_config("tiny")))
    tasks = write(tmp_path / "t.jsonl", [DOUBLE, CHECK])
    out = tmp_path / "res" / "mine.json"
    args = [
        "eval",
        "--checkpoint",
        str(tmp_path / "ck"),
        "--tasks",
        tasks,
        "--out",
        str(out),
        "--max-new-tokens",
        "8",
    ]
    assert cli.main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary == json.loads(out.read_text())
    assert summary["overall"][1] == 2 and set(summary["per_group"]) == {"all", "strings"}
    assert len(out.with_suffix(".records.jsonl").read_text().splitlines()) == 2
    assert cli.main([*args, "--resume"]) == 0
    assert json.loads(capsys.readouterr().out)["evaluated_now"] == 0
    write(tmp_path / "t.jsonl", [DOUBLE, "{oops"])
    assert cli.main(args) == 2
    assert f"{tasks}:2: invalid JSON" in capsys.readouterr().err
    assert cli.main(args[:5] + args[7:]) == 2  # no --out
    assert "need --out" in capsys.readouterr().err
