"""What the verifier checks a candidate against.

Two kinds: `Task`, an entry point and hidden cases (arguments and the exact value expected),
the lab's own kind, whose expected values never leave the verifier's process; and
`CheckTask`, an entry point and test code defining `check(candidate)` with asserts, the
HumanEval kind. Each assert of a CheckTask is rewritten into a call that records its outcome,
so the child reports every assert's result as data and the verdict is decided here.
"""

from __future__ import annotations

import ast
import functools
import json
import unicodedata
from dataclasses import dataclass
from typing import Any

from glmflash.verify.worker import MAX_DEPTH, RECORD


def deeper_than(value: Any, limit: int) -> bool:
    """Whether lists, tuples and dicts nest past `limit` levels (a scalar is level 0), walked
    without recursion so a hostile value thousands of levels deep is no RecursionError."""
    stack = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(v, (list, tuple)):
            stack.extend((item, depth + 1) for item in v)
        elif isinstance(v, dict):
            stack.extend((item, depth + 1) for pair in v.items() for item in pair)
    return False


def check_entry_point(entry: Any) -> None:
    """A name a `def` can bind: an identifier already in NFKC form (Python reads identifiers
    in that form, so `ｆ` in a source defines `f` and a task asking for `ｆ` is unpassable)."""
    if not isinstance(entry, str) or not entry.isidentifier():
        raise ValueError(f"task 'entry_point' must be a Python identifier, got {entry!r}")
    if unicodedata.normalize("NFKC", entry) != entry:
        raise ValueError(
            f"task 'entry_point' {entry!r} is not in NFKC form: Python reads it as "
            f"{unicodedata.normalize('NFKC', entry)!r}, so no function can have "
            f"that name"
        )


@dataclass(frozen=True)
class Case:
    args: tuple[Any, ...]  # positional arguments, plain data (int, str, bool, list, ...)
    expected: Any


@dataclass(frozen=True)
class Task:
    entry_point: str
    cases: tuple[Case, ...]

    def __post_init__(self) -> None:
        """Refuse a task no program could pass: its name is not one a function can have, or a
        value is nested deeper than a reply may be."""
        check_entry_point(self.entry_point)
        for i, case in enumerate(self.cases):
            if deeper_than(case.args, MAX_DEPTH + 1) or deeper_than(case.expected, MAX_DEPTH):
                raise ValueError(f"task case {i}: a value is nested deeper than {MAX_DEPTH}")

    @property
    def total(self) -> int:
        """What a verdict counts: the cases."""
        return len(self.cases)

    def to_json(self) -> dict[str, Any]:
        return {
            "entry_point": self.entry_point,
            "cases": [{"args": list(c.args), "expected": c.expected} for c in self.cases],
        }

    @classmethod
    def from_json(cls, data: Any) -> Task:
        """Parse the JSON task object; raises ValueError with a clear message when malformed."""
        if not isinstance(data, dict):
            raise ValueError("task must be a JSON object with 'entry_point' and 'cases'")
        raw = data.get("cases")
        if not isinstance(raw, list) or not raw:
            raise ValueError("task 'cases' must be a non-empty list")
        cases = []
        for i, c in enumerate(raw):
            if not isinstance(c, dict) or "args" not in c or "expected" not in c:
                raise ValueError(f"task case {i} must be an object with 'args' and 'expected'")
            if not isinstance(c["args"], list):
                raise ValueError(f"task case {i}: 'args' must be a list")
            cases.append(Case(tuple(c["args"]), c["expected"]))
        return cls(data.get("entry_point"), tuple(cases))


class _RecordAsserts(ast.NodeTransformer):
    """`assert test, msg` -> `__glmflash_assert__(i, lambda: test)`: the recorder calls the
    lambda, notes pass, fail or the exception, and carries on, so one failed assert neither
    hides the others nor can be caught by the code under test."""

    def __init__(self) -> None:
        self.count = 0

    def visit_Assert(self, node: ast.Assert) -> ast.Expr:
        self.generic_visit(node)
        thunk = ast.Lambda(ast.arguments([], [], None, [], [], None, []), node.test)
        call = ast.Call(ast.Name(RECORD, ast.Load()), [ast.Constant(self.count), thunk], [])
        self.count += 1
        return ast.copy_location(ast.Expr(call), node)


@dataclass(frozen=True)
class CheckTask:
    """A candidate passes when `check(candidate)` returns and every assert it ran held.

    The candidate is general Python (imports of the preloaded standard modules included): the
    sandbox's process layers (seccomp, audit hook, limits, no privileges) confine it. The test
    code runs in the same child, so unlike `Task` a hostile candidate could forge its report;
    model code meant for reward keeps the `Task` kind and the syntax gate.
    """

    entry_point: str
    test: str  # source defining check(candidate)

    def __post_init__(self) -> None:
        check_entry_point(self.entry_point)
        if not isinstance(self.test, str):
            raise ValueError("task 'test' must be a string of Python source")
        if self.instrumented[1] == 0:
            raise ValueError("task 'test' has no assert: nothing could fail")

    @functools.cached_property
    def instrumented(self) -> tuple[str, int]:
        """The test source with every assert recording its outcome, and the number of asserts."""
        try:
            tree = ast.parse(self.test)
        except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
            raise ValueError(f"task 'test' does not parse: {type(err).__name__}") from None
        if not any(isinstance(n, ast.FunctionDef) and n.name == "check" for n in tree.body):
            raise ValueError("task 'test' must define check(candidate)")
        rewrite = _RecordAsserts()
        tree = ast.fix_missing_locations(rewrite.visit(tree))
        return ast.unparse(tree), rewrite.count

    @property
    def total(self) -> int:
        """What a verdict counts: the assert statements of the test."""
        return self.instrumented[1]

    @classmethod
    def from_json(cls, data: Any) -> CheckTask:
        if not isinstance(data, dict) or not isinstance(data.get("test"), str):
            raise ValueError("task must be a JSON object with 'entry_point' and a string 'test'")
        return cls(data.get("entry_point"), data["test"])


def parse_json(text: str, where: str) -> Any:
    """JSON text -> value; every way hostile JSON can fail becomes one ValueError naming
    `where` (with the line inside `text` when it has several)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        at = f"{where}:{err.lineno}" if "\n" in text.rstrip("\n") else where
        raise ValueError(f"{at}: invalid JSON: {err.msg}") from None
    except RecursionError:
        raise ValueError(f"{where}: JSON nested too deeply") from None
    except ValueError as err:  # e.g. an integer past Python's digit limit
        raise ValueError(f"{where}: {err}") from None


def task_from_json(data: Any) -> Task | CheckTask:
    """A task object of either kind: test code ("test") or hidden cases ("cases")."""
    if isinstance(data, dict) and "test" in data:
        return CheckTask.from_json(data)
    return Task.from_json(data)
