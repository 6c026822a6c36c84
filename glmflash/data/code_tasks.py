"""Coding tasks: eight function families, each a prompt plus hidden test cases.

A prompt is one comment line and a def line; the completion is the indented body:

    # Return two times x.          <- prompt
    def double_kavo(x):
        return x * 2               <- completion, ending with a newline

Function names are `<family>_<word>`, the word a few consonant-vowel syllables. Which split a
word belongs to is a keyed hash of the word (`split_of_name`), fixed for all seeds, and a split
only ever emits its own words, so dev / rl / confirm names can never occur in pretraining
(which uses train names only), whatever seeds either side uses.

A family prefix gives the answer away: a model can write the body from the name alone. So a
task's name has a style (NAME_STYLES): `family` (`double_kavo`, the reference lab's format),
`neutral` (`f_kavo`: only the comment says what to compute) or `misleading` (another family's
prefix, `square_kavo` over "Return two times x.": a model that follows the name fails). The
style changes the name only; prompt, body and cases are the same. Pretraining writes
NEUTRAL_SHARE of its documents with neutral names, so that reading the comment pays.

Reference bodies use only + - * %, comparisons, not, slices, if, for and the builtins abs, sum,
len and range (no attributes, no **), so the verifier's allow-list accepts them.
"""

from __future__ import annotations

import hashlib
import random
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from glmflash.data import rng_for
from glmflash.verify.task import Case, Task

SPLITS = ("train", "dev", "rl", "confirm")
SPLIT_PERCENT = {"train": 85, "dev": 5, "rl": 5, "confirm": 5}  # share of all possible words
CONSONANTS = "bdfgklmnprstvz"
VOWELS = "aeiou"
SYLLABLES = (2, 3)  # 70**2 + 70**3 = 347,900 words, about 17k in each 5% split
_WORDS_OF_LENGTH = tuple((len(CONSONANTS) * len(VOWELS)) ** n for n in SYLLABLES)
N_CASES = 10
MAX_PER_FAMILY = 10_000
USAGE_PROB = 0.2  # share of pretraining documents followed by a few assert lines
NAME_STYLES = ("family", "neutral", "misleading")
NEUTRAL_PREFIX = "f"
NEUTRAL_SHARE = 0.5  # share of pretraining documents whose function name is neutral


@dataclass(frozen=True)
class Family:
    """One operation: its descriptions and correct bodies (templates over the argument `{a}`),
    argument names, the true function and the kind of value it takes."""

    name: str
    kind: str  # "int", "str" or "list"
    descriptions: tuple[str, ...]
    bodies: tuple[tuple[str, ...], ...]  # lines relative to the function's indentation
    fn: Callable[[Any], Any]


ARG_NAMES = {
    "int": ("x", "n", "value", "num", "a", "k"),
    "str": ("s", "text", "word"),
    "list": ("xs", "items", "values", "nums"),
}

_FAMILY_LIST = (
    Family(
        "increment",
        "int",
        (
            "Return {a} plus one.",
            "Return {a} increased by 1.",
            "Add one to {a} and return the result.",
            "Return the integer that follows {a}.",
            "Return {a} + 1.",
        ),
        (
            ("return {a} + 1",),
            ("return 1 + {a}",),
            ("result = {a} + 1", "return result"),
            ("{a} += 1", "return {a}"),
        ),
        lambda v: v + 1,
    ),
    Family(
        "double",
        "int",
        (
            "Return two times {a}.",
            "Return {a} multiplied by 2.",
            "Double {a} and return it.",
            "Return twice the value of {a}.",
            "Return {a} * 2.",
        ),
        (
            ("return {a} * 2",),
            ("return 2 * {a}",),
            ("return {a} + {a}",),
            ("result = {a} * 2", "return result"),
        ),
        lambda v: 2 * v,
    ),
    Family(
        "square",
        "int",
        (
            "Return {a} squared.",
            "Return {a} times itself.",
            "Return the square of {a}.",
            "Multiply {a} by itself and return the result.",
        ),
        (
            ("return {a} * {a}",),
            ("return abs({a}) * abs({a})",),
            ("result = {a} * {a}", "return result"),
        ),
        lambda v: v * v,
    ),
    Family(
        "absolute",
        "int",
        (
            "Return the absolute value of {a}.",
            "Return {a} without its sign.",
            "Return the distance of {a} from zero.",
            "Return {a} if it is not negative, otherwise -{a}.",
        ),
        (
            ("return abs({a})",),
            ("return {a} if {a} >= 0 else -{a}",),
            ("if {a} < 0:", "    return -{a}", "return {a}"),
        ),
        abs,
    ),
    Family(
        "nonnegative",
        "int",
        (
            "Return True if {a} is zero or positive, else False.",
            "Return whether {a} is nonnegative.",
            "Return True when {a} >= 0.",
            "Check that {a} is not negative.",
        ),
        (
            ("return {a} >= 0",),
            ("return 0 <= {a}",),
            ("return not {a} < 0",),
            ("if {a} >= 0:", "    return True", "return False"),
        ),
        lambda v: v >= 0,
    ),
    Family(
        "even",
        "int",
        (
            "Return True if {a} is even, else False.",
            "Return whether {a} is divisible by 2.",
            "Check if {a} is an even number.",
            "Return True when {a} % 2 == 0.",
        ),
        (
            ("return {a} % 2 == 0",),
            ("return not {a} % 2",),
            ("if {a} % 2 == 0:", "    return True", "return False"),
        ),
        lambda v: v % 2 == 0,
    ),
    Family(
        "reverse",
        "str",
        (
            "Return the string {a} reversed.",
            "Return {a} with its characters in reverse order.",
            "Reverse the text {a} and return it.",
            "Return {a} read backwards.",
        ),
        (
            ("return {a}[::-1]",),
            ("result = {a}[::-1]", "return result"),
            ("result = ''", "for ch in {a}:", "    result = ch + result", "return result"),
        ),
        lambda v: v[::-1],
    ),
    Family(
        "list_sum",
        "list",
        (
            "Return the sum of the numbers in {a}.",
            "Add up all the integers in the list {a}.",
            "Return the total of {a}.",
            "Return the sum of {a}, or 0 when it is empty.",
        ),
        (
            ("return sum({a})",),
            ("total = 0", "for v in {a}:", "    total += v", "return total"),
            ("total = 0", "for i in range(len({a})):", "    total += {a}[i]", "return total"),
        ),
        sum,
    ),
)

FAMILIES: tuple[str, ...] = tuple(f.name for f in _FAMILY_LIST)
_FAMILIES = {f.name: f for f in _FAMILY_LIST}


@dataclass(frozen=True)
class CodeTask:
    family: str
    name: str  # the function name, `<prefix>_<word>` (see NAME_STYLES), = task.entry_point
    prompt: str  # "# <description>\ndef <name>(<arg>):\n"
    arg: str
    task: Task  # the hidden test cases
    reference: str  # one correct body: indented lines, ending with a newline


def family(name: str) -> Family:
    if name not in _FAMILIES:
        raise ValueError(f"unknown family {name!r}; choose from {', '.join(FAMILIES)}")
    return _FAMILIES[name]


def render_body(lines: Sequence[str], arg: str) -> str:
    return "".join("    " + line.format(a=arg) + "\n" for line in lines)


def reference_bodies(family_name: str, arg: str) -> tuple[str, ...]:
    """Every correct body of the family, written for argument `arg`."""
    return tuple(render_body(lines, arg) for lines in family(family_name).bodies)


# ---------------------------------------------------------------------------- names and splits


def split_of_name(name: str) -> str:
    """The split a word belongs to: bucket = blake2b_key(word) mod 100, cut by SPLIT_PERCENT.

    Accepts the word or a whole function name `<family>_<word>` (the word has no underscore).
    """
    word = name.rsplit("_", 1)[-1]
    digest = hashlib.blake2b(word.encode(), digest_size=8, key=b"glmflash/names").digest()
    bucket = int.from_bytes(digest, "little") % 100
    for split in SPLITS:
        if bucket < SPLIT_PERCENT[split]:
            return split
        bucket -= SPLIT_PERCENT[split]
    raise AssertionError("SPLIT_PERCENT must sum to 100")


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")


def random_name(rng: random.Random, split: str) -> str:
    """A pronounceable word of `split`: drawn uniformly, rejected until split_of_name agrees."""
    check_split(split)
    while True:
        n = rng.choices(SYLLABLES, weights=_WORDS_OF_LENGTH)[0]
        word = "".join(rng.choice(CONSONANTS) + rng.choice(VOWELS) for _ in range(n))
        if split_of_name(word) == split:
            return word


# ---------------------------------------------------------------------------- test cases

_TEXT_CHARS = string.ascii_letters + string.digits + " "


def _random_int(rng: random.Random) -> int:
    return rng.randint(-20, 20) if rng.random() < 0.5 else rng.randint(-10_000, 10_000)


def _random_str(rng: random.Random) -> str:
    while True:  # never a palindrome, so returning the input unchanged fails
        s = "".join(rng.choice(_TEXT_CHARS) for _ in range(rng.randint(2, 10)))
        if s != s[::-1]:
            return s


def _random_list(rng: random.Random) -> list[int]:
    return [rng.randint(-50, 50) for _ in range(rng.randint(2, 8))]


_RANDOM_INPUT = {"int": _random_int, "str": _random_str, "list": _random_list}


def case_inputs(kind: str, rng: random.Random, n: int = N_CASES) -> list[Any]:
    """`n` distinct inputs: the edge cases of the kind first, then random values."""
    edges: list[Any] = {
        "int": [0, 1, -1],
        "str": ["", rng.choice(string.ascii_lowercase)],
        "list": [[], [rng.randint(-50, -1)]],
    }[kind]
    values = edges[:n]
    while len(values) < n:
        v = _RANDOM_INPUT[kind](rng)
        if v not in values:
            values.append(v)
    return values


def make_cases(family_name: str, rng: random.Random, n: int = N_CASES) -> tuple[Case, ...]:
    fam = family(family_name)
    return tuple(Case((v,), fam.fn(v)) for v in case_inputs(fam.kind, rng, n))


# ---------------------------------------------------------------------------- tasks


def function_name(family_name: str, word: str, style: str = "family") -> str:
    """`<prefix>_<word>` in a NAME_STYLE. The misleading prefix is another family's, chosen by
    the word alone, so the three styles of one task differ in the prefix only."""
    if style == "family":
        return f"{family_name}_{word}"
    if style == "neutral":
        return f"{NEUTRAL_PREFIX}_{word}"
    if style == "misleading":
        others = [f for f in FAMILIES if f != family_name]
        return f"{rng_for('misleading', word).choice(others)}_{word}"
    raise ValueError(f"unknown name style {style!r}; choose from {', '.join(NAME_STYLES)}")


def _write(
    fam: Family,
    word: str,
    rng: random.Random,
    style: str = "family",
) -> tuple[str, str, str, str]:
    """(name, arg, prompt, body) with a random argument name, description and correct body."""
    name = function_name(fam.name, word, style)
    arg = rng.choice(ARG_NAMES[fam.kind])
    prompt = f"# {rng.choice(fam.descriptions).format(a=arg)}\ndef {name}({arg}):\n"
    return name, arg, prompt, render_body(rng.choice(fam.bodies), arg)


def make_task(
    family_name: str,
    word: str,
    rng: random.Random,
    style: str = "family",
) -> CodeTask:
    """The task named in `style` from `word`: a random prompt and reference body, and N_CASES
    cases."""
    fam = family(family_name)
    name, arg, prompt, reference = _write(fam, word, rng, style)
    return CodeTask(fam.name, name, prompt, arg, Task(name, make_cases(fam.name, rng)), reference)


def tasks(
    split: str,
    families: Sequence[str] | None = None,
    per_family: int = 8,
    seed: int = 0,
    style: str = "family",
) -> list[CodeTask]:
    """`per_family` tasks of each family, family by family, with distinct names per family,
    named in `style` (the same tasks in every style but for the name).

    Each family draws from its own generator, so a family's tasks do not depend on which other
    families are asked for, and the first k tasks are the same for any per_family >= k.
    """
    check_split(split)
    names = FAMILIES if families is None else tuple(families)
    for f in names:
        family(f)
    if not isinstance(per_family, int) or not 0 <= per_family <= MAX_PER_FAMILY:
        raise ValueError(
            f"per_family must be an integer in [0, {MAX_PER_FAMILY}], got {per_family!r}"
        )
    out: list[CodeTask] = []
    for f in names:
        rng = rng_for("tasks", split, seed, f)
        seen: set[str] = set()
        while len(seen) < per_family:
            word = random_name(rng, split)
            if word not in seen:
                seen.add(word)
                out.append(make_task(f, word, rng, style))
    return out


def interleaved_tasks(
    split: str, families: Sequence[str], n: int, seed: int = 0, style: str = "family"
) -> list[CodeTask]:
    """`n` tasks cycling through `families` (one of each, then the next of each, ...): the
    first tasks of every family, whatever n is."""
    per = -(-n // len(families)) if families else 0
    by_family = [tasks(split, [f], per_family=per, seed=seed, style=style) for f in families]
    return [fam[i] for i in range(per) for fam in by_family][:n]


def task_document(index: int, seed: int, split: str = "train") -> str:
    """One task of `split` written out: prompt + a random correct body, sometimes followed by a
    blank line and a few `assert name(v) == result` lines showing calls. NEUTRAL_SHARE of the
    documents name the function neutrally, the rest with the family prefix."""
    rng = rng_for("task_document", split, seed, index)
    fam = _FAMILIES[rng.choice(FAMILIES)]
    style = "neutral" if rng.random() < NEUTRAL_SHARE else "family"
    name, _, prompt, body = _write(fam, random_name(rng, split), rng, style)
    text = prompt + body
    if rng.random() < USAGE_PROB:
        shown = (_RANDOM_INPUT[fam.kind](rng) for _ in range(rng.randint(1, 3)))
        text += "\n" + "".join(f"assert {name}({v!r}) == {fam.fn(v)!r}\n" for v in shown)
    return text
