"""Device selection, one helper used by every command: auto picks cuda, then mps, then cpu."""

from __future__ import annotations

import contextlib

import torch

from glmflash.config import PRECISIONS

DEVICE_CHOICES = ("auto", "cpu", "mps", "cuda")


def resolve_device(name: str = "auto") -> torch.device:
    """The torch device for `name`; a device that is asked for but absent is a ValueError."""
    if name not in DEVICE_CHOICES and not name.startswith("cuda:"):
        raise ValueError(f"unknown device {name!r}; choose from {', '.join(DEVICE_CHOICES)}")
    has_mps = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps" if has_mps else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for but CUDA is not available here")
    if name == "mps" and not has_mps:
        raise ValueError("device 'mps' was asked for but MPS is not available here")
    return torch.device(name)


def autocast_dtype(device: torch.device, precision: str) -> torch.dtype | None:
    """The autocast dtype for precision 'fp32' | 'bf16' | 'auto' on `device` (None: no
    autocast). auto is bf16 where this machine's bf16 matmul measured clearly faster than
    fp32's (`machine.fast_matmul_dtype`: CPUs with AMX or AVX-512 bf16, recent GPUs), else
    fp32: on an AVX2-only CPU a bf16 matmul is emulated and about 50x slower."""
    if precision == "auto":
        from glmflash.machine import fast_matmul_dtype

        precision = "bf16" if fast_matmul_dtype(device) == torch.bfloat16 else "fp32"
    if precision == "fp32":
        return None
    if precision != "bf16":
        raise ValueError(f"unknown precision {precision!r}; choose from {', '.join(PRECISIONS)}")
    if device.type == "mps":
        return torch.float16
    return torch.bfloat16


def autocast(device: torch.device, dtype: torch.dtype | None):
    """torch.autocast to `dtype` on the device, or nothing when dtype is None (fp32)."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)
