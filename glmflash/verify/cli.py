"""`glmflash verify`: judge candidate code against a task's hidden cases, from files.

  glmflash verify --task-json TASK.json --source-file CANDIDATE.py [--json]
  glmflash verify --jsonl PROGRAMS.jsonl    # {"source": ..., "task": {...}} per line

Prints one verdict (one JSON verdict a line for --jsonl, in input order; blank lines are
skipped). Exit status 0 when every program passes, 1 otherwise; malformed input is an error.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from glmflash.cli import CLIError
from glmflash.verify.sandbox import VerifierPool
from glmflash.verify.task import Task


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task-json", type=Path,
                        help="task: {entry_point, cases: [{args, expected}]}")
    parser.add_argument("--source-file", type=Path, help="the candidate's Python source")
    parser.add_argument("--jsonl", type=Path, help="one {source, task} object a line")
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON")
    parser.add_argument("--timeout", type=float, default=1.0, help="seconds per program")
    parser.add_argument("--workers", type=int, default=None, help="worker processes")


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise CLIError(f"cannot read {path}: {err}") from None


def _task(data: object, where: str) -> Task:
    try:
        return Task.from_json(data)
    except ValueError as err:
        raise CLIError(f"{where}: {err}") from None


def _load_single(task_path: Path, source_path: Path) -> tuple[list[str], list[Task]]:
    try:
        data = json.loads(_read(task_path))
    except json.JSONDecodeError as err:
        raise CLIError(f"{task_path}:{err.lineno}: invalid JSON: {err.msg}") from None
    return [_read(source_path)], [_task(data, str(task_path))]


def _load_jsonl(path: Path) -> tuple[list[str], list[Task]]:
    sources, tasks = [], []
    for lineno, line in enumerate(_read(path).splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as err:
            raise CLIError(f"{where}: invalid JSON: {err.msg}") from None
        if not isinstance(item, dict) or not isinstance(item.get("source"), str):
            raise CLIError(f"{where}: expected an object with a string 'source' and a 'task'")
        sources.append(item["source"])
        tasks.append(_task(item.get("task"), where))
    return sources, tasks


def run(args: argparse.Namespace) -> int:
    if args.jsonl is not None:
        if args.task_json is not None or args.source_file is not None:
            raise CLIError("use either --jsonl or --task-json with --source-file, not both")
        sources, tasks = _load_jsonl(args.jsonl)
    elif args.task_json is not None and args.source_file is not None:
        sources, tasks = _load_single(args.task_json, args.source_file)
    else:
        raise CLIError("give --jsonl FILE, or --task-json FILE and --source-file FILE")
    if args.timeout <= 0 or (args.workers is not None and args.workers < 1):
        raise CLIError("--timeout and --workers must be positive")
    with VerifierPool(args.workers, timeout=args.timeout) as pool:
        verdicts = pool.verify_many(sources, tasks)
    for v in verdicts:
        if args.jsonl is not None or args.json:
            print(json.dumps(v.to_json()))
        else:
            print(f"{v.status} {v.passed}/{v.total}" + (f": {v.reason}" if v.reason else ""))
    return 0 if all(v.status == "pass" for v in verdicts) else 1
