"""Work in fresh Python processes that die with the process that started them."""

from __future__ import annotations

import concurrent.futures as cf
import ctypes
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent: int) -> None:
    """Have Linux SIGKILL this process when its parent dies (a parent killed with SIGKILL
    cannot stop its children, and an orphan would go on writing into the run's folder). If
    the parent is already gone, exit now. Elsewhere nothing is done."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:
        os._exit(1)


def in_fresh_process(fn: Callable[..., T], *args: Any) -> T:
    """fn(*args) in a new interpreter (`spawn`: nothing inherited but the arguments), its
    result or exception brought back (an exception carries the child's traceback as its
    cause). fn, the arguments and the result must pickle."""
    context = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(
        1, mp_context=context, initializer=die_with_parent, initargs=(os.getpid(),)
    ) as pool:
        return pool.submit(fn, *args).result()


__all__ = ["die_with_parent", "in_fresh_process"]
