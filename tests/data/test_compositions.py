"""Composition corpus: the 120 / 88 / 32 structures, rendering against step-by-step values, the
value checker (equivalent forms accepted, wrong and hostile text rejected), determinism."""

import random
import re
import sys

import pytest

from glmflash.data import compositions as co
from glmflash.tokenizer import BOS, decode

STEP = {
    "add": lambda v, c: v + c,
    "sub": lambda v, c: v - c,
    "mul": lambda v, c: v * c,
    "neg": lambda v, c: 0 - v,
    "abs": lambda v, c: v if v >= 0 else -v,
}
PHRASE = {
    r"add (\d)": "add",
    r"subtract (\d)": "sub",
    r"multiply by (\d)": "mul",
    r"take the negative()": "neg",
    r"take the absolute value()": "abs",
}


def step_by_step(program, x):
    for op, c in program:
        x = STEP[op](x, c)
    return x


def parse_prompt(prompt):
    """The program a prompt describes, read back from its words."""
    m = re.fullmatch(r"Task: start with x\. (.+)\.\nAnswer: ", prompt)
    assert m, prompt
    program = []
    for part in m.group(1).lower().split(", then "):
        for pattern, op in PHRASE.items():
            if mm := re.fullmatch(pattern, part):
                program.append((op, int(mm.group(1)) if mm.group(1) else None))
                break
        else:
            raise AssertionError(f"unknown instruction {part!r}")
    return tuple(program)


def test_structure_counts_and_split():
    by_loops = [(a, b, c) for a in co.OPS for b in co.OPS for c in co.OPS if not a == b == c]
    assert len(by_loops) == 5**3 - 5 == 120
    assert sorted(co.STRUCTURES) == sorted(by_loops)
    assert len(co.TRAIN_STRUCTURES) == 88 and len(co.HELDOUT_STRUCTURES) == 32
    assert set(co.TRAIN_STRUCTURES).isdisjoint(co.HELDOUT_STRUCTURES)
    assert set(co.TRAIN_STRUCTURES) | set(co.HELDOUT_STRUCTURES) == set(co.STRUCTURES)
    assert list(co.TRAIN_STRUCTURES) != sorted(co.TRAIN_STRUCTURES)  # shuffled


def test_the_documented_example():
    program = (("add", 3), ("mul", 2), ("neg", None))
    assert co.prompt_text(program) == (
        "Task: start with x. Add 3, then multiply by 2, then take the negative.\nAnswer: "
    )
    assert co.expression(program) == "-((x + 3) * 2)"
    assert co.expression((("neg", None), ("mul", 2), ("add", 4))) == "-x * 2 + 4"
    assert co.expression((("neg", None), ("neg", None), ("abs", None))) == "abs(-(-x))"


def test_expression_and_prompt_describe_the_program_for_every_structure():
    rng = random.Random(0)
    for structure in co.STRUCTURES:
        for _ in range(3):
            program = co.instantiate(structure, rng)
            assert tuple(op for op, _ in program) == structure
            assert all((c in co.CONSTANTS) == (op in co.CONSTANT_OPS) for op, c in program)
            assert parse_prompt(co.prompt_text(program)) == program
            text = co.expression(program)
            for x in range(-9, 10):
                expected = step_by_step(program, x)
                assert co.evaluate(program, x) == expected
                assert eval(text, {"__builtins__": {}, "abs": abs}, {"x": x}) == expected


def test_checker_accepts_correct_and_equivalent_answers():
    rng = random.Random(1)
    for structure in co.STRUCTURES:
        program = co.instantiate(structure, rng)
        assert co.check_answer(program, co.expression(program))
        assert co.check_answer(program, co.expression(program) + "\nTask: start with x.")
    program = (("add", 3), ("mul", 2), ("sub", 5))
    for answer in (
        "(x + 3) * 2 - 5",
        "(x+3)*2-5",
        "2*(x+3)-5",
        "2*x+1",
        "1 + x + x",
        "  +(2 * x) + 1  ",
    ):
        assert co.check_answer(program, answer), answer
    assert co.check_answer((("abs", None), ("neg", None), ("mul", 2)), "-2*abs(x)")


@pytest.mark.parametrize(
    "answer",
    [
        "(x + 3) * 3 - 5",
        "2*x",
        "x",
        "",
        "   ",
        "2*x+1.0",
        "2*x+True",
        "2*x + 1 if x else 0",
        "__import__('os').system('true')",
        "__import__('os')",
        "().__class__.__bases__",
        "open('f')",
        "exec('x')",
        "lambda: x",
        "9**9**9",
        "x ** 2",
        "x // 1",
        "abs(x, 1)",
        "abs(x=1)",
        "y + 1",
        "[x][0]",
        "x; import os",
        "(" * 150 + "x" + ")" * 150,
        "(" * 99 + "x" + ")" * 99,
        "-" * 199 + "x",
        "x" * 1000,
        "2*x+\n1",
    ],
)
def test_checker_rejects_wrong_and_hostile_answers(answer):
    program = (("add", 3), ("mul", 2), ("sub", 5))
    assert co.check_answer(program, answer) is False


def test_checker_never_runs_the_text():
    """Payloads whose value would be right if they were executed."""
    program = (("add", 3), ("mul", 2), ("sub", 5))
    for payload in (
        "[__import__('sys').modules.setdefault('_answer_ran', 1), 2*x+1][1]",
        "2*x+1 if __import__('sys').modules.setdefault('_answer_ran', 1) else 0",
    ):
        assert co.check_answer(program, payload) is False
    assert "_answer_ran" not in sys.modules


def test_composition_document_is_deterministic_and_uses_given_structures():
    few = co.TRAIN_STRUCTURES[:8]
    docs = [co.composition_document(i, 3, few) for i in range(200)]
    assert docs == [co.composition_document(i, 3, few) for i in range(200)]
    assert docs != [co.composition_document(i, 4, few) for i in range(200)]
    seen = set()
    for doc in docs:
        prompt, answer = doc[: doc.index("Answer: ") + 8], doc[doc.index("Answer: ") + 8 :]
        program = parse_prompt(prompt)
        seen.add(tuple(op for op, _ in program))
        assert answer.endswith("\n") and answer.count("\n") == 1
        assert co.check_answer(program, answer)
    assert seen == set(few)
    with pytest.raises(ValueError):
        co.composition_document(0, 0, [])


def test_composition_example_and_instantiate_errors():
    prompt, answer = co.composition_example(("mul", "abs", "sub"), random.Random(5))
    assert co.check_answer(parse_prompt(prompt), answer) and "\n" not in answer
    with pytest.raises(ValueError, match="unknown op"):
        co.instantiate(("add", "pow", "neg"), random.Random(0))


def test_teacher_forced_pairs_cover_heldout_structures():
    pairs = co.teacher_forced_pairs(per_structure=2, seed=7)
    assert len(pairs) == 2 * 32 and pairs == co.teacher_forced_pairs(per_structure=2, seed=7)
    structures = set()
    for prompt_ids, answer_ids in pairs:
        assert prompt_ids[0] == BOS and BOS not in prompt_ids[1:] and BOS not in answer_ids
        prompt, answer = decode(prompt_ids), decode(answer_ids)
        program = parse_prompt(prompt)
        structures.add(tuple(op for op, _ in program))
        assert answer.endswith("\n") and co.check_answer(program, answer)
    assert structures == set(co.HELDOUT_STRUCTURES)
