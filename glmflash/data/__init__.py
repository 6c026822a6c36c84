"""Training and evaluation data, generated on the fly, deterministically from (seed, index).

    code_tasks    the eight function families: prompts, hidden test cases, name splits
    compositions  length-3 arithmetic programs (120 structures, 88 train / 32 held out)
    stdlib        windows of this machine's Python standard library, for bits-per-byte
    stream        packing documents into [B, T] batches; `make_corpus` by name

Every random choice comes from `rng_for(...)`, seeded by a stable hash of its arguments
(never Python's per-process salted `hash()`), so a document depends on its arguments alone:
no state, no order, the same text on every run and every machine.
"""

from __future__ import annotations

import hashlib
import random


def derive_seed(*parts: int | str) -> int:
    """A 64-bit integer from `parts`: blake2b of their repr, stable across processes."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def rng_for(*parts: int | str) -> random.Random:
    """A generator seeded by `derive_seed(*parts)`."""
    return random.Random(derive_seed(*parts))
