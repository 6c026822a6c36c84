"""Progress of long work: a tqdm bar on a terminal, plain log lines otherwise."""

from __future__ import annotations

import sys
import time

from tqdm import tqdm


class Progress:
    """`update(n, **figures)` with n the number of units done so far (absolute)."""

    def __init__(
        self,
        total: int,
        start: int = 0,
        enabled: bool = True,
        unit: str = "step",
        desc: str = "",
        every_s: float = 10.0,
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
        self.t0 = self.last_log = time.perf_counter()
        self.start = start

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
                rate = (done - self.start) / max(now - self.t0, 1e-9)
                eta = (self.total - done) / rate if rate > 0 else float("inf")
                parts = " ".join(f"{k}={v}" for k, v in text.items())
                print(
                    f"{self.desc}{' ' if self.desc else ''}{self.unit} {done}/{self.total} "
                    f"{parts} eta={eta:.0f}s",
                    file=sys.stderr,
                    flush=True,
                )
                self.last_log = now
        self.done = done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
