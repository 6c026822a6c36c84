"""The task ladder: functions composed of primitive steps, graded by depth and by what training
saw, so that what RL teaches, and how far it carries, can be measured.

    # Add 3 to x, then take the absolute value of the result, then multiply it by 2.
    def f_kavo(x):
        return abs(x + 3) * 2

A primitive is one step on a value (add c, negate, keep the elements greater than c, reverse a
string, ...), with several phrasings for its comment, one more phrasing that no training text
uses, and its Python forms. A structure is a chain of 1-3 primitives whose kinds fit (an int2
step combines two integer arguments and starts a chain; `total` turns a list into an int). Each
task fills in constants, draws 10 hidden cases (edge values first), and has several correct
bodies: one expression, step by step through a variable, and step by step with the
statement forms (augmented assignment, if-statements, loops) where they exist.

Every structure (`all_structures()`, built on first use) belongs to one fixed group (`GROUPS`):
    pretrain  all of depth 1, PRETRAIN_SHARE of depth 2, and the depth-3 integer chains the
              composition corpus already trains (written there in another format)
    rl        RL_SHARE of depth 2 and half of the rest of depth 3: what RL trains on
    heldout   the remaining depth 2 and 3: in no training text and no RL task
so that a rung (`RUNGS`) is a slice the model has or has not seen. Function names are always
neutral (`f_<word>`): only the comment says what to compute.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from glmflash.config.pretrain import LADDER_CONSTANTS
from glmflash.data import rng_for
from glmflash.data.code_tasks import (
    ARG_NAMES,
    NEUTRAL_PREFIX,
    USAGE_PROB,
    CodeTask,
    case_inputs,
    check_split,
    random_name,
)
from glmflash.data.compositions import TRAIN_STRUCTURES as COMPOSITION_TRAIN
from glmflash.verify.task import Case, Task

KINDS = ("int", "int2", "list", "str")  # int2: two integer arguments, combined by the first step
ARG_PAIRS = (("a", "b"), ("x", "y"), ("m", "n"))
STEP_VARS = ("r", "y", "out")
N_CASES = 10
MAX_DRAWS = 200  # tries at constants and inputs that make the cases take two or more values
VARY_PROBES = 20  # draws that decide whether a chain is kept (see `_varies`)
PRETRAIN_SHARE = 0.4  # of the depth-2 structures
RL_SHARE = 0.3  # of the depth-2 structures; RL also gets half of the held-out-eligible depth 3
SPLIT_SEED = 2026
DOCUMENT_DEPTHS = {1: 0.5, 2: 0.45, 3: 0.05}  # depth of a pretraining document's structure
EXPRESSION_SHARE = 0.5  # share of reference bodies written as one expression (the shortest)
RUNGS = (
    "depth1",
    "depth1_heldout_phrasings",
    "seen_depth2",
    "rl_only",
    "unseen_depth2",
    "unseen_depth3",
)


@dataclass(frozen=True)
class Primitive:
    """One step. Templates: `{v}` the value's words in a phrasing, `{c}` the constant;
    in `expr`, `{p}` the operand (parenthesised unless atomic) and `{o}` the bare operand
    (inside a call or brackets), `{a}`/`{b}` the two arguments of an int2 step; in `stmts`,
    `{r}` the step variable, which each statement form assigns."""

    name: str
    kind_in: str
    kind_out: str
    phrasings: tuple[str, ...]
    heldout: str  # used only by the held-out-phrasing rung
    expr: str
    fn: Callable[..., Any]  # fn(value, c); an int2 step takes fn((a, b), c)
    atomic: bool = False  # whether `expr` needs no parentheses as an operand
    consts: tuple[int, ...] = ()  # empty: the step takes no constant
    stmts: tuple[str, ...] = ()  # the statement form, when there is one besides `{r} = expr`


_SMALL, _FACTOR, _CUT = tuple(range(1, 10)), (2, 3, 4, 5), (1, 2, 3, 4)
_THRESHOLD, _REPEAT = tuple(range(10)), (2, 3)
# Wider ranges for pretraining documents (`constants="wide"`): with four factors to choose from
# a model that guesses "* 2" is right a quarter of the time; with eleven it must read the
# comment. Every task's own range lies inside its wide one.
WIDE_CONSTANTS = {
    _SMALL: tuple(range(1, 30)),
    _FACTOR: tuple(range(2, 13)),
    _CUT: tuple(range(1, 10)),
    _THRESHOLD: tuple(range(30)),
    _REPEAT: (2, 3, 4, 5),
}

# The table stays as written, one primitive a group of lines, read across.
# fmt: off
_PRIMITIVE_LIST = (
    # integer -> integer
    Primitive("add", "int", "int", ("add {c} to {v}", "increase {v} by {c}", "raise {v} by {c}"),
              "shift {v} up by {c}", "{p} + {c}", lambda v, c: v + c, consts=_SMALL,
              stmts=("{r} += {c}",)),
    Primitive("sub", "int", "int",
              ("subtract {c} from {v}", "decrease {v} by {c}", "take {c} away from {v}"),
              "lower {v} by {c}", "{p} - {c}", lambda v, c: v - c, consts=_SMALL,
              stmts=("{r} -= {c}",)),
    Primitive("mul", "int", "int",
              ("multiply {v} by {c}", "scale {v} by {c}", "take {c} times {v}"),
              "make {v} {c} times as large", "{p} * {c}", lambda v, c: v * c, consts=_FACTOR,
              stmts=("{r} *= {c}",)),
    Primitive("neg", "int", "int",
              ("negate {v}", "flip the sign of {v}", "take the negative of {v}"),
              "change {v} into its opposite", "-{p}", lambda v, c: -v),
    Primitive("abs", "int", "int",
              ("take the absolute value of {v}", "drop the sign of {v}",
               "take the magnitude of {v}"),
              "remove any minus sign from {v}", "abs({o})", lambda v, c: abs(v), atomic=True,
              stmts=("if {r} < 0:\n    {r} = -{r}",)),
    Primitive("square", "int", "int",
              ("square {v}", "multiply {v} by itself", "take the square of {v}"),
              "take {v} to the second power", "{p} * {p}", lambda v, c: v * v),
    Primitive("floordiv", "int", "int",
              ("floor-divide {v} by {c}", "divide {v} by {c}, rounding down",
               "take {v} // {c}"),
              "count how many whole times {c} fits into {v}", "{p} // {c}",
              lambda v, c: v // c, consts=_FACTOR, stmts=("{r} //= {c}",)),
    Primitive("mod", "int", "int",
              ("take {v} modulo {c}", "take the remainder of {v} divided by {c}",
               "reduce {v} mod {c}"),
              "keep what is left over when {v} is split into groups of {c}", "{p} % {c}",
              lambda v, c: v % c, consts=_FACTOR, stmts=("{r} %= {c}",)),
    Primitive("min", "int", "int",
              ("take the minimum of {v} and {c}", "cap {v} at {c}",
               "take the smaller of {v} and {c}"),
              "limit {v} to at most {c}", "min({o}, {c})", lambda v, c: min(v, c), atomic=True,
              consts=_THRESHOLD, stmts=("if {r} > {c}:\n    {r} = {c}",)),
    Primitive("max", "int", "int",
              ("take the maximum of {v} and {c}", "raise {v} to at least {c}",
               "take the larger of {v} and {c}"),
              "never let {v} fall below {c}", "max({o}, {c})", lambda v, c: max(v, c),
              atomic=True, consts=_THRESHOLD, stmts=("if {r} < {c}:\n    {r} = {c}",)),
    Primitive("cond", "int", "int",
              ("if {v} is greater than {c} subtract {c} from it, otherwise add {c}",
               "subtract {c} from {v} when it exceeds {c}, else add {c}",
               "when {v} > {c} decrease it by {c}, otherwise increase it by {c}"),
              "go down by {c} if {v} is above {c} and up by {c} if it is not",
              "{p} - {c} if {p} > {c} else {p} + {c}",
              lambda v, c: v - c if v > c else v + c, consts=_SMALL,
              stmts=("if {r} > {c}:\n    {r} -= {c}\nelse:\n    {r} += {c}",)),
    # two integers -> integer (first step only)
    Primitive("sum2", "int2", "int", ("add {a} and {b}", "take the sum of {a} and {b}"),
              "put {a} and {b} together", "{a} + {b}", lambda v, c: v[0] + v[1]),
    Primitive("diff2", "int2", "int", ("subtract {b} from {a}", "take {a} minus {b}"),
              "find how far {a} is above {b}", "{a} - {b}", lambda v, c: v[0] - v[1]),
    Primitive("prod2", "int2", "int", ("multiply {a} by {b}", "take the product of {a} and {b}"),
              "take {a} lots of {b}", "{a} * {b}", lambda v, c: v[0] * v[1]),
    Primitive("max2", "int2", "int", ("take the larger of {a} and {b}",
                                        "take the maximum of {a} and {b}"),
              "pick whichever of {a} and {b} is bigger", "max({a}, {b})",
              lambda v, c: max(v), atomic=True),
    Primitive("min2", "int2", "int",
              ("take the smaller of {a} and {b}", "take the minimum of {a} and {b}"),
              "pick whichever of {a} and {b} is less", "min({a}, {b})",
              lambda v, c: min(v), atomic=True),
    # list -> list, list -> int
    Primitive("each_add", "list", "list", ("add {c} to every element of {v}",
                                           "increase each number in {v} by {c}"),
              "shift all of {v} up by {c}", "[e + {c} for e in {o}]",
              lambda v, c: [e + c for e in v], atomic=True, consts=_SMALL),
    Primitive("each_mul", "list", "list", ("multiply every element of {v} by {c}",
                                           "scale each number in {v} by {c}"),
              "make each entry of {v} {c} times as large", "[e * {c} for e in {o}]",
              lambda v, c: [e * c for e in v], atomic=True, consts=_FACTOR),
    Primitive("keep_gt", "list", "list", ("keep the elements of {v} greater than {c}",
                                          "drop the numbers in {v} that are at most {c}"),
              "throw away every entry of {v} not above {c}", "[e for e in {o} if e > {c}]",
              lambda v, c: [e for e in v if e > c], atomic=True, consts=_THRESHOLD,
              stmts=("kept = []\nfor e in {r}:\n    if e > {c}:\n        kept = kept + [e]\n"
                     "{r} = kept",)),
    Primitive("keep_even", "list", "list", ("keep the even elements of {v}",
                                            "drop the odd numbers in {v}"),
              "throw away every entry of {v} not divisible by two",
              "[e for e in {o} if e % 2 == 0]", lambda v, c: [e for e in v if e % 2 == 0],
              atomic=True,
              stmts=("kept = []\nfor e in {r}:\n    if e % 2 == 0:\n        kept = kept + [e]\n"
                     "{r} = kept",)),
    Primitive("total", "list", "int", ("sum the elements of {v}", "add up the numbers in {v}"),
              "find what all of {v} comes to together", "sum({o})", lambda v, c: sum(v),
              atomic=True, stmts=("total = 0\nfor e in {r}:\n    total += e\n{r} = total",)),
    Primitive("count", "list", "int", ("count the elements of {v}", "take the length of {v}"),
              "find how many entries {v} holds", "len({o})", lambda v, c: len(v), atomic=True),
    # string -> string, string -> int
    Primitive("reverse", "str", "str", ("reverse {v}", "write {v} backwards"),
              "turn {v} end to end", "{p}[::-1]", lambda v, c: v[::-1], atomic=True),
    Primitive("take", "str", "str", ("keep the first {c} characters of {v}",
                                     "take the first {c} characters of {v}"),
              "cut {v} down to its opening {c} letters", "{p}[:{c}]", lambda v, c: v[:c],
              atomic=True, consts=_CUT),
    Primitive("drop", "str", "str", ("drop the first {c} characters of {v}",
                                     "remove the first {c} characters of {v}"),
              "cut the opening {c} letters off {v}", "{p}[{c}:]", lambda v, c: v[c:],
              atomic=True, consts=_CUT),
    Primitive("repeat", "str", "str", ("repeat {v} {c} times", "write {v} {c} times in a row"),
              "chain {c} copies of {v}", "{p} * {c}", lambda v, c: v * c, consts=_REPEAT),
    Primitive("length", "str", "int", ("take the length of {v}", "count the characters of {v}"),
              "find how many letters {v} has", "len({o})", lambda v, c: len(v), atomic=True),
)
# fmt: on
PRIMITIVES: dict[str, Primitive] = {p.name: p for p in _PRIMITIVE_LIST}


# ---------------------------------------------------------------------------- writing a task


def evaluate(steps: tuple[str, ...], consts: tuple[int | None, ...], args: tuple) -> Any:
    """The structure's value: each step's fn applied in order."""
    first = PRIMITIVES[steps[0]]
    value = args if first.kind_in == "int2" else args[0]
    for name, c in zip(steps, consts, strict=True):
        value = PRIMITIVES[name].fn(value, c)
    return value


def expression(
    steps: tuple[str, ...],
    consts: tuple[int | None, ...],
    args: tuple[str, ...],
) -> str:
    """One Python expression for the whole chain, with parentheses around compound operands."""
    text, atomic = args[0], True
    for name, c in zip(steps, consts, strict=True):
        p = PRIMITIVES[name]
        if p.kind_in == "int2":
            text = p.expr.format(a=args[0], b=args[1])
        else:
            text = p.expr.format(p=text if atomic else f"({text})", o=text, c=c)
        atomic = p.atomic
    return text


def _indent(lines: list[str]) -> str:
    return "".join(f"    {line}\n" for line in lines)


def bodies(
    steps: tuple[str, ...],
    consts: tuple[int | None, ...],
    args: tuple[str, ...],
    var: str = "result",
) -> tuple[str, ...]:
    """Every correct body: one expression; step by step through `var`; and, when some step has
    one, step by step in the statement forms."""
    out = [_indent([f"return {expression(steps, consts, args)}"])]
    first = expression(steps[:1], consts[:1], args)
    lines = [f"{var} = {first}"]
    for name, c in zip(steps[1:], consts[1:], strict=True):
        lines.append(f"{var} = {expression((name,), (c,), (var,))}")
    out.append(_indent(lines + [f"return {var}"]))
    if any(PRIMITIVES[s].stmts for s in steps):
        int2 = PRIMITIVES[steps[0]].kind_in == "int2"
        lines = [f"{var} = {first if int2 else args[0]}"]
        for name, c in list(zip(steps, consts, strict=True))[1 if int2 else 0 :]:
            p = PRIMITIVES[name]
            stmt = (p.stmts[0] if p.stmts else f"{{r}} = {p.expr}").format(r=var, c=c, p=var, o=var)
            lines += stmt.split("\n")
        out.append(_indent(lines + [f"return {var}"]))
    return tuple(out)


def comment(
    steps: tuple[str, ...],
    consts: tuple[int | None, ...],
    args: tuple[str, ...],
    rng: random.Random,
    heldout_phrasing: bool = False,
) -> str:
    """'Add 3 to x, then take the absolute value of the result, then ...'. The first step names
    the argument(s); later steps say "the result" or "it"."""
    parts = []
    for i, (name, c) in enumerate(zip(steps, consts, strict=True)):
        p = PRIMITIVES[name]
        template = p.heldout if heldout_phrasing else rng.choice(p.phrasings)
        subject = args[0] if i == 0 else rng.choice(("the result", "it"))
        parts.append(template.format(v=subject, c=c, a=args[0], b=args[-1]))
    text = ", then ".join(parts) + "."
    return text[0].upper() + text[1:]


def _inputs(kind: str, consts: tuple[int | None, ...], rng: random.Random) -> list[tuple]:
    """N_CASES distinct argument tuples: edges (0, 1, -1, each constant c and c + 1) first,
    then random values of moderate size."""
    if kind == "int":
        edges = [0, 1, -1] + [v for c in consts if c is not None for v in (c, c + 1)]
        values: list[Any] = list(dict.fromkeys(edges))[: N_CASES // 2 + 2]
        while len(values) < N_CASES:
            v = rng.randint(-30, 30) if rng.random() < 0.7 else rng.randint(-1000, 1000)
            if v not in values:
                values.append(v)
        return [(v,) for v in values]
    if kind == "int2":
        pairs: list[tuple] = [(0, 0), (1, -1), (-2, 3), (5, 5)]
        while len(pairs) < N_CASES:
            pair = (rng.randint(-30, 30), rng.randint(-30, 30))
            if pair not in pairs:
                pairs.append(pair)
        return pairs
    return [(v,) for v in case_inputs(kind, rng, N_CASES)]


def _draw_cases(
    steps: tuple[str, ...], rng: random.Random, constants: str = "task"
) -> tuple[tuple[int | None, ...], tuple[Case, ...]] | None:
    """Random constants (from each primitive's range, or its wide range) and N_CASES cases,
    or None when the cases all expect one value."""
    ranges = [PRIMITIVES[s].consts for s in steps]
    if constants == "wide":
        ranges = [WIDE_CONSTANTS[r] if r else r for r in ranges]
    consts = tuple(rng.choice(r) if r else None for r in ranges)
    kind = PRIMITIVES[steps[0]].kind_in
    cases = tuple(Case(a, evaluate(steps, consts, a)) for a in _inputs(kind, consts, rng))
    return (consts, cases) if len({repr(c.expected) for c in cases}) >= 2 else None


def make_ladder_task(
    structure: Structure,
    word: str,
    rng: random.Random,
    heldout_phrasing: bool = False,
    constants: str = "task",
) -> CodeTask:
    """The structure with random constants, argument names, comment, reference body (the
    expression with probability EXPRESSION_SHARE, else another of `bodies`) and N_CASES cases,
    named `f_<word>`. Constants and inputs are redrawn until the cases take at least two
    values, so no constant function passes."""
    steps, kind = structure.steps, structure.kind
    for _ in range(MAX_DRAWS):
        drawn = _draw_cases(steps, rng, constants)
        if drawn is not None:
            consts, cases = drawn
            break
    else:
        raise ValueError(f"structure {structure.name} gave a constant function {MAX_DRAWS} times")
    args = rng.choice(ARG_PAIRS) if kind == "int2" else (rng.choice(ARG_NAMES[kind]),)
    name = f"{NEUTRAL_PREFIX}_{word}"
    prompt = (
        f"# {comment(steps, consts, args, rng, heldout_phrasing)}\ndef {name}({', '.join(args)}):\n"
    )
    var = rng.choice([v for v in STEP_VARS if v not in args])
    forms = bodies(steps, consts, args, var)
    reference = forms[0] if rng.random() < EXPRESSION_SHARE else rng.choice(forms[1:])
    return CodeTask(structure.name, name, prompt, ", ".join(args), Task(name, cases), reference)


# ---------------------------------------------------------------------------- structures


@dataclass(frozen=True)
class Structure:
    name: str  # the step names joined by ">", e.g. "add>abs>mul"
    steps: tuple[str, ...]
    group: str  # "pretrain", "rl" or "heldout"

    @property
    def depth(self) -> int:
        return len(self.steps)

    @property
    def kind(self) -> str:
        return PRIMITIVES[self.steps[0]].kind_in


def _fits(steps: tuple[str, ...]) -> bool:
    """Kinds chain, no step repeats the one before it, int2 only first, no abs of a square."""
    prims = [PRIMITIVES[s] for s in steps]
    if any(p.kind_in == "int2" for p in prims[1:]):
        return False
    for a, b in zip(prims, prims[1:], strict=False):
        if a.kind_out != b.kind_in or a.name == b.name or (a.name, b.name) == ("square", "abs"):
            return False
    return True


def _varies(steps: tuple[str, ...]) -> bool:
    """Whether random constants make the chain non-constant on its test inputs at least half the
    time: chains that are mostly constant (`neg` then `max` with c >= 0 of a list's length is
    always c; `mod` then `floordiv` then `max` nearly always) are left out."""
    rng = random.Random(">".join(steps))
    hits = 0
    for i in range(VARY_PROBES):
        hits += _draw_cases(steps, rng) is not None
        if hits * 2 >= VARY_PROBES or (i + 1 - hits) * 2 > VARY_PROBES:
            break
    return hits * 2 >= VARY_PROBES


@functools.cache
def _chains(depth: int) -> tuple[tuple[str, ...], ...]:
    """Every chain of `depth` steps that fits and varies, extending those of depth - 1."""
    shorter = _chains(depth - 1) if depth > 1 else ((),)
    return tuple(
        c + (p,) for c in shorter for p in PRIMITIVES if _fits(c + (p,)) and _varies(c + (p,))
    )


# chains the composition corpus trains, whole or as two consecutive steps of one of its programs
_TAUGHT = frozenset(s[i:j] for s in COMPOSITION_TRAIN for i in range(3) for j in range(i + 2, 4))


@functools.cache
def all_structures() -> tuple[Structure, ...]:
    """Fixed groups from a fixed shuffle: the first seed from SPLIT_SEED on whose split every
    primitive occurs in every group's depth 2. The same on every run and machine."""
    for seed in range(SPLIT_SEED, SPLIT_SEED + 100):
        out = _grouped(random.Random(seed))
        if all(
            {p for s in out if s.group == g and len(s.steps) == 2 for p in s.steps}
            == set(PRIMITIVES)
            for g in ("pretrain", "rl", "heldout")
        ):
            return out
    raise AssertionError("no split covers every primitive; change the shares")


def _grouped(rng: random.Random) -> tuple[Structure, ...]:
    out = [Structure(">".join(c), c, "pretrain") for c in _chains(1)]
    depth2 = [c for c in _chains(2) if c not in _TAUGHT]
    rng.shuffle(depth2)
    out += [Structure(">".join(c), c, "pretrain") for c in _chains(2) if c in _TAUGHT]
    n_pre, n_rl = round(PRETRAIN_SHARE * len(depth2)), round(RL_SHARE * len(depth2))
    out += [
        Structure(
            ">".join(c), c, "pretrain" if i < n_pre else "rl" if i < n_pre + n_rl else "heldout"
        )
        for i, c in enumerate(depth2)
    ]
    depth3 = list(_chains(3))
    rng.shuffle(depth3)
    trained = [c for c in depth3 if c in _TAUGHT]
    rest = [c for c in depth3 if c not in _TAUGHT]
    out += [Structure(">".join(c), c, "pretrain") for c in trained]
    out += [
        Structure(">".join(c), c, "rl" if i < len(rest) // 2 else "heldout")
        for i, c in enumerate(rest)
    ]
    return tuple(out)


GROUPS = ("pretrain", "rl", "heldout")


@functools.cache
def structures(group: str | None = None, depth: int | None = None) -> tuple[Structure, ...]:
    if group is not None and group not in GROUPS:
        raise ValueError(f"unknown group {group!r}; choose from {', '.join(GROUPS)}")
    return tuple(
        s
        for s in all_structures()
        if (group is None or s.group == group) and (depth is None or s.depth == depth)
    )


def rung_structures(rung: str) -> tuple[Structure, ...]:
    """The structures a rung draws from."""
    if rung in ("depth1", "depth1_heldout_phrasings"):
        return structures("pretrain", 1)
    if rung == "seen_depth2":
        return structures("pretrain", 2)
    if rung == "rl_only":
        return structures("rl")
    if rung == "unseen_depth2":
        return structures("heldout", 2)
    if rung == "unseen_depth3":
        return structures("heldout", 3)
    raise ValueError(f"unknown rung {rung!r}; choose from {', '.join(RUNGS)}")


# ---------------------------------------------------------------------------- task sets


def rung_tasks(
    rung: str, split: str, n: int, seed: int = 0, depths: tuple[int, ...] | None = None
) -> list[CodeTask]:
    """`n` tasks of `rung` named from `split`: the rung's structures (those of `depths`, when
    given) in a shuffled cycle, so every structure is used before any repeats; distinct names."""
    check_split(split)
    pool = [s for s in rung_structures(rung) if depths is None or s.depth in depths]
    if not pool:
        raise ValueError(f"rung {rung!r} has no structures of depth {depths}")
    rng = rng_for("ladder", rung, split, seed)
    order = list(pool)
    rng.shuffle(order)
    out, seen = [], set()
    while len(out) < n:
        word = random_name(rng, split)
        if word in seen:
            continue
        seen.add(word)
        out.append(
            make_ladder_task(
                order[len(out) % len(order)],
                word,
                rng,
                heldout_phrasing=rung == "depth1_heldout_phrasings",
            )
        )
    return out


def rl_ladder_tasks(
    split: str, n: int, seed: int = 0, depths: tuple[int, ...] | None = None
) -> list[CodeTask]:
    """The tasks RL trains (split "rl") and selects checkpoints (split "dev") on."""
    return rung_tasks("rl_only", split, n, seed, depths)


def ladder_document(index: int, seed: int, split: str = "train", constants: str = "task") -> str:
    """Pretraining document `index`: a task of a pretraining structure (depth drawn from
    DOCUMENT_DEPTHS) with constants from the tasks' ranges or the wide ones (LADDER_CONSTANTS),
    written out with its reference body, sometimes followed by a few assert lines showing
    calls."""
    if constants not in LADDER_CONSTANTS:
        raise ValueError(f"constants must be one of {LADDER_CONSTANTS}, got {constants!r}")
    rng = rng_for("ladder_document", split, seed, index)
    depth = rng.choices(list(DOCUMENT_DEPTHS), weights=list(DOCUMENT_DEPTHS.values()))[0]
    structure = rng.choice(structures("pretrain", depth))
    task = make_ladder_task(structure, random_name(rng, split), rng, constants=constants)
    text = task.prompt + task.reference
    if rng.random() < USAGE_PROB:
        shown = rng.sample(task.task.cases, rng.randint(1, 3))
        calls = (f"{task.name}({', '.join(repr(a) for a in c.args)})" for c in shown)
        text += "\n" + "".join(
            f"assert {call} == {c.expected!r}\n" for call, c in zip(calls, shown, strict=True)
        )
    return text
