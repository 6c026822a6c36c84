"""Progress's log lines: the eta follows the recent rate, so a slow first step fades out."""

from __future__ import annotations

import re

import pytest

from glmflash import progress as progress_module
from glmflash.progress import Progress


def etas(step_seconds: list[float], window: int, capsys, monkeypatch) -> list[float]:
    """Log-mode etas of a 100-step run whose steps take `step_seconds`, on a fake clock."""
    clock = [0.0]
    monkeypatch.setattr(progress_module.time, "perf_counter", lambda: clock[0])
    bar = Progress(100, every_s=0.0, window=window)
    bar.tty, bar.bar = False, None  # log lines even when the tests run on a terminal
    for done, seconds in enumerate(step_seconds, start=1):
        clock[0] += seconds
        bar.update(done)
    return [float(x) for x in re.findall(r"eta=(\S+)s", capsys.readouterr().err)]


def test_eta_forgets_a_slow_first_step(capsys, monkeypatch):
    """One 90-second step (compiling) then 1-second steps: after the window has moved past it,
    the eta is the remaining steps at one second each, not the run's average."""
    out = etas([90.0] + [1.0] * 19, window=6, capsys=capsys, monkeypatch=monkeypatch)
    assert len(out) == 20
    assert out[-1] == pytest.approx(80.0)  # 80 steps left at 1 s
    assert out[0] == pytest.approx(99 * 90.0)


def test_eta_at_a_steady_rate_is_exact(capsys, monkeypatch):
    out = etas([2.0] * 10, window=3, capsys=capsys, monkeypatch=monkeypatch)
    assert out == pytest.approx([2.0 * (100 - n) for n in range(1, 11)])
