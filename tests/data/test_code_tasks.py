"""Code tasks: prompt format, hidden cases against independent oracles, every reference body
run in-process, name splits disjoint by construction, determinism from (seed, index)."""

import ast
import copy
import functools
import itertools
import operator
import os
import random
import re
import subprocess
import sys

import pytest

from glmflash.data import code_tasks as ct

ORACLE = {
    "increment": lambda v: v + 1,
    "double": lambda v: v * 2,
    "square": lambda v: v**2,
    "absolute": lambda v: v if v >= 0 else -v,
    "nonnegative": lambda v: not v < 0,
    "even": lambda v: v % 2 == 0,
    "reverse": lambda s: "".join(reversed(s)),
    "list_sum": lambda xs: functools.reduce(operator.add, xs, 0),
}
INPUT_TYPE = {"reverse": str, "list_sum": list}  # all others take an int
OUTPUT_TYPE = {"nonnegative": bool, "even": bool, "reverse": str}  # all others return an int
WORD = re.compile(r"^(?:[bdfgklmnprstvz][aeiou]){2,3}$")


def passes(task: ct.CodeTask, body: str) -> bool:
    """Run prompt + body in-process and compare every case by exact type and value."""
    namespace: dict = {}
    try:
        exec(task.prompt + body, namespace)
        fn = namespace[task.task.entry_point]
        for case in task.task.cases:
            actual = fn(*copy.deepcopy(case.args))
            if type(actual) is not type(case.expected) or actual != case.expected:
                return False
    except Exception:
        return False
    return True


def renamed(t: ct.CodeTask, arg: str) -> ct.CodeTask:
    """Task t with its parameter renamed to `arg`."""
    prompt = t.prompt.replace(f"({t.arg}):", f"({arg}):")
    return ct.CodeTask(t.family, t.name, prompt, arg, t.task, t.reference)


@pytest.fixture(scope="module")
def dev_tasks():
    return ct.tasks("dev", per_family=6, seed=11)


def test_families_and_clear_errors():
    assert ct.FAMILIES == (
        "increment",
        "double",
        "square",
        "absolute",
        "nonnegative",
        "even",
        "reverse",
        "list_sum",
    )
    with pytest.raises(ValueError, match="unknown split"):
        ct.tasks("test")
    with pytest.raises(ValueError, match="unknown family"):
        ct.tasks("dev", families=["cube"])
    for bad in (-1, 2.5, ct.MAX_PER_FAMILY + 1):
        with pytest.raises(ValueError, match="per_family"):
            ct.tasks("dev", per_family=bad)


@pytest.mark.parametrize("per_family", [0, 1, 3, 17])
def test_any_per_family_count(per_family):
    families = ("double", "reverse", "list_sum")
    got = ct.tasks("rl", families=families, per_family=per_family, seed=2)
    assert len(got) == len(families) * per_family
    for f in families:
        names = [t.name for t in got if t.family == f]
        assert len(names) == per_family and len(set(names)) == per_family


def test_tasks_deterministic_and_independent_of_other_families():
    a = ct.tasks("confirm", per_family=4, seed=5)
    assert a == ct.tasks("confirm", per_family=4, seed=5)
    assert [t.name for t in a] != [t.name for t in ct.tasks("confirm", per_family=4, seed=6)]
    only_even = ct.tasks("confirm", families=["even"], per_family=4, seed=5)
    assert only_even == [t for t in a if t.family == "even"]
    assert ct.tasks("confirm", per_family=9, seed=5)[:4] == a[:4]  # a prefix for larger counts


def test_prompt_format(dev_tasks):
    families = "|".join(ct.FAMILIES)
    for t in dev_tasks:
        m = re.fullmatch(rf"# ([^\n]+\.)\ndef (({families})_([a-z]+))\((\w+)\):\n", t.prompt)
        assert m, t.prompt
        assert m.group(2) == t.name == t.task.entry_point and m.group(3) == t.family
        assert WORD.match(m.group(4)) and m.group(5) == t.arg
        assert re.search(rf"\b{t.arg}\b", m.group(1))
        assert t.arg in ct.ARG_NAMES[ct.family(t.family).kind]
        assert t.reference.endswith("\n") and all(
            line.startswith("    ") for line in t.reference.splitlines()
        )
    example = re.compile(r"# Return two times (\w+)\.\ndef double_[a-z]+\(\1\):\n")
    assert any(example.fullmatch(t.prompt) for t in ct.tasks("train", ["double"], 40))


def test_cases_match_oracles_with_exact_types_and_edge_cases(dev_tasks):
    for t in dev_tasks:
        cases = t.task.cases
        assert len(cases) >= 8
        inputs = [c.args[0] for c in cases]
        assert all(len(c.args) == 1 for c in cases)
        assert len({repr(v) for v in inputs}) == len(inputs)  # distinct
        in_type = INPUT_TYPE.get(t.family, int)
        assert all(type(v) is in_type for v in inputs)
        if in_type is int:
            assert 0 in inputs and any(v < 0 for v in inputs) and any(v > 0 for v in inputs)
        elif in_type is str:
            assert "" in inputs
        else:
            assert [] in inputs and all(type(e) is int for v in inputs for e in v)
            assert any(e < 0 for v in inputs for e in v)
        for c in cases:
            assert type(c.expected) is OUTPUT_TYPE.get(t.family, int)
            assert c.expected == ORACLE[t.family](c.args[0])


def test_cases_are_random_per_task(dev_tasks):
    for f in ct.FAMILIES:
        case_sets = [repr(t.task.cases) for t in dev_tasks if t.family == f]
        assert len(set(case_sets)) == len(case_sets)


def test_every_reference_body_passes_for_every_argument_name():
    rng = random.Random(0)
    for f in ct.FAMILIES:
        fam = ct.family(f)
        for arg in ct.ARG_NAMES[fam.kind]:
            t = renamed(ct.make_task(f, ct.random_name(rng, "dev"), rng), arg)
            bodies = ct.reference_bodies(f, arg)
            assert len(bodies) >= 3 and len(set(bodies)) == len(bodies)
            assert len(fam.descriptions) >= 4
            for body in bodies:
                assert passes(t, body), (f, arg, body)


def test_task_references_pass_and_wrong_bodies_fail(dev_tasks):
    for t in dev_tasks:
        assert passes(t, t.reference)
        assert t.reference in ct.reference_bodies(t.family, t.arg)
        assert not passes(t, "    pass\n")
        assert not passes(t, f"    return {t.arg}\n")  # the identity
        for other in ct.FAMILIES:  # another family's correct body is wrong here
            if other != t.family and ct.family(other).kind == ct.family(t.family).kind:
                assert not passes(t, ct.reference_bodies(other, t.arg)[0]), (t.name, other)


def test_a_lookup_table_of_another_task_fails(dev_tasks):
    """Cases are drawn per task, so answers memorised from one task do not pass another."""
    for a, b in itertools.pairwise(dev_tasks):
        if a.family != b.family:
            continue
        table = {repr(c.args[0]): c.expected for c in a.task.cases}
        body = f"    table = {table!r}\n    return table[repr({b.arg})]\n"
        assert passes(renamed(a, b.arg), body)
        assert not passes(b, body)


def test_bodies_stay_inside_the_verifier_grammar():
    allowed_calls = {"abs", "sum", "len", "range"}
    for f in ct.FAMILIES:
        for body in ct.reference_bodies(f, ct.ARG_NAMES[ct.family(f).kind][0]):
            tree = ast.parse("def f(x):\n" + body)
            for node in ast.walk(tree):
                assert not isinstance(node, (ast.Attribute, ast.Import, ast.ImportFrom, ast.Pow))
                if isinstance(node, ast.Call):
                    assert isinstance(node.func, ast.Name) and node.func.id in allowed_calls
                if isinstance(node, ast.Name):
                    assert not node.id.startswith("__")


def test_names_are_words_of_their_own_split_and_disjoint():
    rng = random.Random(7)
    drawn = {s: {ct.random_name(rng, s) for _ in range(800)} for s in ct.SPLITS}
    for s, names in drawn.items():
        assert all(WORD.match(n) and ct.split_of_name(n) == s for n in names)
        assert len(names) > 740  # uniform over ~17k words per 5% split: few repeats
    for a, b in itertools.combinations(ct.SPLITS, 2):
        assert not drawn[a] & drawn[b]
    with pytest.raises(ValueError, match="unknown split"):
        ct.random_name(rng, "holdout")


def test_split_sizes_follow_split_percent():
    words = [
        "".join(p)
        for p in itertools.product([c + v for c in ct.CONSONANTS for v in ct.VOWELS], repeat=2)
    ]
    counts = {s: 0 for s in ct.SPLITS}
    for w in words:
        counts[ct.split_of_name(w)] += 1
    for s in ct.SPLITS:
        assert abs(counts[s] / len(words) - ct.SPLIT_PERCENT[s] / 100) < 0.015


def test_split_of_name_accepts_function_names():
    for t in ct.tasks("rl", per_family=2, seed=3):
        assert ct.split_of_name(t.name) == ct.split_of_name(t.name.rsplit("_", 1)[1]) == "rl"


def test_pretraining_names_never_meet_evaluation_names():
    docs = [ct.task_document(i, seed) for seed in (0, 1) for i in range(1000)]
    pre = {m for d in docs for m in re.findall(r"^def (\w+)\(", d, re.M)}
    assert len(pre) > 1900
    assert all(ct.split_of_name(n) == "train" for n in pre)
    for split in ("dev", "rl", "confirm"):
        held = {t.name for seed in (0, 1) for t in ct.tasks(split, per_family=25, seed=seed)}
        assert all(ct.split_of_name(n) == split for n in held)
        words = {n.rsplit("_", 1)[1] for n in held}
        assert not words & {n.rsplit("_", 1)[1] for n in pre}


def test_pretrain_documents_are_correct_programs():
    """Each document is prompt + a correct body (+ asserts that hold): run it, then check the
    function against the oracle."""
    families = set()
    for i in range(300):
        doc = ct.task_document(i, 4)
        header, def_line = doc.split("\n")[:2]
        assert header.startswith("# ") and def_line.startswith("def ")
        namespace: dict = {}
        exec(doc, namespace)  # the assert lines, if any, must hold
        name = re.match(r"def (\w+)\(", def_line).group(1)
        family = family_of_comment(header)
        assert name.rsplit("_", 1)[0] in (family, ct.NEUTRAL_PREFIX)
        families.add(family)
        probe = {str: "abc", list: [3, -1]}.get(INPUT_TYPE.get(family, int), -3)
        assert namespace[name](probe) == ORACLE[family](probe)
    assert families == set(ct.FAMILIES)
    with_calls = [ct.task_document(i, 4) for i in range(300)]
    share = sum("\nassert " in d for d in with_calls) / len(with_calls)
    assert 0.05 < share < 0.4  # the completion format dominates


def family_of_comment(header: str) -> str:
    """The one family whose description, for some argument name, is this comment line."""
    [family] = {
        f
        for f in ct.FAMILIES
        for d in ct.family(f).descriptions
        for a in ct.ARG_NAMES[ct.family(f).kind]
        if header == "# " + d.format(a=a)
    }
    return family


def test_pretraining_names_half_neutral():
    prefixes = [
        re.search(r"^def (\w+)_\w+\(", ct.task_document(i, 5), re.M).group(1) for i in range(2000)
    ]
    neutral = prefixes.count(ct.NEUTRAL_PREFIX) / len(prefixes)
    assert abs(neutral - ct.NEUTRAL_SHARE) < 0.05
    assert set(prefixes) == {ct.NEUTRAL_PREFIX, *ct.FAMILIES}


def test_name_styles_change_the_name_only():
    by_style = {s: ct.tasks("confirm", per_family=4, seed=2, style=s) for s in ct.NAME_STYLES}
    for fam, neu, mis in zip(*by_style.values(), strict=True):
        word = fam.name.rsplit("_", 1)[1]
        assert fam.name == f"{fam.family}_{word}" and neu.name == f"f_{word}"
        prefix = mis.name.rsplit("_", 1)[0]
        assert prefix in ct.FAMILIES and prefix != fam.family and mis.name.endswith(word)
        for t in (neu, mis):
            assert t.prompt == fam.prompt.replace(fam.name, t.name)
            assert t.task.cases == fam.task.cases and t.task.entry_point == t.name
            assert t.reference == fam.reference and ct.split_of_name(t.name) == "confirm"
    with pytest.raises(ValueError, match="unknown name style"):
        ct.tasks("dev", style="random")


def test_interleaved_tasks_cycle_through_families():
    got = ct.interleaved_tasks("rl", ["double", "even", "reverse"], 7, seed=4)
    assert [t.family for t in got] == ["double", "even", "reverse"] * 2 + ["double"]
    assert [t.name for t in got[::3]] == [t.name for t in ct.tasks("rl", ["double"], 3, 4)]


def test_task_document_depends_on_seed_and_index_alone():
    forward = [ct.task_document(i, 9) for i in range(40)]
    backward = [ct.task_document(i, 9) for i in reversed(range(40))][::-1]
    assert forward == backward
    assert len(set(forward)) == len(forward)
    assert forward != [ct.task_document(i, 10) for i in range(40)]


def test_same_text_in_a_process_with_another_hash_seed():
    code = (
        "from glmflash.data import code_tasks as ct\n"
        "print(repr([ct.task_document(i, 3) for i in range(5)]))\n"
        "print(repr(ct.tasks('dev', per_family=2, seed=3)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    ).stdout
    here = (
        repr([ct.task_document(i, 3) for i in range(5)])
        + "\n"
        + repr(ct.tasks("dev", per_family=2, seed=3))
        + "\n"
    )
    assert out == here
