"""What the verifier checks a candidate against: an entry point and hidden test cases."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Case:
    args: tuple[Any, ...]  # positional arguments, plain data (int, str, bool, list, ...)
    expected: Any


@dataclass(frozen=True)
class Task:
    entry_point: str
    cases: tuple[Case, ...]

    def to_json(self) -> dict[str, Any]:
        return {"entry_point": self.entry_point,
                "cases": [{"args": list(c.args), "expected": c.expected} for c in self.cases]}

    @classmethod
    def from_json(cls, data: Any) -> Task:
        """Parse the JSON task object; raises ValueError with a clear message when malformed."""
        if not isinstance(data, dict):
            raise ValueError("task must be a JSON object with 'entry_point' and 'cases'")
        entry = data.get("entry_point")
        if not isinstance(entry, str) or not entry.isidentifier():
            raise ValueError(f"task 'entry_point' must be a Python identifier, got {entry!r}")
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
        return cls(entry, tuple(cases))
