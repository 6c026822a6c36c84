"""Tasks from outside the lab: a user's JSON-lines file, or HumanEval's 164 problems.

One task a line, either kind of the verifier:

    {"prompt": "# ...\\ndef f(x):\\n", "entry_point": "f",
     "cases": [{"args": [3], "expected": 6}, ...], "group": "optional label"}
    {"prompt": "...", "entry_point": "f", "test": "def check(candidate):\\n    assert ..."}

The program judged is the prompt followed by the completion. With cases, the candidate meets
the verifier's syntax gate (one plain function); with test code it is general Python run in
the sandbox. A task's id is its line number (or HumanEval's task id), so a rerun with
--resume can skip what is done.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from glmflash.config.evaluation import GREEDY, Sampling
from glmflash.data import derive_seed
from glmflash.data.code_tasks import CodeTask
from glmflash.evaluate.coding import evaluate_tasks
from glmflash.evaluate.passk import pass_at_k
from glmflash.progress import Progress
from glmflash.verify import humaneval
from glmflash.verify.task import CheckTask, parse_json, task_from_json


def _task(item: dict, where: str) -> CodeTask:
    if not isinstance(item.get("prompt"), str) or not item["prompt"]:
        raise ValueError(f"{where}: 'prompt' must be a non-empty string")
    group = item.get("group", "all")
    if not isinstance(group, str) or not group:
        raise ValueError(f"{where}: 'group' must be a non-empty string")
    unknown = set(item) - {"prompt", "entry_point", "cases", "test", "group", "id"}
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    if ("cases" in item) == ("test" in item):
        raise ValueError(f"{where}: give either 'cases' or 'test'")
    spec = {
        "entry_point": item.get("entry_point"),
        **{k: item[k] for k in ("cases", "test") if k in item},
    }
    try:
        task = task_from_json(spec)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    name = str(item.get("id", where.rsplit(":", 1)[-1]))
    return CodeTask(family=group, name=name, prompt=item["prompt"], arg="", task=task, reference="")


def load_tasks(path: str | Path) -> list[CodeTask]:
    """The tasks of a JSON-lines file; ValueError naming the line and what is wrong."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"cannot read {path}: {err}") from None
    out, ids = [], set()
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        item = parse_json(line, where)
        if not isinstance(item, dict):
            raise ValueError(f"{where}: expected a JSON object")
        task = _task({"id": lineno, **item}, where)
        if task.name in ids:
            raise ValueError(f"{where}: duplicate id {task.name!r}")
        ids.add(task.name)
        out.append(task)
    if not out:
        raise ValueError(f"{path} holds no task")
    return out


def humaneval_tasks() -> list[CodeTask]:
    """HumanEval's problems as test-code tasks (the prompt: imports, signature, docstring)."""
    return [
        CodeTask(
            family="humaneval",
            name=p["task_id"],
            prompt=p["prompt"],
            arg="",
            task=CheckTask(p["entry_point"], p["test"]),
            reference="",
        )
        for p in humaneval.problems()
    ]


MIN_ROOM = 32  # tokens of context a long prompt's cut leaves the model to answer in
CHUNK = 16  # tasks evaluated between saves of their records


def evaluate_saved(
    model,
    tasks: list[CodeTask],
    records_path: Path,
    resume: bool,
    sampling: Sampling = GREEDY,
) -> dict[str, Any]:
    """Evaluate `tasks` CHUNK at a time, appending every record (with its task's id) to
    `records_path` as each chunk finishes; with `resume`, tasks whose records are there are
    not evaluated again. Scores come from the saved records: greedy pass@1 or pass@k per group
    and overall. A chunk's sampling seed derives from (seed, its first task's id)."""
    n, k = sampling.n, sampling.pass_k
    saved: dict[str, list[dict]] = {}
    if resume and records_path.is_file():
        for line in records_path.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                saved.setdefault(record["id"], []).append(record)
        saved = {i: rs for i, rs in saved.items() if len(rs) == n}  # a torn chunk is redone
    elif records_path.exists():
        records_path.unlink()
    todo = [t for t in tasks if t.name not in saved]
    progress = Progress(len(tasks), len(tasks) - len(todo), unit="task", desc="eval", every_s=0.0)
    for start in range(0, len(todo), CHUNK):
        chunk = todo[start : start + CHUNK]
        seed = derive_seed("eval", sampling.seed, chunk[0].name)
        result = evaluate_tasks(model, chunk, replace(sampling, seed=seed), min_room=MIN_ROOM)
        rows = [
            {"id": t.name, **r}
            for t, r in zip((t for t in chunk for _ in range(n)), result.records, strict=True)
        ]
        with open(records_path, "a") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows))
        for r in rows:
            saved.setdefault(r["id"], []).append(r)
        progress.update(len(tasks) - len(todo) + start + len(chunk))
    progress.close()
    per_group: dict[str, list[float]] = {}
    for t in tasks:
        score = pass_at_k(n, sum(r["status"] == "pass" for r in saved[t.name]), k)
        entry = per_group.setdefault(t.family, [0.0, 0])
        entry[0] += score
        entry[1] += 1
    overall = [sum(v[0] for v in per_group.values()), len(tasks)]
    return {
        "mode": sampling.mode,
        "k": k,
        "n_samples": n,
        "temperature": sampling.draw_temperature,
        "per_group": per_group,
        "overall": overall,
        "pass_rate": overall[0] / overall[1],
        "prompts_cut": sum(saved[t.name][0]["prompt_cut"] for t in tasks),
        "evaluated_now": len(todo),
    }
