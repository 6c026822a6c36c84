"""`glmflash bench profile`: where the time of one train step goes, part by part.

torch.profiler records every op of a few train steps of `glmflash pretrain` (the pipeline's
settings by default: forward, backward, gradient clipping, the optimizer, the MoE bias update).
Each op's self time is charged to a part of the model by its role, not its class name:

    forward ops     to the innermost labelled scope they ran in: a block's attention, its MoE,
                    a norm, the embedding, a stream connection's coefficients (with the
                    Sinkhorn iterations on their own), the rest of a block (the connections'
                    read and write), and the model's own code (stream copy and merge, head,
                    loss)
    backward ops    to the part whose forward op made their autograd node (the profiler's
                    sequence numbers link the two); gradient accumulation has no forward op
    optimizer ops   to "optimizer", clipping to "gradient clipping"

What no op accounts for (wall time minus the ops' self time outside any labelled scope) is
Python between the ops: the step's own overhead. Scopes are profiler ranges placed by forward
hooks and method wrappers on this one model, removed afterwards; the model's code is not
touched. The profiled step is also timed without the profiler, and the ratio is reported,
since recording thousands of ops has a cost of its own.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

from glmflash.bench.model import train_step
from glmflash.bench.peak import synchronize
from glmflash.config import ModelConfig, PretrainConfig
from glmflash.model import streams
from glmflash.model.lm import GLMFlash
from glmflash.train.step import PROFILE_SCOPE

SCOPE = PROFILE_SCOPE  # prefix of the profiler ranges (the update places two of them)
BACKWARD = "autograd::engine::evaluate_function: "
ATTENTION = {"L": "attention (linear)", "S": "attention (sparse)"}
PARTS = (
    "attention (linear)",
    "attention (sparse)",
    "moe",
    "mhc: Sinkhorn",
    "mhc: coefficients",
    "mhc: read and write",
    "norms",
    "embedding",
    "head, loss, stream copy and merge",
    "gradient accumulation",
    "gradient clipping",
    "optimizer",
    "step overhead (Python between ops)",
)
OVERHEAD = PARTS[-1]

Log = Callable[[str], None]


def _scope_module(module: nn.Module, label: str) -> list[Any]:
    """Open a profiler range named SCOPE + label around every forward of `module`."""
    open_ranges: list[record_function] = []

    def enter(_module: nn.Module, _args: Any) -> None:
        r = record_function(SCOPE + label)
        r.__enter__()
        open_ranges.append(r)

    def leave(_module: nn.Module, _args: Any, _out: Any) -> None:
        open_ranges.pop().__exit__(None, None, None)

    return [module.register_forward_pre_hook(enter), module.register_forward_hook(leave)]


def _scoped(fn: Callable[..., Any], label: str) -> Callable[..., Any]:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with record_function(SCOPE + label):
            return fn(*args, **kwargs)

    return wrapped


@contextlib.contextmanager
def part_scopes(model: GLMFlash) -> Iterator[None]:
    """Label the parts of `model` by role for as long as the context lasts."""
    handles = _scope_module(model, "head, loss, stream copy and merge")
    handles += _scope_module(model.embedding, "embedding")
    handles += _scope_module(model.final_norm, "norms")
    wrapped = []
    for block in model.layers:
        handles += _scope_module(block, "mhc: read and write")
        handles += _scope_module(block.attn, ATTENTION[block.kind])
        handles += _scope_module(block.moe, "moe")
        handles += _scope_module(block.attn_norm, "norms")
        handles += _scope_module(block.moe_norm, "norms")
        for hc in (block.hc_attn, block.hc_moe):
            if hasattr(hc, "coefficients"):  # the static mixer has none
                hc.coefficients = _scoped(hc.coefficients, "mhc: coefficients")
                wrapped.append(hc)
    try:
        with mock.patch.object(streams, "sinkhorn", _scoped(streams.sinkhorn, "mhc: Sinkhorn")):
            yield
    finally:
        for h in handles:
            h.remove()
        for hc in wrapped:
            del hc.coefficients  # the instance attribute shadowed the method


def _label(event: Any, seq_part: dict[int, str]) -> tuple[str | None, bool]:
    """(part, is_backward) of the innermost scope or backward node above `event`."""
    e = event
    while e is not None:
        if e.name.startswith(SCOPE):
            return e.name[len(SCOPE) :], False
        if e.name.startswith(BACKWARD):
            return seq_part.get(e.sequence_nr, "gradient accumulation"), True
        e = e.cpu_parent
    return None, False


def event_parts(events: list[Any]) -> list[tuple[str, bool]]:
    """(part, is_backward) of each event, in the order given; OVERHEAD for ops in no scope."""
    order = sorted(range(len(events)), key=lambda i: events[i].time_range.start)
    seq_part: dict[int, str] = {}  # ops that make no node share the number of the next one,
    for i in order:  # so the last forward op with a number is the node's maker
        part, backward = _label(events[i], {})
        if part is not None and not backward and events[i].sequence_nr >= 0:
            seq_part[events[i].sequence_nr] = part
    return [
        (part or OVERHEAD, backward) for part, backward in (_label(e, seq_part) for e in events)
    ]


def charge(events: list[Any]) -> dict[str, dict[str, float]]:
    """Self time in microseconds of the events, by part and phase (forward/backward)."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: {"forward": 0.0, "backward": 0.0})
    for e, (part, backward) in zip(events, event_parts(events), strict=True):
        out[part]["backward" if backward else "forward"] += e.self_cpu_time_total
    return out


def profile_steps(step: Callable[[], None], steps: int, device: torch.device) -> tuple[Any, float]:
    """Run `steps` calls of `step` under the profiler; (profiler, wall seconds)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        synchronize(device)
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        synchronize(device)
        wall = time.perf_counter() - t0
    return prof, wall


def timed(step: Callable[[], None], steps: int, device: torch.device) -> float:
    synchronize(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(device)
    return (time.perf_counter() - t0) / steps


def bench_profile(
    mcfg: ModelConfig,
    cfg: PretrainConfig,
    steps: int = 3,
    top: int = 12,
    device: torch.device | str = "cpu",
    log: Log = lambda _: None,
) -> dict[str, Any]:
    """The breakdown of `glmflash bench profile`, JSON-ready.
    One piece on purpose: set-up, the profiled steps and the table of parts, in order."""
    from glmflash.device import autocast_dtype

    device = torch.device(device)
    g = torch.Generator().manual_seed(0)
    batch = torch.randint(4, mcfg.vocab_size, (cfg.batch_size, cfg.seq_len + 1), generator=g)
    x, y = batch[:, :-1].to(device), batch[:, 1:].to(device)
    torch.manual_seed(cfg.seed)
    model = GLMFlash(mcfg).to(device).train()
    amp = autocast_dtype(device, cfg.precision)
    step = train_step(model, x, y, amp, cfg)
    log("one warm-up step, then the step without the profiler")
    step()
    plain = timed(step, steps, device)
    log(f"{steps} profiled steps")
    with part_scopes(model):
        prof, wall = profile_steps(step, steps, device)
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU]
    by_part = charge(events)
    wall_us = wall * 1e6
    accounted = sum(v["forward"] + v["backward"] for v in by_part.values())
    by_part[OVERHEAD]["forward"] += max(0.0, wall_us - accounted)
    parts = {}
    for name in [*PARTS, *sorted(set(by_part) - set(PARTS))]:
        if name not in by_part:
            continue
        f, b = by_part[name]["forward"], by_part[name]["backward"]
        parts[name] = {
            "forward_ms": f / steps / 1e3,
            "backward_ms": b / steps / 1e3,
            "ms": (f + b) / steps / 1e3,
            "share": (f + b) / wall_us,
        }
    ops = sorted(prof.key_averages(), key=lambda a: a.self_cpu_time_total, reverse=True)
    top_ops = [
        {
            "op": a.key,
            "calls": a.count / steps,
            "ms": a.self_cpu_time_total / steps / 1e3,
            "share": a.self_cpu_time_total / wall_us,
        }
        for a in ops
        if not a.key.startswith((SCOPE, BACKWARD))
    ][:top]
    tokens = cfg.batch_size * cfg.seq_len
    return {
        "bench": "profile",
        "steps": steps,
        "batch_size": cfg.batch_size,
        "seq_len": cfg.seq_len,
        "optimizer": cfg.optimizer,
        "precision": "fp32" if amp is None else "bf16",  # as resolved (cfg may say auto)
        "step_seconds": plain,
        "tokens_per_s": tokens / plain,
        "profiled_step_seconds": wall / steps,
        "parts": parts,
        "top_ops": top_ops,
        "ratios": {"profiled_vs_plain_step": wall / steps / plain},
    }


__all__ = [
    "OVERHEAD",
    "PARTS",
    "bench_profile",
    "charge",
    "event_parts",
    "part_scopes",
    "profile_steps",
]
