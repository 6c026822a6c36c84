"""docs/tour.md cannot rot: its ```python blocks run in order in one namespace, as a reader
runs them, and its links point at files that exist."""

import re
from pathlib import Path

TOUR = Path(__file__).resolve().parents[1] / "docs" / "tour.md"
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)
LINK = re.compile(r"\]\(([^)#\s]+)\)")


def python_blocks(text: str) -> list[tuple[int, str]]:
    """Each ```python block's first line in the tour (1-based) and its code."""
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in BLOCK.finditer(text)]


def test_tour_snippets_run_in_order() -> None:
    blocks = python_blocks(TOUR.read_text(encoding="utf-8"))
    assert len(blocks) >= 10, "the tour lost its snippets (or their ```python fences)"
    namespace: dict = {"__name__": "tour"}
    for line, code in blocks:
        # padded to the block's own line, so that a traceback shows the tour's lines
        exec(compile("\n" * (line - 1) + code, str(TOUR), "exec"), namespace)


def test_tour_links_exist() -> None:
    links = LINK.findall(TOUR.read_text(encoding="utf-8"))
    assert links
    missing = [link for link in links if not (TOUR.parent / link).exists()]
    assert not missing, f"docs/tour.md links to missing files: {missing}"
