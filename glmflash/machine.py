"""What machine this is, and which precision is fast on it.

Machines differ more than the code does: on a CPU with AVX-512 bf16 instructions (or AMX) a
bf16 matmul runs 2-8x faster than fp32, on an AVX2-only CPU about 50x slower, because oneDNN
then emulates it. So no speed choice is hard-coded. `bf16_speedup` times one matmul in fp32 and
in bf16 on the device, once per process, and a dtype is bf16 only where that measurement says
bf16 is clearly faster (BF16_MARGIN): a calibration, not the CPU's advertised capability,
because the same capability string covers CPUs with and without native bf16, and the
environment (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA, MKL_ENABLE_INSTRUCTIONS) can narrow what
the libraries use below what the CPU has. `machine_record` is the identity card written beside
every timing: CPU model, cores, torch's CPU capability, the bf16 measurement and the choices.
"""

from __future__ import annotations

import functools
import os
import platform
import time
from typing import Any

import torch

BF16_MARGIN = 1.25  # bf16 only when its matmul is at least this much faster than fp32's
CALIBRATION_SIZE = 256  # side of the square matmul timed in each dtype (tens of ms in all)
EMULATE_AVX2 = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}  # an AVX2-only CPU, on an AVX-512 one


def cpu_info() -> tuple[str, set[str]]:
    """The CPU's model name and its instruction-set flags (empty where /proc/cpuinfo is not)."""
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
    except OSError:
        return platform.processor() or platform.machine(), set()
    return info.get("model name", platform.machine()), set(info.get("flags", "").split())


def _matmul_seconds(
    device: torch.device, dtypes: tuple[torch.dtype, ...], n: int, repeats: int
) -> list[float]:
    """Best time of an n x n x n matmul in each dtype. The dtypes take turns, so a burst of
    load from other processes slows both alike; on the CPU one thread runs them, so a
    descheduled helper thread cannot stall a call. The first round (warm-up) is not timed."""
    g = torch.Generator().manual_seed(0)
    pairs = [tuple(torch.randn(n, n, generator=g).to(device, d) for _ in range(2)) for d in dtypes]
    best = [float("inf")] * len(dtypes)
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)
    try:
        for i in range(repeats + 1):
            for j, (a, b) in enumerate(pairs):
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                a @ b
                if device.type == "cuda":
                    torch.cuda.synchronize()
                if i:
                    best[j] = min(best[j], time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads)
    return best


@functools.cache
def _speedup(device: str) -> float:
    dev = torch.device(device)
    if dev.type == "mps":
        return 1.0  # no bf16 matmul to rely on across MPS versions: treat as no gain
    fp32, bf16 = _matmul_seconds(dev, (torch.float32, torch.bfloat16), CALIBRATION_SIZE, 5)
    return fp32 / bf16


def bf16_speedup(device: torch.device | str = "cpu") -> float:
    """fp32 matmul time / bf16 matmul time on `device`, measured once per process (> 1: bf16
    is faster)."""
    return _speedup(str(torch.device(device)))


def faster_dtype(speedup: float) -> torch.dtype:
    """bf16 where it is clearly faster (speedup >= BF16_MARGIN), else fp32."""
    return torch.bfloat16 if speedup >= BF16_MARGIN else torch.float32


def fast_matmul_dtype(device: torch.device | str = "cpu") -> torch.dtype:
    """The matmul dtype for work that tolerates bf16 rounding (Muon's Newton-Schulz)."""
    return faster_dtype(bf16_speedup(device))


def bf16_warning(device: torch.device | str) -> str | None:
    """One line for a user who asked for bf16 autocast where bf16 is slow; None where it is not."""
    speedup = bf16_speedup(device)
    if faster_dtype(speedup) == torch.bfloat16:
        return None
    return (
        f"warning: --precision bf16 on {torch.device(device)} without fast bf16: a bf16 "
        f"matmul measured {1 / speedup:.1f}x the time of fp32 here "
        f"(CPU capability {torch.backends.cpu.get_cpu_capability()}); fp32 will be faster"
    )


def machine_record(device: torch.device | str = "cpu", **choices: Any) -> dict[str, Any]:
    """The machine beside a timing: CPU model, cores, torch's CPU capability and version, the
    bf16 calibration, and the dtype `choices` the run made (name -> dtype or string)."""
    device = torch.device(device)
    cpu, flags = cpu_info()
    speedup = bf16_speedup(device)
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_bf16_flags": sorted(flags & {"avx512_bf16", "amx_bf16", "amx_tile"}),
        "isa_limits": {k: os.environ[k] for k in EMULATE_AVX2 if k in os.environ},
        "torch": torch.__version__,
        "device": str(device),
        "bf16_matmul_speedup": round(speedup, 3),
        "dtypes": {k: str(v).removeprefix("torch.") for k, v in choices.items()},
    }
