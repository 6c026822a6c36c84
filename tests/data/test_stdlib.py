"""Standard-library corpus: the file list, the held-out split, windows taken from real files."""

import glob
import os
import sysconfig

import pytest

from glmflash.data import stdlib


def test_file_lists_are_sorted_disjoint_and_complete():
    root = sysconfig.get_paths()["stdlib"]
    train, held = stdlib.stdlib_files("train"), stdlib.stdlib_files("heldout")
    assert list(train) == sorted(train) and list(held) == sorted(held)
    assert not set(train) & set(held)
    assert 0.01 < len(held) / (len(train) + len(held)) < 0.12
    for rel in train + held:
        parts = rel.split("/")
        assert not stdlib.SKIP_DIRS & set(parts[:-1]) and rel.endswith(".py")
        assert stdlib.MIN_BYTES <= os.path.getsize(os.path.join(root, *parts)) <= stdlib.MAX_BYTES
    shallow = glob.glob("*.py", root_dir=root) + glob.glob("*/*.py", root_dir=root)
    expected = {
        p.replace(os.sep, "/")
        for p in shallow
        if p.split(os.sep)[0] not in stdlib.SKIP_DIRS
        and stdlib.MIN_BYTES <= os.path.getsize(os.path.join(root, p)) <= stdlib.MAX_BYTES
    }
    assert expected and expected <= set(train + held)  # nothing usable near the top is missed
    assert {"os.py", "json/decoder.py"} <= set(train + held)
    with pytest.raises(ValueError, match="unknown stdlib split"):
        stdlib.stdlib_files("dev")


def test_documents_are_windows_of_files_of_their_split():
    for split in stdlib.STDLIB_SPLITS:
        texts = [stdlib.read_source(p) for p in stdlib.stdlib_files(split)]
        for i in range(30):
            doc = stdlib.stdlib_document(i, 1, split)
            assert doc == stdlib.stdlib_document(i, 1, split)
            assert 0 < len(doc) <= stdlib.WINDOW_CHARS
            starts = [t.find(doc) for t in texts]
            hits = [(t, s) for t, s in zip(texts, starts, strict=True) if s >= 0]
            assert hits, doc[:80]
            assert any(s == 0 or t[s - 1] == "\n" for t, s in hits)  # begins at a line start


def test_documents_vary_with_index_and_seed():
    docs = [stdlib.stdlib_document(i, 0) for i in range(20)]
    assert len(set(docs)) > 15
    assert docs != [stdlib.stdlib_document(i, 1) for i in range(20)]
