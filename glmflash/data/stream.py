"""Sequence packing: documents, each bos + bytes + eos, laid end to end and cut into rows.

Row g of the global batch sequence (step s, batch size B: rows s*B .. s*B + B-1) is a pure
function of (seed, g): a generator seeded by (seed, g) names the documents of the row and a
start offset inside the first, and the row is the next seq_len + 1 tokens of their
concatenation (the last document's tail is dropped). So there is no padding, a row can start
mid-document as a window of a long stream would, a step number is the whole data position
(exact resume needs no other state), and each rank builds only its own rows: rank r of W
takes the contiguous rows r*B/W .. (r+1)*B/W - 1 of every global batch, so the global batch is
the same for any W.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

import torch

from glmflash.config.pretrain import CORPORA, ROW_STARTS
from glmflash.data import code_tasks, compositions, ladder, rng_for, stdlib
from glmflash.tokenizer import encode

DocFn = Callable[[int], str]
CORPUS_SPLITS = ("train", "eval")
MIX_WEIGHTS = {"tasks": 0.75, "compositions": 0.2, "stdlib": 0.05}  # per document, not token
LADDER_SHARE = 0.8  # share of the tasks corpus's documents that are ladder tasks


class PackedStream:
    """Batches of packed rows, each row a pure function of (seed, global row number)."""

    def __init__(
        self,
        doc_fn: DocFn,
        seq_len: int,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        row_start: str = "anywhere",
    ) -> None:
        if seq_len < 1:
            raise ValueError(f"seq_len must be positive, got {seq_len}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size), got {rank} of {world_size}")
        self.doc_fn, self.seq_len, self.seed = doc_fn, seq_len, seed
        if row_start not in ROW_STARTS:
            raise ValueError(f"row_start must be one of {ROW_STARTS}, got {row_start!r}")
        self.rank, self.world_size = rank, world_size
        self.at_document = row_start == "document"

    def document_ids(self, index: int) -> list[int]:
        return encode(self.doc_fn(index), bos=True, eos=True)

    def row(self, g: int) -> list[int]:
        """Global row g: seq_len + 1 tokens."""
        rng = rng_for("row", self.seed, g)
        ids = self.document_ids(rng.getrandbits(63))
        offset = rng.randrange(len(ids))  # drawn either way: the same documents either way
        out = ids if self.at_document else ids[offset:]
        while len(out) <= self.seq_len:
            out += self.document_ids(rng.getrandbits(63))
        return out[: self.seq_len + 1]

    def local_rows(self, batch_size: int) -> range:
        """This rank's row numbers within a global batch of `batch_size` rows."""
        if batch_size % self.world_size:
            raise ValueError(
                f"global batch_size {batch_size} is not divisible by world_size {self.world_size}"
            )
        per_rank = batch_size // self.world_size
        return range(self.rank * per_rank, (self.rank + 1) * per_rank)

    def batch(self, step: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's slice of global batch `step`: inputs and next-token targets, each
        [batch_size / world_size, seq_len] int64, targets[:, t] = inputs[:, t + 1]."""
        rows = torch.tensor(
            [self.row(step * batch_size + b) for b in self.local_rows(batch_size)], dtype=torch.long
        )
        return rows[:, :-1], rows[:, 1:]


def mix_document(
    index: int, corpora: Mapping[str, DocFn], weights: Mapping[str, float], seed: int
) -> str:
    """A document of a corpus picked with probability proportional to its weight."""
    rng = rng_for("mix", seed, index)
    names = list(weights)
    name = rng.choices(names, weights=[weights[n] for n in names])[0]
    return corpora[name](rng.getrandbits(63))


def tasks_document(index: int, seed: int, split: str = "train", constants: str = "task") -> str:
    """The tasks corpus: LADDER_SHARE of its documents are tasks of the ladder's pretraining
    structures (`ladder.ladder_document`, with `constants`), the rest the eight seed
    families."""
    if rng_for("tasks_corpus", split, seed, index).random() < LADDER_SHARE:
        return ladder.ladder_document(index, seed, split, constants)
    return code_tasks.task_document(index, seed, split)


def make_corpus(
    name: str,
    seed: int = 0,
    split: str = "train",
    weights: Mapping[str, float] | None = None,
    constants: str = "task",
) -> DocFn:
    """The document function of corpus `name`, index -> text.

    split "train" is what training reads; "eval" is its held-out counterpart: dev-split
    function names for tasks (seed families and the ladder's pretraining structures), the 32
    held-out structures for compositions, the held-out files for stdlib. `weights` (mix only,
    default MIX_WEIGHTS) are per-document probabilities; `constants` the range of the ladder
    documents' constants (`config.LADDER_CONSTANTS`).
    """
    if name not in CORPORA:
        raise ValueError(f"unknown corpus {name!r}; choose from {', '.join(CORPORA)}")
    if split not in CORPUS_SPLITS:
        raise ValueError(f"unknown corpus split {split!r}; choose from {', '.join(CORPUS_SPLITS)}")
    if weights is not None and name != "mix":
        raise ValueError(f"weights apply to the mix corpus only, not {name!r}")
    held_out = split == "eval"
    if name == "tasks":
        return functools.partial(
            tasks_document, seed=seed, split="dev" if held_out else "train", constants=constants
        )
    if name == "compositions":
        structures = compositions.HELDOUT_STRUCTURES if held_out else compositions.TRAIN_STRUCTURES
        return functools.partial(
            compositions.composition_document, seed=seed, structures=structures
        )
    if name == "stdlib":
        return functools.partial(
            stdlib.stdlib_document, seed=seed, split="heldout" if held_out else "train"
        )
    weights = dict(MIX_WEIGHTS if weights is None else weights)
    unknown = set(weights) - set(CORPORA[:-1])
    if unknown or not weights or min(weights.values()) < 0 or sum(weights.values()) <= 0:
        raise ValueError(
            f"mix weights must be non-negative over {CORPORA[:-1]} with a positive "
            f"sum, got {weights}"
        )
    parts = {n: make_corpus(n, seed, split, constants=constants) for n in weights if weights[n] > 0}
    return functools.partial(
        mix_document, corpora=parts, weights={n: weights[n] for n in parts}, seed=seed
    )
