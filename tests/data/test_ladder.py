"""The task ladder: every body of every structure runs correctly (in-process and through the real
verifier), cases agree with an independent oracle, groups are a fixed partition that keeps
held-out structures and phrasings out of every training text, names are neutral and of their
split."""

import ast
import copy
import random
import re

import pytest

from glmflash.data import code_tasks as ct
from glmflash.data import compositions
from glmflash.data import ladder as L
from glmflash.data.stream import make_corpus
from glmflash.verify.sandbox import verify_many
from glmflash.verify.validate import validate

# independent of ladder.Primitive.fn: (value, c) -> value
ORACLE = {
    "add": lambda v, c: v + c,
    "sub": lambda v, c: v + (-c),
    "mul": lambda v, c: sum([v] * c),
    "neg": lambda v, c: 0 - v,
    "abs": lambda v, c: v if v >= 0 else -v,
    "square": lambda v, c: v**2,
    "floordiv": lambda v, c: (v - v % c) // c,
    "mod": lambda v, c: v - c * (v // c),
    "min": lambda v, c: sorted([v, c])[0],
    "max": lambda v, c: sorted([v, c])[1],
    "cond": lambda v, c: v + (-c if v > c else c),
    "sum2": lambda v, c: v[0] + v[1],
    "diff2": lambda v, c: v[0] - v[1],
    "prod2": lambda v, c: v[0] * v[1],
    "max2": lambda v, c: sorted(v)[1],
    "min2": lambda v, c: sorted(v)[0],
    "each_add": lambda v, c: list(map(lambda e: e + c, v)),
    "each_mul": lambda v, c: list(map(lambda e: e * c, v)),
    "keep_gt": lambda v, c: list(filter(lambda e: e > c, v)),
    "keep_even": lambda v, c: list(filter(lambda e: not e & 1, v)),
    "total": lambda v, c: sum(v),
    "count": lambda v, c: sum(1 for _ in v),
    "reverse": lambda v, c: "".join(reversed(v)),
    "take": lambda v, c: v[0:c],
    "drop": lambda v, c: v[min(c, len(v)) :],
    "repeat": lambda v, c: "".join([v] * c),
    "length": lambda v, c: sum(1 for _ in v),
}
N_PER_RUNG = 40


def comment_constants(task: ct.CodeTask, structure: L.Structure) -> tuple[int | None, ...]:
    """Each step's constant read back from the comment (a phrasing names it 0-3 times)."""
    numbers = iter(int(n) for n in re.findall(r"\d+", task.prompt.split("\n")[0]))
    out: list[int | None] = []
    for step in structure.steps:
        mentions = [next(numbers) for _ in range(L.PRIMITIVES[step].phrasings[0].count("{c}"))]
        assert len(set(mentions)) <= 1, task.prompt
        out.append(mentions[0] if mentions else None)
    assert next(numbers, None) is None, task.prompt
    return tuple(out)


def oracle_value(structure: L.Structure, consts, args):
    value = args if structure.kind == "int2" else args[0]
    for step, c in zip(structure.steps, consts, strict=True):
        value = ORACLE[step](value, c)
    return value


def run_in_process(task: ct.CodeTask, body: str) -> bool:
    namespace: dict = {}
    exec(task.prompt + body, namespace)
    fn = namespace[task.name]
    return all(
        type(out := fn(*copy.deepcopy(c.args))) is type(c.expected) and out == c.expected
        for c in task.task.cases
    )


def one_task(structure: L.Structure, seed: int = 0) -> ct.CodeTask:
    return L.make_ladder_task(structure, "kavo", random.Random(f"{structure.name}/{seed}"))


def test_primitive_catalogue_has_every_kind_and_the_issue_primitives():
    kinds = {p.kind_in for p in L.PRIMITIVES.values()}
    assert kinds == set(L.KINDS)
    for name in (
        "add",
        "sub",
        "mul",
        "neg",
        "abs",
        "square",
        "floordiv",
        "mod",
        "min",
        "max",
        "cond",
    ):
        assert L.PRIMITIVES[name].kind_in == "int"
    for p in L.PRIMITIVES.values():
        assert len(p.phrasings) >= 2 and p.heldout not in p.phrasings, p.name
    assert sum(p.kind_in == "int2" for p in L.PRIMITIVES.values()) >= 2
    assert sum(p.kind_in in ("list", "str") for p in L.PRIMITIVES.values()) >= 2


def test_structures_chain_kinds_and_depths_one_to_three():
    by_depth = {d: L.structures(depth=d) for d in (1, 2, 3)}
    assert len(by_depth[1]) == len(L.PRIMITIVES)
    assert len(L.all_structures()) == sum(len(v) for v in by_depth.values())
    for s in L.all_structures():
        prims = [L.PRIMITIVES[n] for n in s.steps]
        assert all(a.kind_out == b.kind_in for a, b in zip(prims, prims[1:], strict=False))
        assert all(p.kind_in != "int2" for p in prims[1:])
        assert s.name == ">".join(s.steps)
    assert len({s.name for s in L.all_structures()}) == len(L.all_structures())


def test_groups_partition_with_depth1_pretrained_and_every_primitive_in_each_depth2():
    for s in L.structures(depth=1):
        assert s.group == "pretrain"
    for group in L.GROUPS:
        used = {p for s in L.structures(group, 2) for p in s.steps}
        assert used == set(L.PRIMITIVES), group
    assert L.structures("heldout", 3) and L.structures("rl", 3)
    with pytest.raises(ValueError, match="unknown group"):
        L.structures("test")


def test_nothing_the_composition_corpus_trains_is_held_out():
    taught = {
        s[i:j] for s in compositions.TRAIN_STRUCTURES for i in range(3) for j in range(i + 2, 4)
    }
    for s in L.structures("heldout"):
        assert s.steps not in taught, s.name
    assert any(s.steps in taught for s in L.structures("pretrain"))


@pytest.mark.parametrize("rung", L.RUNGS)
def test_rung_tasks_draw_from_their_rung_with_neutral_distinct_split_names(rung):
    allowed = {s.name for s in L.rung_structures(rung)}
    todo = L.rung_tasks(rung, "confirm", N_PER_RUNG, seed=3)
    assert len(todo) == N_PER_RUNG
    assert len({t.name for t in todo}) == N_PER_RUNG
    assert len({t.family for t in todo}) == min(N_PER_RUNG, len(allowed))  # cycles the pool
    for t in todo:
        assert t.family in allowed
        assert t.name == t.task.entry_point and t.name.startswith(f"{ct.NEUTRAL_PREFIX}_")
        assert ct.split_of_name(t.name) == "confirm"
    assert [t.prompt for t in todo] == [
        t.prompt for t in L.rung_tasks(rung, "confirm", N_PER_RUNG, seed=3)
    ]
    assert [t.prompt for t in todo] != [
        t.prompt for t in L.rung_tasks(rung, "confirm", N_PER_RUNG, seed=4)
    ]


def test_phrasings_of_a_primitive_name_its_constant_equally_often():
    for p in L.PRIMITIVES.values():
        counts = {t.count("{c}") for t in (*p.phrasings, p.heldout)}
        assert counts == ({0} if not p.consts else counts - {0}) and len(counts) == 1, p.name


def test_every_body_of_every_structure_is_correct_and_cases_match_the_oracle():
    for s in L.all_structures():
        task = one_task(s)
        cases = task.task.cases
        assert len(cases) == L.N_CASES
        assert len({repr(c.args) for c in cases}) == L.N_CASES
        assert len({repr(c.expected) for c in cases}) >= 2  # no constant function passes
        consts = comment_constants(task, s)
        for c in cases:
            assert oracle_value(s, consts, c.args) == c.expected, (s.name, c)
        args = tuple(task.arg.split(", "))
        forms = L.bodies(s.steps, consts, args)
        every_var = {b for v in L.STEP_VARS for b in L.bodies(s.steps, consts, args, v)}
        assert task.reference in every_var
        assert len(forms) >= 2 + any(L.PRIMITIVES[n].stmts for n in s.steps)
        for body in forms:
            assert validate(task.prompt + body, task.name) is None, body
            assert run_in_process(task, body), (s.name, body)


def test_reference_bodies_pass_the_real_verifier():
    todo = [t for rung in L.RUNGS for t in L.rung_tasks(rung, "rl", 20, seed=1)]
    verdicts = verify_many([t.prompt + t.reference for t in todo], [t.task for t in todo])
    assert [v.status for v in verdicts] == ["pass"] * len(todo)
    wrong = [t.prompt + "    return 0\n" for t in todo]
    assert all(v.status == "fail" for v in verify_many(wrong, [t.task for t in todo]))


def test_expression_parenthesises_compound_operands():
    assert L.expression(("add", "mul"), (3, 2), ("x",)) == "(x + 3) * 2"
    assert L.expression(("add", "abs"), (3, None), ("x",)) == "abs(x + 3)"
    assert L.expression(("diff2", "square"), (None, None), ("a", "b")) == "(a - b) * (a - b)"
    assert L.expression(("repeat", "reverse"), (2, None), ("s",)) == "(s * 2)[::-1]"
    src = L.expression(("cond", "neg"), (4, None), ("x",))
    for x in range(-8, 9):
        assert eval(src, {"x": x}) == -(x - 4 if x > 4 else x + 4)


def _heldout_patterns() -> list[re.Pattern]:
    """Each held-out phrasing as a regex: any value words, any constant."""
    out = []
    for p in L.PRIMITIVES.values():
        pieces = re.split(r"(\{[vcab]\})", p.heldout)
        out.append(
            re.compile(
                "".join(".+?" if re.fullmatch(r"\{[vcab]\}", x) else re.escape(x) for x in pieces),
                re.IGNORECASE,
            )
        )
    return out


def _comments(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#")]


def test_heldout_phrasings_and_structures_never_reach_training_text(monkeypatch):
    patterns = _heldout_patterns()
    used: list[str] = []
    real = L.make_ladder_task

    def recording(structure, word, rng, heldout_phrasing=False, constants="task"):
        used.append(structure.group)
        assert not heldout_phrasing
        return real(structure, word, rng, heldout_phrasing, constants)

    monkeypatch.setattr(L, "make_ladder_task", recording)
    tasks_corpus = make_corpus("tasks", seed=0)
    mix_corpus = make_corpus("mix", seed=1)
    texts = [L.ladder_document(i, seed=2) for i in range(1500)]
    texts += [L.ladder_document(i, seed=3, constants="wide") for i in range(500)]
    texts += [tasks_corpus(i) for i in range(1500)] + [mix_corpus(i) for i in range(600)]
    texts += [
        t.prompt
        for seed in range(3)
        for split in ("rl", "dev")
        for t in L.rl_ladder_tasks(split, 60, seed)
    ]
    assert set(used) == {"pretrain", "rl"} and used.count("rl") == 360
    assert {s.group for s in L.rung_structures("rl_only")} == {"rl"}  # the pool, for any seed
    for text in texts:
        for comment in _comments(text):
            assert not any(p.search(comment) for p in patterns), comment
    # and the held-out rung does use them: the patterns can match
    monkeypatch.setattr(L, "make_ladder_task", real)
    held = L.rung_tasks("depth1_heldout_phrasings", "confirm", 27)
    assert all(any(p.search(_comments(t.prompt)[0]) for p in patterns) for t in held)


def test_ladder_documents_are_valid_python_of_train_names_and_deterministic():
    for i in range(200):
        doc = L.ladder_document(i, seed=0)
        assert doc == L.ladder_document(i, seed=0)
        ast.parse(doc)
        name = re.search(r"def (\w+)\(", doc).group(1)
        assert name.startswith("f_") and ct.split_of_name(name) == "train"
    assert L.ladder_document(0, seed=0) != L.ladder_document(0, seed=1)
    assert L.ladder_document(0, seed=0, split="dev") != L.ladder_document(0, seed=0)


def test_wide_constants_reach_beyond_the_tasks_ranges_and_stay_correct():
    beyond = 0
    for s in L.structures("pretrain"):
        task = L.make_ladder_task(s, "kavo", random.Random(s.name), constants="wide")
        consts = comment_constants(task, s)
        for step, c in zip(s.steps, consts, strict=True):
            own = L.PRIMITIVES[step].consts
            assert c is None or c in L.WIDE_CONSTANTS[own]
            beyond += c is not None and c not in own
        assert run_in_process(task, task.reference), task.prompt
        assert all(oracle_value(s, consts, c.args) == c.expected for c in task.task.cases)
    assert beyond > 100
    assert all(set(own) < set(wide) for own, wide in L.WIDE_CONSTANTS.items())
    docs = [L.ladder_document(i, 0) for i in range(50)]
    assert docs != [L.ladder_document(i, 0, constants="wide") for i in range(50)]
    wide_corpus, task_corpus = make_corpus("tasks", 0, constants="wide"), make_corpus("tasks", 0)
    assert sum(wide_corpus(i) != task_corpus(i) for i in range(100)) > 40  # ladder documents
    with pytest.raises(ValueError, match="constants"):
        L.ladder_document(0, 0, constants="huge")


def test_asserts_in_documents_hold():
    shown = 0
    for i in range(300):
        doc = L.ladder_document(i, seed=5)
        if "assert " in doc:
            exec(doc, {})  # raises if a shown call is wrong
            shown += 1
    assert shown > 20


def test_unknown_rung_and_split_are_refused():
    with pytest.raises(ValueError, match="unknown rung"):
        L.rung_tasks("depth4", "confirm", 3)
    with pytest.raises(ValueError, match="unknown split"):
        L.rung_tasks("depth1", "test", 3)


def test_rung_tasks_of_chosen_depths_and_the_rl_depth2_slice():
    """A depth filter draws only structures of those depths (refusing an empty pool); the
    evaluation slice rl_only_depth2 is the same draw, and parse_rungs accepts it outside `all`."""
    from glmflash.evaluate import rungs as R

    depth2 = {s.name for s in L.structures("rl", 2)}
    todo = L.rung_tasks("rl_only", "confirm", 70, seed=1, depths=(2,))
    assert {t.family for t in todo} == depth2
    assert [t.prompt for t in R.rung_tasks("rl_only_depth2", "confirm", 70, 1)] == [
        t.prompt for t in todo
    ]
    assert R.parse_rungs("rl_only_depth2,unseen_depth2") == ("rl_only_depth2", "unseen_depth2")
    assert "rl_only_depth2" not in R.parse_rungs("all")
    with pytest.raises(ValueError, match="no structures of depth"):
        L.rung_tasks("depth1", "confirm", 3, depths=(2,))
