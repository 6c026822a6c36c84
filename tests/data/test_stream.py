"""Packing: rows are windows of bos + bytes + eos documents with no padding, batches are pure
functions of (seed, step), rank slices partition the global batch; corpora by name."""

import re

import pytest
import torch

from glmflash.data import code_tasks, compositions, ladder, stdlib
from glmflash.data.stream import (
    LADDER_SHARE,
    MIX_WEIGHTS,
    PackedStream,
    make_corpus,
    tasks_document,
)
from glmflash.tokenizer import BOS, EOS, PAD, encode


class Recorder:
    """A toy corpus of varied lengths that remembers which documents it was asked for."""

    def __init__(self):
        self.calls = []

    def __call__(self, index):
        self.calls.append(index)
        return f"<{index % 1000}>" + "z" * (index % 37)


@pytest.mark.parametrize("seq_len", [1, 7, 64])
def test_rows_are_windows_of_concatenated_documents(seq_len):
    doc = Recorder()
    stream = PackedStream(doc, seq_len, seed=3)
    starts_mid_document = 0
    for g in range(40):
        doc.calls.clear()
        row = stream.row(g)
        assert len(row) == seq_len + 1 and PAD not in row
        docs = [encode(doc(i), bos=True, eos=True) for i in list(doc.calls)]
        concat = [t for d in docs for t in d]
        offsets = [o for o in range(len(docs[0])) if concat[o : o + seq_len + 1] == row]
        assert offsets, "row is not a window starting in the first document"
        assert len(concat) - len(docs[-1]) < offsets[0] + seq_len + 1  # every document is used
        starts_mid_document += row[0] != BOS
    assert starts_mid_document > 20  # rows start at a random offset, mostly mid-document


def test_rows_at_document_starts_keep_the_same_documents():
    doc = Recorder()
    anywhere = PackedStream(doc, 48, seed=3)
    aligned = PackedStream(doc, 48, seed=3, row_start="document")
    for g in range(30):
        doc.calls.clear()
        anywhere.row(g)
        first = doc.calls[0]
        doc.calls.clear()
        row = aligned.row(g)
        assert doc.calls[0] == first  # the same first document, now from its start
        docs = [encode(doc(i), bos=True, eos=True) for i in list(doc.calls)]
        assert row == [t for d in docs for t in d][:49] and row[0] == BOS
    with pytest.raises(ValueError, match="row_start"):
        PackedStream(doc, 8, row_start="middle")


def test_batch_shapes_targets_and_determinism():
    doc = Recorder()
    a = PackedStream(doc, 16, seed=1)
    x, y = a.batch(5, 6)
    assert x.shape == y.shape == (6, 16) and x.dtype == y.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1])
    rows = torch.tensor([a.row(5 * 6 + b) for b in range(6)])
    assert torch.equal(x, rows[:, :-1]) and torch.equal(y, rows[:, 1:])
    fresh = PackedStream(Recorder(), 16, seed=1)
    for _ in range(3):
        fresh.batch(0, 6)  # reading other steps first changes nothing: a step is a position
    assert torch.equal(fresh.batch(5, 6)[0], x)
    assert not torch.equal(a.batch(6, 6)[0], x)
    assert not torch.equal(PackedStream(Recorder(), 16, seed=2).batch(5, 6)[0], x)


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_rank_slices_partition_the_global_batch(world_size):
    corpus = make_corpus("tasks", seed=0)
    whole_x, whole_y = PackedStream(corpus, 24, seed=4).batch(3, 8)
    parts = [
        PackedStream(corpus, 24, seed=4, rank=r, world_size=world_size).batch(3, 8)
        for r in range(world_size)
    ]
    assert all(p[0].shape == (8 // world_size, 24) for p in parts)
    assert torch.equal(torch.cat([p[0] for p in parts]), whole_x)
    assert torch.equal(torch.cat([p[1] for p in parts]), whole_y)


def test_stream_errors():
    with pytest.raises(ValueError, match="divisible"):
        PackedStream(Recorder(), 8, world_size=3).batch(0, 8)
    with pytest.raises(ValueError, match="rank"):
        PackedStream(Recorder(), 8, rank=2, world_size=2)
    with pytest.raises(ValueError, match="seq_len"):
        PackedStream(Recorder(), 0)


TASK_DOC = re.compile(rf"# [^\n]*\ndef ({'|'.join(code_tasks.FAMILIES)}|f)_[a-z]+\([\w, ]+\):\n")


def kind(doc):
    if TASK_DOC.match(doc):
        return "tasks"
    return "compositions" if doc.startswith("Task: start with x.") else "stdlib"


def test_corpora_by_name_and_split():
    train = [make_corpus("tasks", 0)(i) for i in range(200)]
    held = [make_corpus("tasks", 0, "eval")(i) for i in range(200)]
    for docs, split in ((train, "train"), (held, "dev")):
        names = [re.match(r"# [^\n]*\ndef (\w+)\(", d).group(1) for d in docs]
        assert all(code_tasks.split_of_name(n) == split for n in names)
    assert train == [tasks_document(i, 0) for i in range(200)]
    from_ladder = sum(d == ladder.ladder_document(i, 0) for i, d in enumerate(train))
    assert abs(from_ladder / len(train) - LADDER_SHARE) < 0.1
    seed_families = sum(d == code_tasks.task_document(i, 0) for i, d in enumerate(train))
    assert seed_families == len(train) - from_ladder
    for split, structures in (
        ("train", compositions.TRAIN_STRUCTURES),
        ("eval", compositions.HELDOUT_STRUCTURES),
    ):
        docs = [make_corpus("compositions", 1, split)(i) for i in range(50)]
        assert docs == [compositions.composition_document(i, 1, structures) for i in range(50)]
    for split, files in (("train", "train"), ("eval", "heldout")):
        docs = [make_corpus("stdlib", 2, split)(i) for i in range(20)]
        assert docs == [stdlib.stdlib_document(i, 2, files) for i in range(20)]


def test_mix_follows_its_weights():
    mix = make_corpus("mix", 0)
    counts = {name: 0 for name in MIX_WEIGHTS}
    for i in range(1000):
        counts[kind(mix(i))] += 1
    for name, w in MIX_WEIGHTS.items():
        assert abs(counts[name] / 1000 - w) < 0.05, counts
    only = make_corpus("mix", 0, weights={"compositions": 1.0, "tasks": 0.0})
    assert all(kind(only(i)) == "compositions" for i in range(100))
    assert [mix(i) for i in range(30)] == [make_corpus("mix", 0)(i) for i in range(30)]


def test_corpus_errors():
    with pytest.raises(ValueError, match="unknown corpus"):
        make_corpus("wiki")
    with pytest.raises(ValueError, match="split"):
        make_corpus("tasks", split="dev")
    with pytest.raises(ValueError, match="mix"):
        make_corpus("tasks", weights={"tasks": 1.0})
    for bad in ({"tasks": -1.0, "stdlib": 2.0}, {"wiki": 1.0}, {}, {"tasks": 0.0}):
        with pytest.raises(ValueError, match="weights"):
            make_corpus("mix", weights=bad)


def test_real_batches_have_no_padding_and_only_text_tokens():
    for name in ("tasks", "compositions", "mix"):
        x, y = PackedStream(make_corpus(name, 0), 128, seed=0).batch(0, 32)
        assert x.shape == (32, 128)
        assert not (x == PAD).any() and int(x.min()) >= BOS and int(x.max()) < 260
        assert (x == BOS).any() and (x == EOS).any()
