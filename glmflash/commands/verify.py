"""`glmflash verify`: judge candidate code against a task's hidden cases, from files.

  glmflash verify --task-json TASK.json --source-file CANDIDATE.py [--json]
  glmflash verify --jsonl PROGRAMS.jsonl    # {"source": ..., "task": {...}} per line
  glmflash verify --humaneval canonical|empty|mutated [--json]   # needs the [humaneval] extra

Prints one verdict (for --jsonl one JSON object a line, in input order: a verdict, or
{"line": n, "error": ...} for a record that cannot be judged; blank lines are skipped; lines
are split on "\\n" only). Exit status: 0 every program passed, 1 some program did not pass,
2 bad input (a bad record does not stop the others), 3 the verifier itself failed.
--humaneval prints how many of HumanEval's programs passed, with the throughput (exit 0).

A task is {entry_point, cases: [{args, expected}]} (the value kind) or {entry_point, test}
(test code defining check(candidate), HumanEval's kind: the source is then general Python).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import NamedTuple

from glmflash.errors import CLIError
from glmflash.verify import humaneval
from glmflash.verify.sandbox import MAX_TIMEOUT, VerifierPool
from glmflash.verify.task import Task, parse_json, task_from_json

EXIT_PASS, EXIT_FAIL, EXIT_BAD_INPUT, EXIT_VERIFIER = 0, 1, 2, 3


class BadRecord(NamedTuple):
    line: int
    error: str


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--task-json", type=Path, help="task: {entry_point, cases: [{args, expected}]}"
    )
    parser.add_argument("--source-file", type=Path, help="the candidate's Python source")
    parser.add_argument("--jsonl", type=Path, help="one {source, task} object a line")
    parser.add_argument(
        "--humaneval",
        choices=("canonical", "empty", "mutated"),
        help="run HumanEval's 164 problems with their canonical solutions, "
        "with `pass` bodies, or with mutants of the canonical solutions",
    )
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON")
    parser.add_argument(
        "--timeout",
        type=float,
        default=1.0,
        help=f"CPU seconds per program, at most {MAX_TIMEOUT:g}",
    )
    parser.add_argument("--workers", type=int, default=None, help="worker processes")


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise CLIError(f"cannot read {path}: {err}") from None


def _record(item: object, where: str, pool: VerifierPool) -> tuple[str, Task]:
    """One {source, task} record, checked down to whether the pool can send it."""
    if not isinstance(item, dict) or not isinstance(item.get("source"), str):
        raise ValueError(f"{where}: expected an object with a string 'source' and a 'task'")
    try:
        task = task_from_json(item.get("task"))
        pool.request(task)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    return item["source"], task


def _load_single(args: argparse.Namespace, pool: VerifierPool) -> list[tuple[str, Task]]:
    source = _read(args.source_file)
    try:
        task = task_from_json(parse_json(_read(args.task_json), str(args.task_json)))
        pool.request(task)
    except ValueError as err:
        message = str(err)
        raise CLIError(
            message if message.startswith(str(args.task_json)) else f"{args.task_json}: {message}"
        ) from None
    return [(source, task)]


def _load_jsonl(path: Path, pool: VerifierPool) -> list[tuple[str, Task] | BadRecord]:
    """Records in file order; a record that cannot be judged is kept as a BadRecord."""
    records: list[tuple[str, Task] | BadRecord] = []
    for lineno, line in enumerate(_read(path).split("\n"), 1):  # not splitlines: U+2028 etc.
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            records.append(_record(parse_json(line, where), where, pool))
        except ValueError as err:
            records.append(BadRecord(lineno, str(err)))
    return records


def run_humaneval(mode: str, pool: VerifierPool, as_json: bool) -> int:
    try:
        sources, tasks, labels = humaneval.programs(mode)
    except FileNotFoundError as err:
        raise CLIError(str(err)) from None
    start = time.perf_counter()
    verdicts = pool.verify_many(sources, tasks)
    seconds = time.perf_counter() - start
    summary = {
        "mode": mode,
        "passed": sum(v.status == "pass" for v in verdicts),
        "total": len(verdicts),
        "statuses": dict(Counter(v.status for v in verdicts)),
        "seconds": round(seconds, 2),
        "programs_per_s": round(len(verdicts) / seconds, 1),
        "workers": pool.size,
        "passing" if mode != "canonical" else "not_passing": [
            label
            for label, v in zip(labels, verdicts, strict=True)
            if (v.status == "pass") != (mode == "canonical")
        ],
    }
    if as_json:
        print(json.dumps(summary))
    else:
        print(
            f"HumanEval {mode}: {summary['passed']}/{summary['total']} pass "
            f"({summary['statuses']}), {summary['programs_per_s']} programs/s on "
            f"{pool.size} workers"
        )
    return EXIT_PASS


def run(args: argparse.Namespace) -> int:
    if args.humaneval is not None:
        if args.jsonl is not None or args.task_json is not None:
            raise CLIError("--humaneval takes no --jsonl or --task-json")
    elif args.jsonl is not None:
        if args.task_json is not None or args.source_file is not None:
            raise CLIError("use either --jsonl or --task-json with --source-file, not both")
    elif args.task_json is None or args.source_file is None:
        raise CLIError("give --jsonl FILE, or --task-json FILE and --source-file FILE")
    if args.workers is not None and args.workers < 1:
        raise CLIError("--workers must be positive")
    try:
        pool = VerifierPool(args.workers, timeout=args.timeout)
    except ValueError as err:
        raise CLIError(str(err).replace("timeout", "--timeout", 1)) from None
    with pool:
        if args.humaneval is not None:
            return run_humaneval(args.humaneval, pool, args.json)
        records = _load_jsonl(args.jsonl, pool) if args.jsonl else _load_single(args, pool)
        good = [r for r in records if not isinstance(r, BadRecord)]
        try:
            verdicts = iter(pool.verify_many([s for s, _ in good], [t for _, t in good]))
        except (RuntimeError, OSError) as err:
            print(f"glmflash verify: error: the verifier failed: {err}", file=sys.stderr)
            return EXIT_VERIFIER
    status = EXIT_PASS
    for record in records:
        if isinstance(record, BadRecord):
            print(json.dumps(record._asdict()))
            print(f"glmflash verify: error: {record.error}", file=sys.stderr)
            status = EXIT_BAD_INPUT
            continue
        v = next(verdicts)
        if args.jsonl is not None or args.json:
            print(json.dumps(v.to_json()))
        else:
            print(f"{v.status} {v.passed}/{v.total}" + (f": {v.reason}" if v.reason else ""))
        if v.status != "pass" and status == EXIT_PASS:
            status = EXIT_FAIL
    return status
