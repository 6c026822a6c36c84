"""The small composition model: schedules, pairing, determinism and the two metrics."""

from __future__ import annotations

import pytest
import torch

from glmflash.data import compositions as comp
from glmflash.experiments import small_lm as s

# A very small, short run: the same code path as the experiments, a fraction of the cost.
TINY = {
    "steps": 6,
    "batch_size": 2,
    "seq_len": 64,
    "eval_every": 3,
    "eval_per_structure": 1,
    "model": {"n_layers": 2, "expert_hidden": 16, "context": 128},
}


def test_the_default_model_has_about_250k_parameters():
    model = s.build_model(s.SmallRun(), 0)
    assert model.num_parameters() == 253_120
    assert model.cfg.stream_mixer == "static" and model.cfg.context == 128


def test_schedules_draw_from_the_right_structures():
    train = comp.TRAIN_STRUCTURES
    steps = 200
    rep, div, cur, blk = (
        s.SmallRun(schedule=k, steps=steps)
        for k in ("repeated", "diverse", "curriculum", "blocked")
    )
    for step in (0, 57, 199):
        assert s.structures_at(rep, step) == train[:8]
        assert s.structures_at(div, step) == train
    assert s.structures_at(cur, 99) == train[:8] and s.structures_at(cur, 100) == train
    blocked = [s.structures_at(blk, step) for step in range(steps)]
    assert all(len(b) == 1 for b in blocked)
    order = [b[0] for b in blocked]
    firsts = list(dict.fromkeys(order))
    assert firsts == list(train)  # every structure, in order, each in one contiguous block
    assert all(abs(order.count(x) - steps / len(train)) < 1 for x in train)


def test_blocked_batches_hold_one_structure():
    run = s.SmallRun(schedule="blocked", steps=88, batch_size=8, seq_len=128)
    phrases = {
        "add": "add ",
        "sub": "subtract",
        "mul": "multiply",
        "neg": "negative",
        "abs": "absolute",
    }
    for step in (0, 5, 87):
        x, _ = s.train_batch(run, 3, step)
        structure = comp.TRAIN_STRUCTURES[step]
        lines = []
        for row in x.tolist():
            text = bytes(i - 4 for i in row if i >= 4).decode()
            lines += [t.split("\n")[0].lower() for t in text.split("Task: start with x. ")[1:]]
        whole = [line for line in lines if line.endswith(".")]  # complete instruction lines
        assert len(whole) >= 2
        for line in whole:
            assert all(phrases[op] in line for op in structure), line
            assert not any(phrases[op] in line for op in comp.OPS if op not in structure), line


def test_paired_seeds_share_initial_weights_and_data_positions():
    a = s.build_model(s.SmallRun.from_dict({**TINY, "schedule": "repeated"}), 7)
    b = s.build_model(s.SmallRun.from_dict({**TINY, "schedule": "blocked"}), 7)
    c = s.build_model(s.SmallRun.from_dict({**TINY, "schedule": "repeated"}), 8)
    sa, sb = a.state_dict(), b.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["embedding.weight"], c.state_dict()["embedding.weight"])
    # the diverse and curriculum arms read the same data in the second half
    div = s.SmallRun.from_dict({**TINY, "schedule": "diverse"})
    cur = s.SmallRun.from_dict({**TINY, "schedule": "curriculum"})
    assert torch.equal(s.train_batch(div, 7, 5)[0], s.train_batch(cur, 7, 5)[0])
    assert not torch.equal(s.train_batch(div, 7, 0)[0], s.train_batch(cur, 7, 0)[0])


def test_a_run_is_deterministic_for_its_seed():
    config = {**TINY, "schedule": "curriculum"}
    first = s.train_and_evaluate(config, 3)
    again = s.train_and_evaluate(config, 3)
    for key in ("heldout_byte_acc", "heldout_exact", "seen_byte_acc", "train_loss"):
        assert first[key] == again[key]
    assert first["curves"] == again["curves"]
    assert [p[0] for p in first["curves"]["heldout_byte_acc"]] == [0, 3, 6]
    assert first["updates"] == 6 and 0 <= first["heldout_exact"] <= 1


def test_byte_accuracy_matches_a_per_example_loop():
    torch.manual_seed(0)
    run = s.SmallRun.from_dict(TINY)
    model = s.build_model(run, 1)
    pairs = comp.teacher_forced_pairs(comp.HELDOUT_STRUCTURES[:6], 1, seed=2)
    hits = total = 0
    with torch.no_grad():
        for prompt, answer in pairs:  # one unpadded sequence at a time, position by position
            for j, target in enumerate(answer):
                x = torch.tensor([prompt + answer[:j]])
                hits += int(model(x).logits[0, -1].argmax()) == target
                total += 1
    assert s.byte_accuracy(model, pairs, batch_size=4) == pytest.approx(hits / total)


class Oracle(torch.nn.Module):
    """A stand-in model whose greedy continuation is a fixed text after any prompt."""

    def __init__(self, answer: str) -> None:
        super().__init__()
        self.answer = [b + 4 for b in answer.encode()] + [2]
        self.cfg = s.SmallRun().model_config()
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def forward(self, tokens):
        raise NotImplementedError

    def step(self, tokens, state=None):
        """The state is the number of answer bytes emitted so far."""
        position = 0 if state is None else state + 1
        logits = torch.full((tokens.shape[0], tokens.shape[1], 263), -1.0)
        logits[:, -1, self.answer[min(position, len(self.answer) - 1)]] = 1.0
        return logits, position


def test_exact_match_accepts_equivalent_answers_and_rejects_wrong_ones():
    (good,) = comp.examples([("add", "mul", "neg")], 1, seed=0)
    (_, c1), (_, c2), _ = good.program
    assert s.exact_match(Oracle(good.answer), [good]) == 1.0
    assert s.exact_match(Oracle(f"-({c2} * (x + {c1}))"), [good]) == 1.0  # same value
    assert s.exact_match(Oracle(f"-({c2} * (x + {c1 + 1}))"), [good]) == 0.0
