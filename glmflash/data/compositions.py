"""Composition corpus: three arithmetic steps applied to x, answered by one Python expression.

    Task: start with x. Add 3, then multiply by 2, then take the negative.
    Answer: -((x + 3) * 2)

A structure is the sequence of three op names (add, sub, mul take a constant 2..5; neg, abs
take none). Of the 5**3 = 125 sequences, the 5 that repeat one op are dropped: 120 structures,
shuffled once by a fixed seed into 88 for training and 32 held out. A program is a structure
with its constants filled in. Answers are checked by value, by a small interpreter over an
allow-listed AST, so any equivalent expression ("2*(x+3)" for "(x + 3) * 2") is accepted.
"""

from __future__ import annotations

import ast
import itertools
import operator
import random
from collections.abc import Sequence
from dataclasses import dataclass

from glmflash.data import rng_for
from glmflash.tokenizer import encode

OPS = ("add", "sub", "mul", "neg", "abs")
CONSTANT_OPS = ("add", "sub", "mul")
CONSTANTS = (2, 3, 4, 5)
N_TRAIN = 88
SPLIT_SEED = 1234

Structure = tuple[str, ...]
Program = tuple[tuple[str, int | None], ...]  # (op, constant or None) per step

STRUCTURES: tuple[Structure, ...] = tuple(
    s for s in itertools.product(OPS, repeat=3) if len(set(s)) >= 2
)
_shuffled = list(STRUCTURES)
random.Random(SPLIT_SEED).shuffle(_shuffled)
TRAIN_STRUCTURES: tuple[Structure, ...] = tuple(_shuffled[:N_TRAIN])
HELDOUT_STRUCTURES: tuple[Structure, ...] = tuple(_shuffled[N_TRAIN:])

_PHRASES = {
    "add": "add {c}",
    "sub": "subtract {c}",
    "mul": "multiply by {c}",
    "neg": "take the negative",
    "abs": "take the absolute value",
}
_ATOM, _UNARY, _MUL, _ADD = 4, 3, 2, 1  # binding strength in Python's grammar


def instantiate(structure: Structure, rng: random.Random) -> Program:
    if any(op not in OPS for op in structure):
        raise ValueError(f"unknown op in {structure!r}; ops are {', '.join(OPS)}")
    return tuple((op, rng.choice(CONSTANTS) if op in CONSTANT_OPS else None) for op in structure)


def apply_step(op: str, c: int | None, v: int) -> int:
    if op == "add":
        return v + c
    if op == "sub":
        return v - c
    if op == "mul":
        return v * c
    return -v if op == "neg" else abs(v)


def evaluate(program: Program, x: int) -> int:
    """The program's value at x: the steps applied in order."""
    for op, c in program:
        x = apply_step(op, c, x)
    return x


def instructions(program: Program) -> str:
    text = ", then ".join(_PHRASES[op].format(c=c) for op, c in program) + "."
    return text[0].upper() + text[1:]


def expression(program: Program) -> str:
    """The program as a Python expression with only the parentheses the grammar needs."""

    def wrap(text: str, strength: int, need: int) -> str:
        return text if strength >= need else f"({text})"

    text, strength = "x", _ATOM
    for op, c in program:
        if op in ("add", "sub"):  # left-associative: an additive left operand needs no parens
            text, strength = f"{text} {'+' if op == 'add' else '-'} {c}", _ADD
        elif op == "mul":
            text, strength = f"{wrap(text, strength, _MUL)} * {c}", _MUL
        elif op == "neg":  # "-(-x)", "-(x * 2)": parenthesise anything but an atom
            text, strength = f"-{wrap(text, strength, _ATOM)}", _UNARY
        else:
            text, strength = f"abs({text})", _ATOM
    return text


def prompt_text(program: Program) -> str:
    return f"Task: start with x. {instructions(program)}\nAnswer: "


def composition_example(structure: Structure, rng: random.Random) -> tuple[str, str]:
    """(prompt, answer) for the structure with random constants; the answer has no newline."""
    program = instantiate(structure, rng)
    return prompt_text(program), expression(program)


def composition_document(
    index: int, seed: int, structures: Sequence[Structure] = TRAIN_STRUCTURES
) -> str:
    """Document `index`: prompt, answer and newline for a random structure of `structures`."""
    if not structures:
        raise ValueError("structures must not be empty")
    rng = rng_for("composition", seed, index)
    prompt, answer = composition_example(structures[rng.randrange(len(structures))], rng)
    return prompt + answer + "\n"


# ---------------------------------------------------------------------------- checking answers

MAX_ANSWER_CHARS = 200  # bounds the parse depth and the size of any value
CHECK_POINTS = tuple(range(-12, 13))
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def _value(node: ast.AST, x: int) -> int:
    """Interpret an expression made only of x, ints, + - *, unary -/+ and abs(...)."""
    if isinstance(node, ast.Expression):
        return _value(node.body, x)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name) and node.id == "x":
        return x
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _value(node.operand, x)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_value(node.left, x), _value(node.right, x))
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "abs"
        and len(node.args) == 1
        and not node.keywords
    ):
        return abs(_value(node.args[0], x))
    raise ValueError(f"not allowed in an answer: {type(node).__name__}")


def check_answer(program: Program, answer_text: str) -> bool:
    """Whether the answer (its text up to the first newline) equals the program at every
    x in CHECK_POINTS. Never executes the text; anything outside the grammar is False."""
    line = answer_text.split("\n", 1)[0].strip()
    if not line or len(line) > MAX_ANSWER_CHARS:
        return False
    try:
        tree = ast.parse(line, mode="eval")
        return all(_value(tree, x) == evaluate(program, x) for x in CHECK_POINTS)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False


# ---------------------------------------------------------------------------- evaluation sets


@dataclass(frozen=True)
class CompositionExample:
    program: Program
    prompt: str
    answer: str  # the expression, without the newline that ends it in documents


def examples(
    structures: Sequence[Structure] = HELDOUT_STRUCTURES, per_structure: int = 1, seed: int = 0
) -> list[CompositionExample]:
    """`per_structure` examples of each structure, in order, deterministic from `seed`."""
    rng = rng_for("composition_examples", seed)
    out = []
    for structure in structures:
        for _ in range(per_structure):
            program = instantiate(structure, rng)
            out.append(CompositionExample(program, prompt_text(program), expression(program)))
    return out


def teacher_forced_pairs(
    structures: Sequence[Structure] = HELDOUT_STRUCTURES, per_structure: int = 1, seed: int = 0
) -> list[tuple[list[int], list[int]]]:
    """(prompt_ids, answer_ids) per example: bos + prompt bytes, then answer bytes + newline,
    laid out as in a training document, for next-byte accuracy on the answer."""
    return [
        (encode(e.prompt, bos=True), encode(e.answer + "\n"))
        for e in examples(structures, per_structure, seed)
    ]
