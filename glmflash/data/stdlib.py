"""Real code: windows of the Python standard library's own .py files on this machine.

The file list is sorted, so documents are deterministic on a given Python installation (they
differ between versions). Test directories, generated codec tables, files under MIN_BYTES
(mostly empty __init__.py) and files over MAX_BYTES are skipped. A file is held out when a
stable hash of its relative path falls in the lowest HELDOUT_PERCENT buckets, so the split
does not move when files are added or removed.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sysconfig
from pathlib import Path

from glmflash.data import rng_for

STDLIB_SPLITS = ("train", "heldout")
SKIP_DIRS = frozenset({"test", "tests", "idle_test", "site-packages", "encodings"})
MIN_BYTES, MAX_BYTES = 256, 100_000
HELDOUT_PERCENT = 5
WINDOW_CHARS = 512


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def split_of_path(relative_path: str) -> str:
    digest = hashlib.blake2b(relative_path.encode(), digest_size=8).digest()
    return "heldout" if int.from_bytes(digest, "little") % 100 < HELDOUT_PERCENT else "train"


@functools.cache
def _usable_files() -> tuple[str, ...]:
    root = stdlib_root()
    found = []
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if d not in SKIP_DIRS]
        rel_dir = Path(directory).relative_to(root)
        for name in names:
            path = Path(directory, name)
            if (
                name.endswith(".py")
                and path.is_file()
                and (MIN_BYTES <= path.stat().st_size <= MAX_BYTES)
            ):
                found.append((rel_dir / name).as_posix())
    return tuple(sorted(found))


@functools.cache
def stdlib_files(split: str) -> tuple[str, ...]:
    """Sorted relative paths (POSIX form) of the usable .py files of `split`."""
    if split not in STDLIB_SPLITS:
        raise ValueError(f"unknown stdlib split {split!r}; choose from {', '.join(STDLIB_SPLITS)}")
    files = tuple(p for p in _usable_files() if split_of_path(p) == split)
    if not files:
        raise RuntimeError(f"no standard library source files found under {stdlib_root()}")
    return files


@functools.cache
def read_source(relative_path: str) -> str:
    return (stdlib_root() / relative_path).read_text("utf-8", errors="replace")


def stdlib_document(index: int, seed: int, split: str = "train") -> str:
    """Up to WINDOW_CHARS characters of a random file of `split`, from the start of the line
    holding a random character."""
    files = stdlib_files(split)
    rng = rng_for("stdlib", split, seed, index)
    text = read_source(files[rng.randrange(len(files))])
    start = text.rfind("\n", 0, rng.randrange(len(text))) + 1  # rfind() == -1 gives 0
    return text[start : start + WINDOW_CHARS]
