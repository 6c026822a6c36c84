"""Stage 1: the syntax-tree validator accepts plain functions and rejects everything else."""

import random

import pytest

from glmflash.verify.validate import ALLOWED_BUILTINS, validate

ACCEPTED = [
    "def f(x):\n    return x + 1\n",
    "def f(x):\n    '''Return two times x.'''\n    return 2 * x\n",
    "def f(x):\n    if x < 0:\n        return -x\n    else:\n        return x\n",
    "def f(xs):\n    total = 0\n    for v in xs:\n        total += v\n    return total\n",
    "def f(s):\n    return s[::-1]\n",
    "def f(s):\n    out = ''\n    for i in range(len(s) - 1, -1, -1):\n        out = out + s[i]\n"
    "    return out\n",
    "def f(x):\n    n = 0\n    while n < 3:\n        n += 1\n        if n == 2:\n"
    "            break\n        continue\n    return n\n",
    "def f(xs):\n    return sum(v for v in xs if v % 2 == 0)\n",
    "def f(xs):\n    return sorted(xs, reverse=True)\n",
    "def f(x):\n    return {'a': x, 'b': [x, (x, None)], 'c': {x}}\n",
    "def f(x):\n    return f'{x}-{x!r:>5}'\n",
    "def f(x):\n    return isinstance(x, int) and not x is None\n",
    "def f(x):\n    d = {k: k * 2 for k in range(x)}\n    del d[0]\n    return d\n",
    "def f(x):\n    return f(x - 1) if x > 0 else 0\n",
    "def f(_):\n    for _ in range(3):\n        pass\n    return 0\n",
    "def f(a, b):\n    return divmod(a, b)\n",
]


@pytest.mark.parametrize("source", ACCEPTED)
def test_accepts_plain_functions(source):
    n_args = 2 if "(a, b)" in source else 1
    assert validate(source, "f", n_args) is None


REJECTED = [  # (source, fragment of the reason)
    ("import os\n", "exactly one function"),
    ("def f(x):\n    return x\ndef g(x):\n    return x\n", "exactly one function"),
    ("def g(x):\n    return x\n", "expected 'f'"),
    ("x = 1\n", "exactly one function"),
    ("def f(x):\n    import os\n    return x\n", "Import is not allowed"),
    ("def f(x):\n    from os import path\n    return x\n", "ImportFrom is not allowed"),
    ("def f(x):\n    return x.real\n", "Attribute is not allowed"),
    ("def f(x):\n    return ().__class__.__bases__\n", "Attribute is not allowed"),
    ("def f(x):\n    return f.__globals__\n", "Attribute is not allowed"),
    ("def f(x):\n    return __import__('os')\n", "'__import__' is not allowed"),
    ("def f(x):\n    return _＿import＿＿('os')\n", "'__import__' is not allowed"),  # NFKC
    ("def f(x):\n    __x = 1\n    return x\n", "'__x' is not allowed"),
    ("def f(__x):\n    return 1\n", "'__x' is not allowed"),
    ("def __f__(x):\n    return 1\n", "expected"),
    ("def f(x):\n    return getattr(x, 'real')\n", "'getattr' is not allowed"),
    ("def f(x):\n    return eval('x')\n", "'eval' is not allowed"),
    ("def f(x):\n    return globals()\n", "'globals' is not allowed"),
    ("def f(x):\n    return open('/etc/passwd')\n", "'open' is not allowed"),
    ("def f(x):\n    return type(x)\n", "'type' is not allowed"),
    ("def f(x):\n    print(x)\n    return x\n", "'print' is not allowed"),
    ("def f(x):\n    return y\n", "'y' is not allowed"),
    ("def f(x):\n    exit()\n", "'exit' is not allowed"),
    ("def f(x):\n    global g\n    return x\n", "Global is not allowed"),
    ("def f(x):\n    def g():\n        nonlocal x\n    return x\n", "FunctionDef is not allowed"),
    ("def f(x):\n    class A:\n        pass\n    return x\n", "ClassDef is not allowed"),
    ("def f(x):\n    return (lambda: x)()\n", "Lambda is not allowed"),
    (
        "def f(x):\n    try:\n        return 1 // 0\n    except:\n        return x\n",
        "Try is not allowed",
    ),
    ("def f(x):\n    raise SystemExit\n", "Raise is not allowed"),
    ("def f(x):\n    assert x\n    return x\n", "Assert is not allowed"),
    ("def f(x):\n    with x:\n        return x\n", "With is not allowed"),
    ("def f(x):\n    yield x\n", "Yield is not allowed"),
    ("async def f(x):\n    return x\n", "exactly one function"),
    ("def f(x):\n    return [y async for y in x]\n", "not allowed"),
    ("def f(x):\n    return max(*x)\n", "Starred is not allowed"),
    ("def f(x):\n    return dict(**x)\n", "keyword unpacking"),
    ("def f(x):\n    return (y := x)\n", "NamedExpr is not allowed"),
    ("def f(x):\n    match x:\n        case 1:\n            return 1\n", "Match is not allowed"),
    ("def f(x):\n    return b'x'\n", "constant of type bytes"),
    ("def f(x):\n    return 1j\n", "constant of type complex"),
    ("def f(x):\n    return ...\n", "constant of type ellipsis"),
    ("def f(*x):\n    return x\n", "plain positional"),
    ("def f(x=1):\n    return x\n", "plain positional"),
    ("def f(x, /):\n    return x\n", "plain positional"),
    ("def f(*, x):\n    return x\n", "plain positional"),
    ("def f(x: int):\n    return x\n", "annotations"),
    ("def f(x) -> int:\n    return x\n", "annotations"),
    ("@abs\ndef f(x):\n    return x\n", "decorators"),
    ("def f(x):\n    break\n", "does not compile"),
    ("def f(x):\n    for y in x:\n        pass\n    continue\n", "does not compile"),
    ("def f(x)\n    return x\n", "does not parse"),
    ("def f(x):\n    return x\x00\n", "does not parse"),
    ("def f(x):\n    return " + "(" * 10000 + "x" + ")" * 10000 + "\n", "longer than"),
]


@pytest.mark.parametrize("source, fragment", REJECTED)
def test_rejects_with_reason(source, fragment):
    reason = validate(source, "f", 1)
    assert reason is not None and fragment in reason, reason


def test_argument_count_must_match_cases():
    assert "does not compile" in validate("def f(x, x):\n    return x\n", "f")
    assert validate("def f(a, b):\n    return a\n", "f", 2) is None
    assert "takes 2 parameters" in validate("def f(a, b):\n    return a\n", "f", 1)
    assert validate("def f(a, b):\n    return a\n", "f") is None  # no arity given


@pytest.mark.parametrize(
    "source",
    [
        "(" * 10000 + ")" * 10000,  # the tokenizer's parenthesis limit
        "-" * 100000 + "1",  # parser stack
        "x" + "+x" * 100000,  # recursion while building the tree
        "not " * 50000 + "1",
        "def f(x):\n    return " + "[" * 150 + "x" + "]" * 150 + "\n",  # parses, too deep
        "def f(x):\n    return " + "-" * 300 + "x\n",
    ],
)
def test_hostile_sizes_and_nesting_are_reasons_not_errors(source):
    reason = validate(source, "f", 1, max_chars=10**6)
    assert reason is not None
    assert any(word in reason for word in ("parse", "deeper", "nodes", "function")), reason


def test_caps_are_exact():
    body = "def f(x):\n    return x" + " + x" * 20 + "\n"
    assert validate(body, "f", max_chars=len(body)) is None
    assert "longer than" in validate(body, "f", max_chars=len(body) - 1)
    nested = "def f(x):\n    return " + "(" * 5 + "-" * 10 + "x" + ")" * 5 + "\n"
    depth_ok = [d for d in range(5, 40) if validate(nested, "f", max_depth=d) is None]
    assert depth_ok and "deeper" in validate(nested, "f", max_depth=depth_ok[0] - 1)
    assert "syntax nodes" in validate(body, "f", max_nodes=10)


def test_dangerous_builtins_are_not_allowed():
    for name in (
        "open",
        "eval",
        "exec",
        "compile",
        "getattr",
        "setattr",
        "delattr",
        "vars",
        "globals",
        "locals",
        "type",
        "object",
        "__import__",
        "breakpoint",
        "input",
        "print",
        "help",
        "memoryview",
        "super",
        "classmethod",
        "exit",
        "quit",
        "id",
    ):
        assert name not in ALLOWED_BUILTINS
        assert validate(f"def f(x):\n    return {name}\n", "f") is not None


def test_random_garbage_never_raises():
    rng = random.Random(0)
    alphabet = "def f(x):return[]{}()'\"\\ \n\t#*+-/%<>=!.,:;@_0123456789abcxyzé\x00"
    atoms = [
        "def",
        "f",
        "(",
        ")",
        ":",
        "\n    ",
        "return",
        "x",
        "[",
        "]",
        "lambda",
        "**",
        "*",
        "if",
        "else",
        "for",
        "in",
        "yield",
        "'",
        '"""',
        "\\",
        "not",
        "__",
        ".",
        ",",
    ]
    for i in range(400):
        if i % 2:
            source = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 120)))
        else:
            source = "def f(x):\n    return " + " ".join(rng.choices(atoms, k=rng.randint(1, 40)))
        reason = validate(source, "f", 1)
        assert reason is None or isinstance(reason, str)


def test_non_string_source_is_invalid():
    assert validate(b"def f(x):\n    return x\n", "f") == "source is not a string"
