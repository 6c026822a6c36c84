"""`glmflash bench profile`: every op lands in the part it belongs to, forward and backward.

The Sinkhorn iterations are the check that cannot be faked: each connection runs exactly
2 * iters log-softmaxes forward and as many backward, and nothing else in the model calls
log_softmax on a [S, S, ...] tensor, so the counts charged to "mhc: Sinkhorn" are known."""

import argparse
import io
import json
from collections import Counter
from contextlib import redirect_stdout

import pytest
import torch

from glmflash.bench.model import train_step
from glmflash.bench.profile import (
    OVERHEAD,
    PARTS,
    event_parts,
    part_scopes,
    profile_steps,
)
from glmflash.commands import bench as command
from glmflash.config import PipelinePlan, PretrainConfig, model_config
from glmflash.model import streams
from glmflash.model.lm import GLMFlash

STEPS = 2


@pytest.fixture(scope="module")
def profiled():
    cfg = model_config("tiny")
    settings = PretrainConfig(preset="tiny", batch_size=2, seq_len=16, optimizer="muon")
    torch.manual_seed(0)
    model = GLMFlash(cfg).train()
    x = torch.randint(4, 200, (2, 17))
    step = train_step(model, x[:, :-1], x[:, 1:], None, settings)
    step()
    with part_scopes(model):
        prof, _ = profile_steps(step, STEPS, torch.device("cpu"))
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU]
    return cfg, model, events, event_parts(events)


def charged(events, parts, op: str) -> Counter:
    return Counter(p for e, p in zip(events, parts, strict=True) if e.name == op)


def test_sinkhorn_ops_are_counted_forward_and_backward(profiled):
    cfg, _, events, parts = profiled
    expected = 2 * cfg.sinkhorn_iters * 2 * cfg.n_layers * STEPS  # 2 connections a block
    forward = charged(events, parts, "aten::_log_softmax")
    backward = charged(events, parts, "aten::_log_softmax_backward_data")
    assert forward[("mhc: Sinkhorn", False)] == expected
    assert backward[("mhc: Sinkhorn", True)] == expected
    # the only other log_softmax is the loss's, once a step each way
    assert forward[("head, loss, stream copy and merge", False)] == STEPS
    assert backward[("head, loss, stream copy and merge", True)] == STEPS


def test_every_part_gets_its_backward(profiled):
    cfg, _, events, parts = profiled
    seen = {p for p in parts}
    for part in (
        "attention (linear)",
        "attention (sparse)",
        "moe",
        "mhc: coefficients",
        "mhc: read and write",
        "norms",
        "embedding",
    ):
        assert (part, False) in seen and (part, True) in seen, part
    assert ("optimizer", False) in seen and ("gradient clipping", False) in seen
    # the routed experts' matmuls run inside the MoE, forward and backward
    mm = charged(events, parts, "aten::mm")
    assert mm[("moe", False)] > 0 and mm[("moe", True)] > 0
    assert {p for p, _ in seen} <= set(PARTS)


def test_scopes_are_removed_afterwards(profiled):
    _, model, _, _ = profiled
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    assert all("coefficients" not in vars(layer.hc_attn) for layer in model.layers)
    assert streams.sinkhorn.__name__ == "sinkhorn"


def test_command_prints_parts_and_json():
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    argv = ["profile", "--preset", "tiny", "--batch-size", "2", "--seq-len", "16", "--steps", "1"]
    argv += ["--precision", "fp32"]
    out = io.StringIO()
    with redirect_stdout(out):
        args = [*argv, "--json", "--optimizer", "adamw", "--precision", "bf16"]  # the last wins
        assert command.run(parser.parse_args(args)) == 0
    result = json.loads(out.getvalue())
    assert result["optimizer"] == "adamw" and result["step_seconds"] > 0
    assert result["precision"] == "bf16"
    assert set(result["parts"]) <= set(PARTS) and OVERHEAD in result["parts"]
    assert sum(p["share"] for p in result["parts"].values()) == pytest.approx(1.0, abs=0.02)
    assert result["top_ops"] and result["environment"]["cpu_capability"]
    out = io.StringIO()
    with redirect_stdout(out):
        assert command.run(parser.parse_args(argv)) == 0
    text = out.getvalue()
    assert "mhc: Sinkhorn" in text and "costliest ops" in text
    assert f", {PipelinePlan.full(seed=0).pretrain.optimizer}, fp32)" in text  # the default


def test_a_node_belongs_to_the_last_forward_op_with_its_number():
    """An op that makes no autograd node (slicing integer tokens, a shape change) records the
    number the next node will take; that node's backward belongs to where the node was made."""
    from types import SimpleNamespace as Event

    def event(name, start, parent=None, seq=-1):
        return Event(name=name, time_range=Event(start=start), cpu_parent=parent, sequence_nr=seq)

    a = event("glmflash::norms", 0)
    b = event("glmflash::moe", 2)
    backward = event("autograd::engine::evaluate_function: MulBackward0", 5, seq=7)
    events = [
        a,
        event("aten::slice", 1, a, seq=7),
        b,
        event("aten::mul", 3, b, seq=7),
        backward,
        event("aten::mul", 6, backward),
        event("aten::add", 9),
    ]
    assert event_parts(events) == [
        ("norms", False),
        ("norms", False),
        ("moe", False),
        ("moe", False),
        ("moe", True),
        ("moe", True),
        (OVERHEAD, False),
    ]
