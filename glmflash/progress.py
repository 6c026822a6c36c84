"""Progress of long work: a tqdm bar on a terminal, plain log lines otherwise."""

from __future__ import annotations

import sys
import time
from collections import deque

from tqdm import tqdm


class Progress:
    """`update(n, **figures)` with n the number of units done so far (absolute).

    The eta of a log line comes from the rate over the last `window` log lines, as tqdm's bar
    smooths its own: a slow start (compiling, a first evaluation) fades out of it."""

    def __init__(
        self,
        total: int,
        start: int = 0,
        enabled: bool = True,
        unit: str = "step",
        desc: str = "",
        every_s: float = 10.0,
        window: int = 6,
    ) -> None:
        self.total, self.done, self.unit, self.desc = total, start, unit, desc
        self.enabled, self.every_s = enabled, every_s
        self.tty = enabled and sys.stderr.isatty()
        self.bar = (
            tqdm(
                total=total,
                initial=start,
                unit=unit,
                desc=desc,
                dynamic_ncols=True,
                file=sys.stderr,
            )
            if self.tty
            else None
        )
        self.last_log = time.perf_counter()
        self.marks = deque([(self.last_log, start)], maxlen=window)  # (time, done) per log line

    def update(self, done: int, **figures: float) -> None:
        if not self.enabled:
            return
        text = {k: f"{v:.4g}" if isinstance(v, float) else str(v) for k, v in figures.items()}
        if self.bar is not None:
            self.bar.update(done - self.done)
            self.bar.set_postfix(text, refresh=False)
        else:
            now = time.perf_counter()
            if now - self.last_log >= self.every_s or done == self.total:
                t_then, done_then = self.marks[0]
                rate = (done - done_then) / max(now - t_then, 1e-9)
                eta = (self.total - done) / rate if rate > 0 else float("inf")
                parts = " ".join(f"{k}={v}" for k, v in text.items())
                print(
                    f"{self.desc}{' ' if self.desc else ''}{self.unit} {done}/{self.total} "
                    f"{parts} eta={eta:.0f}s",
                    file=sys.stderr,
                    flush=True,
                )
                self.last_log = now
                self.marks.append((now, done))
        self.done = done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
