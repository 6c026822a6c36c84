"""`glmflash bench model|generate|verify|all|profile [--json]`: our speed against
straightforward baselines, both measured in the same run, and where a train step's time goes.

  model     train step of a preset (fp32, bf16 autocast) vs the naive model; model FLOP/s as
            a share of the matmul peak measured alongside; attention kernels and MoE
            dispatch vs their naive forms, with peak memory
  generate  cached decoding vs full recomputation; cached step time by context length
  verify    the sandboxed verifier pool vs in-process exec and a process per program
  all       the three, in that order
  profile   torch.profiler over a few pretraining steps (the pipeline's settings): time per
            part of the model (attention, MoE, stream connections, norms, ...), optimizer and
            step overhead, and the costliest ops
  rl        rollouts per second of the pipeline's RL steps from a trained --checkpoint, the
            time of sampling, verification and update, and the step with the reference lab's
            sampling (full recomputation per token); where the stage chooses bf16 updates,
            one update on the same rollouts in fp32 and in bf16

With --json: one JSON object, the raw figures beside `ratios`, which maps each comparison to
our speed / the baseline's (for memory: the baseline's peak / ours), so higher is better;
`peak_fraction` is the share of the measured fp32 matmul peak that the fp32 train step's model
FLOP/s reach, `peak_fraction_bf16` that of the bf16 peak reached by the bf16-autocast step.
Every object carries `environment`: the CPU model, cores, torch's CPU capability and version,
and the measured bf16/fp32 matmul speed. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from typing import Any

import torch

from glmflash.bench.generate import bench_generate, check_lengths
from glmflash.bench.model import bench_model
from glmflash.bench.profile import bench_profile
from glmflash.bench.rl import bench_rl
from glmflash.bench.verify import bench_verify
from glmflash.checkpoint import CheckpointError, read_config
from glmflash.config import (
    PRECISIONS,
    PRESETS,
    ConfigError,
    ModelConfig,
    PipelinePlan,
    model_config,
)
from glmflash.device import resolve_device
from glmflash.errors import CLIError
from glmflash.machine import machine_record

SECTIONS = ("model", "generate", "verify")


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def context_list(text: str) -> list[int]:
    try:
        return [positive_int(c) for c in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected positive integers separated by commas, got {text!r}"
        ) from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("which", choices=(*SECTIONS, "all", "profile", "rl"), help="what to measure")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--preset", default="25m", help=f"one of {', '.join(PRESETS)}")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, mps or auto")
    p.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="torch CPU threads (default: torch's own choice)",
    )
    p.add_argument("--repeats", type=positive_int, default=3, help="best of this many timed runs")
    p.add_argument(
        "--naive-repeats",
        type=positive_int,
        default=1,
        help="timed runs of the slow baselines (naive train step, full recompute)",
    )
    m = p.add_argument_group("model")
    m.add_argument("--batch-size", type=positive_int, default=32)
    m.add_argument("--seq-len", type=positive_int, default=128)
    m.add_argument(
        "--square-size",
        type=positive_int,
        default=1024,
        help="side of the square matmul in the peak measurement",
    )
    m.add_argument("--no-bf16", action="store_true", help="skip the bf16 autocast step")
    g = p.add_argument_group("generate")
    g.add_argument("--gen-batch-size", type=positive_int, default=16)
    g.add_argument(
        "--prompt-len", type=positive_int, default=60, help="prompt tokens, BOS included"
    )
    g.add_argument("--new-tokens", type=positive_int, default=48)
    g.add_argument(
        "--decode-contexts",
        type=context_list,
        default="64,192",
        help="comma-separated context lengths for the cached step time",
    )
    f = p.add_argument_group("profile and rl")
    f.add_argument(
        "--steps",
        type=positive_int,
        default=3,
        help="train steps profiled (profile); RL steps timed after one warm-up (rl)",
    )
    f.add_argument(
        "--checkpoint", default=None, help="rl: the trained model whose RL steps are timed"
    )
    f.add_argument(
        "--optimizer", choices=("adamw", "muon"), default=None, help="default: the pipeline's"
    )
    f.add_argument(
        "--precision", choices=PRECISIONS, default=None, help="profile: default the pipeline's"
    )
    v = p.add_argument_group("verify")
    v.add_argument(
        "--programs", type=positive_int, default=600, help="programs in the verifier mix"
    )


def log(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def load_average() -> list[float] | None:
    """1, 5 and 15 minute load averages: figures taken on a busy machine are slower."""
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


def environment(device: Any) -> dict[str, Any]:
    """The machine beside every figure (`machine.machine_record`) and the load on it."""
    return {**machine_record(device), "load_average": load_average()}


def run_section(
    which: str, args: argparse.Namespace, cfg: ModelConfig, device: Any
) -> dict[str, Any]:
    if which == "model":
        return bench_model(
            cfg,
            args.batch_size,
            args.seq_len,
            args.repeats,
            args.naive_repeats,
            args.square_size,
            not args.no_bf16,
            device,
            log,
        )
    if which == "generate":
        return bench_generate(
            cfg,
            args.gen_batch_size,
            args.prompt_len,
            args.new_tokens,
            args.decode_contexts,
            args.repeats,
            args.naive_repeats,
            device,
            log,
        )
    if which == "rl":
        return bench_rl(args.checkpoint, args.steps, device, log)
    if which == "profile":
        plan = PipelinePlan.full(seed=0).pretrain
        settings = replace(
            plan,
            preset=args.preset,
            batch_size=args.batch_size,
            seq_len=args.seq_len,
            optimizer=args.optimizer or plan.optimizer,
            precision=args.precision or plan.precision,
        )
        return bench_profile(cfg, settings, args.steps, device=device, log=log)
    log(f"verifier throughput on {args.programs} programs")
    return {"bench": "verify", **bench_verify(args.programs, n_fresh=min(40, args.programs))}


def run(args: argparse.Namespace) -> int:
    sections = {"all": SECTIONS}.get(args.which, (args.which,))
    try:
        cfg = model_config(args.preset)
        device = resolve_device(args.device)
        if "generate" in sections:  # before minutes of other measurements
            check_lengths(cfg, args.prompt_len, args.new_tokens, args.decode_contexts)
        if args.which == "rl" and not args.checkpoint:
            raise ValueError(
                "bench rl needs a trained model (--checkpoint DIR): a random model's "
                "completions stop at their first token"
            )
        if args.which == "rl":
            read_config(args.checkpoint)  # a missing or broken folder, before any work
    except (ConfigError, ValueError, CheckpointError) as e:
        raise CLIError(str(e)) from None
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    env = environment(device)
    results = {s: run_section(s, args, cfg, device) for s in sections}
    if args.which == "all":
        ratios = {k: v for r in results.values() for k, v in r["ratios"].items()}
        result = {"bench": "all", **results, "ratios": ratios}
    else:
        result = results[args.which]
    result["preset"] = args.preset
    result["environment"] = {**env, "load_average_after": load_average()}

    if args.json:
        print(json.dumps(result))
    else:
        print_table(result)
    return 0


def print_table(result: dict[str, Any]) -> None:
    """Sections of aligned `name  value` rows, the ratios last."""
    if result["bench"] == "profile":
        return print_profile(result)
    if result["bench"] == "all":
        groups = {s: result[s] for s in SECTIONS}
    else:
        groups = {
            result["bench"]: {k: v for k, v in result.items() if k not in ("preset", "environment")}
        }
    groups["environment"] = {"preset": result["preset"], **result["environment"]}
    for title, values in groups.items():
        print(f"== {title}")
        _print_rows({k: v for k, v in values.items() if k not in ("bench", "ratios")})
    print("== ratios (ours / baseline; higher is better)")
    _print_rows(result["ratios"])


def print_profile(result: dict[str, Any]) -> None:
    """The parts of a train step as a table, then the costliest ops and the machine."""
    print(
        f"train step: {result['step_seconds']:.3f} s ({result['tokens_per_s']:.0f} tokens/s; "
        f"{result['batch_size']} x {result['seq_len']}, {result['optimizer']}, "
        f"{result['precision']}); under the profiler {result['profiled_step_seconds']:.3f} s"
    )
    width = max(len(k) for k in result["parts"])
    print(f"  {'part':<{width}}  {'forward ms':>10}  {'backward ms':>11}  {'ms':>8}  share")
    for name, p in result["parts"].items():
        print(
            f"  {name:<{width}}  {p['forward_ms']:>10.1f}  {p['backward_ms']:>11.1f}  "
            f"{p['ms']:>8.1f}  {100 * p['share']:5.1f}%"
        )
    print("costliest ops (self time per step)")
    width = max(len(o["op"]) for o in result["top_ops"])
    for o in result["top_ops"]:
        print(
            f"  {o['op']:<{width}}  {o['calls']:>7.0f} calls  {o['ms']:>8.1f} ms  "
            f"{100 * o['share']:5.1f}%"
        )
    print("== environment")
    _print_rows({"preset": result["preset"], **result["environment"]})


def _print_rows(values: dict[str, Any]) -> None:
    rows = _flatten(values)
    width = max((len(k) for k, _ in rows), default=0)
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")


def _flatten(obj: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(obj, dict):
        return [
            row
            for k, v in obj.items()
            for row in _flatten(v, f"{prefix}.{k}" if prefix else str(k))
        ]
    if isinstance(obj, float):
        return [(prefix, f"{obj:.4g}")]
    if isinstance(obj, list):
        return [(prefix, ", ".join(f"{x:.4g}" if isinstance(x, float) else str(x) for x in obj))]
    return [(prefix, "-" if obj is None else str(obj))]
