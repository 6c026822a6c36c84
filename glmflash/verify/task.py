"""What the verifier checks a candidate against: an entry point and hidden test cases."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Any

from glmflash.verify.worker import MAX_DEPTH


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


@dataclass(frozen=True)
class Case:
    args: tuple[Any, ...]  # positional arguments, plain data (int, str, bool, list, ...)
    expected: Any


@dataclass(frozen=True)
class Task:
    entry_point: str
    cases: tuple[Case, ...]

    def __post_init__(self) -> None:
        """Refuse a task no program could pass: its name is not one Python can define (Python
        reads identifiers in NFKC form), or a value is nested deeper than a reply may be."""
        entry = self.entry_point
        if not isinstance(entry, str) or not entry.isidentifier():
            raise ValueError(f"task 'entry_point' must be a Python identifier, got {entry!r}")
        if unicodedata.normalize("NFKC", entry) != entry:
            raise ValueError(f"task 'entry_point' {entry!r} is not in NFKC form: Python reads "
                             f"it as {unicodedata.normalize('NFKC', entry)!r}, so no function "
                             f"can have that name")
        for i, case in enumerate(self.cases):
            if deeper_than(case.args, MAX_DEPTH + 1) or deeper_than(case.expected, MAX_DEPTH):
                raise ValueError(f"task case {i}: a value is nested deeper than {MAX_DEPTH}")

    def to_json(self) -> dict[str, Any]:
        return {"entry_point": self.entry_point,
                "cases": [{"args": list(c.args), "expected": c.expected} for c in self.cases]}

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
