"""Figures: matplotlib without a display, imported only when a picture is drawn."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: str | Path, dpi: int = 110) -> None:
    """Lay the figure out, write it to `path` and free it."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)


__all__ = ["pyplot", "save"]
