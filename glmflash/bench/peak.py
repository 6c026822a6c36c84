"""Measurement: best-of-N wall time with the contenders taking turns, the matmul peak, and the
peak tensor memory of a function.

Timing takes the minimum over repeats (noise from other work on the machine only ever adds
time), and runs the functions being compared in turn, round by round, so that a change in the
machine's load falls on all of them alike.

Peak memory counts the bytes of tensors alive at once while a function runs, above what was
allocated before it. CPU: from the allocation and free events of PyTorch's CPU allocator that
the profiler records (profile_memory=True), summed in time order: exact for tensors and
independent of the operating system (the resident set size would also count the interpreter,
libraries and pages the C allocator keeps). CUDA: the caching allocator's own peak statistic.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch.profiler import DeviceType, ProfilerActivity, profile

MEMORY_METHOD = (
    "peak bytes of live tensors above the starting point: the profiler's "
    "allocator events on CPU (torch.profiler, profile_memory=True), "
    "torch.cuda.max_memory_allocated on CUDA"
)


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels, so that wall time covers the work (a no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def best_times(
    fns: Mapping[str, Callable[[], object]],
    repeats: int | Mapping[str, int],
    device: torch.device,
    warmup: bool = True,
) -> dict[str, float]:
    """Best wall time in seconds of each function over its repeats (an int: the same for all).

    Each function first runs once untimed (unless warmup=False); then round r runs, in turn,
    every function that has more than r repeats.
    """
    counts = {name: repeats if isinstance(repeats, int) else repeats[name] for name in fns}
    if warmup:
        for fn in fns.values():
            fn()
        synchronize(device)
    best = {name: float("inf") for name in fns}
    for r in range(max(counts.values(), default=0)):
        for name, fn in fns.items():
            if r < counts[name]:
                synchronize(device)
                start = time.perf_counter()
                fn()
                synchronize(device)
                best[name] = min(best[name], time.perf_counter() - start)
    return best


def matmul_peak(
    shapes: Sequence[tuple[int, int, int]],
    dtype: torch.dtype,
    device: torch.device,
    repeats: int,
    earlier: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Best GFLOP/s of [M, K] @ [K, N] (2 M K N flops) over `shapes`, and per shape. With an
    `earlier` result of the same call, each shape keeps the better of the two: measuring
    before and after other work resists a change in the machine's load."""
    by_shape = {}
    for m, k, n in shapes:
        a = torch.randn(m, k, device=device).to(dtype)
        b = torch.randn(k, n, device=device).to(dtype)
        seconds = best_times({"mm": lambda a=a, b=b: a @ b}, repeats, device)["mm"]
        name = f"{m}x{k}@{k}x{n}"
        by_shape[name] = max(
            2 * m * k * n / seconds / 1e9, earlier["by_shape"][name] if earlier else 0.0
        )
    return {"gflops": max(by_shape.values()), "by_shape": by_shape}


@contextlib.contextmanager
def stderr_silenced() -> Iterator[None]:
    """Point file descriptor 2 at /dev/null: the profiler's C++ side logs every start and stop
    there (a Python exception raised inside still propagates, and prints after)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_memory(fn: Callable[[], object], device: torch.device) -> int | None:
    """Peak bytes of tensor memory in use while fn runs, above the amount at its start
    (None on devices other than CPU and CUDA)."""
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
        fn()
        synchronize(device)
        return torch.cuda.max_memory_allocated(device) - start
    if device.type != "cpu":
        return None
    with stderr_silenced(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted(
        (e.start_ns(), e.nbytes())
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]" and e.device_type() == DeviceType.CPU
    )
    live = peak = 0
    for _, nbytes in events:  # frees are negative
        live += nbytes
        peak = max(peak, live)
    return peak


__all__ = ["MEMORY_METHOD", "best_times", "matmul_peak", "peak_memory", "synchronize"]
