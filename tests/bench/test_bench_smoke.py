"""Benchmarks on the tiny preset: the commands run and print their schema; the naive model is
the same network; the FLOP count and the measuring helpers are right. No timing assertions."""

import argparse
import io
import json
import math
from contextlib import redirect_stdout

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from glmflash.bench import model as bench_model_module
from glmflash.bench.baselines.naive_model import naive_glmflash
from glmflash.bench.model import attention_flops, contests, stream_flops, train_flops
from glmflash.bench.peak import best_times, peak_memory
from glmflash.commands import bench as command
from glmflash.config import model_config
from glmflash.info import parameter_counts
from glmflash.model.lm import GLMFlash, make_attention

TINY = [
    "--preset",
    "tiny",
    "--repeats",
    "1",
    "--batch-size",
    "2",
    "--seq-len",
    "24",
    "--square-size",
    "32",
    "--gen-batch-size",
    "2",
    "--prompt-len",
    "10",
    "--new-tokens",
    "4",
    "--decode-contexts",
    "16,48",
    "--programs",
    "10",
]


def bench(*argv: str) -> str:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    out = io.StringIO()
    with redirect_stdout(out):
        assert command.run(parser.parse_args(argv)) == 0
    return out.getvalue()


@pytest.fixture(scope="module")
def result() -> dict:
    text = bench("all", "--json", *TINY)
    assert text.count("\n") == 1  # one JSON object on one line
    return json.loads(text)


def finite_positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def test_all_merges_the_sections(result):
    assert result["bench"] == "all" and result["preset"] == "tiny"
    assert {"model", "generate", "verify"} <= set(result)
    for section in ("model", "generate", "verify"):
        assert result[section]["bench"] == section
        assert set(result[section]["ratios"]) <= set(result["ratios"])
    env = result["environment"]
    assert env["threads"] >= 1 and env["cores"] >= 1 and env["cpu"]
    assert env["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert env["torch"] == torch.__version__ and env["bf16_matmul_speedup"] > 0


def test_model_schema(result):
    m = result["model"]
    assert m["tokens_per_step"] == 48
    for name in ("fp32", "bf16", "naive_fp32"):
        step = m["train_step"][name]
        assert finite_positive(step["seconds"]) and finite_positive(step["tokens_per_s"])
    for p in ("fp32", "bf16"):
        assert finite_positive(m["matmul_peak_gflops"][p]["gflops"])
        # tiny: d_model = expert_hidden = 64, so both model shapes are 48x64@64x64
        assert set(m["matmul_peak_gflops"][p]["by_shape"]) == {"48x64@64x64", "32x32@32x32"}
    assert set(m["components"]) == {"linear_attention", "sparse_attention", "moe"}
    for c in m["components"].values():
        assert all(
            finite_positive(c[k]) for k in ("ours_ms", "naive_ms", "ours_peak_mb", "naive_peak_mb")
        )
    # Allocation counts are deterministic: the prefix sum materialises [B, H, T, D, D].
    linear = m["components"]["linear_attention"]
    assert linear["naive_peak_mb"] > 2 * linear["ours_peak_mb"]
    expected = {
        "train_step_vs_naive",
        "peak_fraction",
        "peak_fraction_bf16",
        "train_step_bf16_vs_fp32",
        "linear_attention_vs_cumsum",
        "linear_attention_memory_vs_cumsum",
        "sparse_attention_vs_gathered",
        "sparse_attention_memory_vs_gathered",
        "moe_vs_masked",
        "moe_memory_vs_masked",
    }
    assert set(m["ratios"]) == expected
    assert all(finite_positive(v) for v in m["ratios"].values())
    for p, key in (("fp32", "peak_fraction"), ("bf16", "peak_fraction_bf16")):  # own peak each
        assert m["ratios"][key] == pytest.approx(
            m["train_step"][p]["model_gflops"] / m["matmul_peak_gflops"][p]["gflops"]
        )


def test_generate_schema(result):
    g = result["generate"]
    assert g["tokens_agree"] == 1.0  # cached decoding gives the tokens of full recomputation
    assert set(g["decode"]) == {"cached", "full_recompute"}
    assert set(g["step_ms_by_context"]) == {"16", "48"}
    for times in g["step_ms_by_context"].values():
        assert set(times) == {"model", "linear_layer", "sparse_layer"}
        assert all(finite_positive(t) for t in times.values())
    assert finite_positive(g["ratios"]["cached_vs_full_recompute"])
    mixed = g["mixed_lengths"]  # one batch of many lengths decodes as one batch per length
    assert mixed["tokens_agree"] is True and mixed["prompts"] == 3 * mixed["distinct_lengths"]
    assert mixed["distinct_lengths"] > 1 and mixed["new_tokens"] > 0
    assert finite_positive(g["ratios"]["one_batch_vs_per_length"])


def test_verify_schema(result):
    v = result["verify"]
    assert v["n_programs"] == 10
    assert "sandboxed_vs_inprocess" in v["ratios"]


@pytest.mark.parametrize("section", ["all", "generate"])
def test_table_output(result, section):
    if section != "all":  # what `bench generate` without --json prints
        result = {**result[section], "preset": "tiny", "environment": result["environment"]}
    out = io.StringIO()
    with redirect_stdout(out):
        command.print_table(result)
    text = out.getvalue()
    assert "== generate" in text and "== environment" in text
    assert text.split("== ratios")[1].count("cached_vs_full_recompute") == 1
    assert ("== model" in text) == (section == "all")


def test_bad_context_is_a_user_error():
    from glmflash.cli import CLIError

    with pytest.raises(CLIError, match="context"):
        bench("generate", *TINY, "--decode-contexts", "16,65")  # tiny context is 64


@pytest.mark.parametrize("overrides", [{}, {"linear_kind": "delta", "sparse_kind": "indexer"}])
def test_naive_model_is_the_same_network(overrides):
    """Same weights -> same loss and gradients as GLMFlash with the static mixer (float64)."""
    cfg = model_config("tiny", stream_mixer="static", **overrides)
    torch.manual_seed(0)
    naive = naive_glmflash(cfg).double()
    ours = GLMFlash(cfg).double()
    with torch.no_grad():
        for p in naive.parameters():
            p.add_(0.05 * torch.randn_like(p))  # off the initial values
    ours.load_state_dict(naive.state_dict())
    tokens = torch.randint(4, 260, (3, 41))
    losses = []
    for model in (ours, naive):
        out = model(tokens[:, :-1], tokens[:, 1:])
        (out.loss + out.aux_loss).backward()
        losses.append(out.loss)
    torch.testing.assert_close(losses[0], losses[1])
    for (name, a), b in zip(ours.named_parameters(), naive.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, msg=name)
    if not overrides:  # every module was swapped for its naive form
        kinds = {type(m).__name__ for m in naive.modules()}
        assert {
            "CumsumLinearAttention",
            "GatheredSparseAttention",
            "MaskedMoE",
            "PlainStaticMixer",
        } <= kinds


def test_naive_model_decodes_like_the_model():
    """The state after a naive prefill continues exactly like the model's own."""
    cfg = model_config("tiny", stream_mixer="static")
    torch.manual_seed(0)
    naive = naive_glmflash(cfg).double().eval()
    tokens = torch.randint(4, 260, (2, 30))
    full = naive(tokens).logits
    logits, state = naive.step(tokens[:, :20])
    rest, _ = naive.step(tokens[:, 20:], state)
    torch.testing.assert_close(torch.cat((logits, rest), 1), full)


def test_contests_compare_equal_functions():
    """Each timed pair computes the same thing on the same inputs (float32, tiny shapes)."""
    found = contests(model_config("tiny"), 2, 40, torch.device("cpu"))
    assert set(found) == {"linear_attention", "sparse_attention", "moe"}
    for name, c in found.items():
        torch.testing.assert_close(
            c.ours(*c.inputs), c.naive(*c.inputs), msg=name, atol=1e-5, rtol=1e-4
        )


def counted_flops(fn) -> int:
    """FLOPs of the matmuls fn runs, as torch's FlopCounterMode counts them (attention through
    the math backend, which it sees as two batched matmuls)."""
    with FlopCounterMode(display=False) as counter, torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        fn()
    return counter.get_total_flops()


@pytest.mark.parametrize("T", [16, 40])  # one whole chunk; two chunks and a partial one
def test_attention_flops_are_the_kernels_matmuls(T):
    B, d = 2, 64
    x = torch.randn(B, T, d)
    projections = 4 * 2 * B * T * d * d  # q, k, v, o
    for kind in ("L", "S"):
        cfg = model_config("tiny", layer_pattern=kind)
        attn = make_attention(cfg, kind)
        expected = B * attention_flops(cfg, T) // cfg.n_layers + projections
        assert counted_flops(lambda attn=attn: attn(x)) == expected, kind


@pytest.mark.parametrize("T", [16, 40])
def test_model_flops_match_a_forward(T):
    """2 * active * tokens + attention_flops + stream_flops * tokens is a forward's matmul FLOPs
    to within 1% (the rest: norm gains and stream coefficients, which are no matmuls), and a
    train step is 3x that."""
    cfg = model_config("tiny")
    model = GLMFlash(cfg)
    B = 2
    counted = counted_flops(lambda: model(torch.randint(4, 260, (B, T))))
    predicted = (
        2 * parameter_counts(cfg)["active"]["all"] * B * T
        + B * attention_flops(cfg, T)
        + B * T * stream_flops(cfg)
    )
    assert counted == pytest.approx(predicted, rel=1e-2)
    assert train_flops(cfg, B, T) == 3 * predicted


def test_peak_memory_counts_live_tensors():
    def fn():
        a = torch.empty(1000, 1000)  # 4 MB
        b = torch.empty(500, 1000)  # 2 MB while a is alive: peak 6 MB
        del a, b
        c = torch.empty(1200, 1000)  # 4.8 MB alone
        del c

    keep = torch.ones(10)  # allocated before: not counted
    assert peak_memory(fn, torch.device("cpu")) == 6_000_000
    assert keep.sum() == 10


def test_best_times_interleaves_and_takes_the_minimum():
    calls = []
    fns = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    times = best_times(fns, {"a": 3, "b": 1}, torch.device("cpu"))
    assert calls == ["a", "b", "a", "b", "a", "a"]  # warm-up, then rounds
    assert set(times) == {"a", "b"} and all(t >= 0 for t in times.values())


def test_peak_fraction_follows_from_its_inputs(monkeypatch):
    """With the timer, matmul peak and memory probe replaced by chosen numbers, each figure is
    the arithmetic of the docstring: model FLOPs = 6 * active * tokens + 3 * B * attention
    FLOPs, GFLOP/s = FLOPs / seconds / 1e9, peak_fraction = GFLOP/s / own dtype's peak."""
    seconds = {"fp32": 0.5, "bf16": 0.25, "naive_fp32": 4.0, "ours": 1e-3, "naive": 3e-3}
    peaks = {torch.float32: 8.0, torch.bfloat16: 32.0}
    monkeypatch.setattr(
        bench_model_module, "best_times", lambda fns, repeats, device: {k: seconds[k] for k in fns}
    )
    monkeypatch.setattr(
        bench_model_module,
        "matmul_peak",
        lambda shapes, dtype, device, repeats, earlier=None: {
            "gflops": peaks[dtype],
            "by_shape": {},
        },
    )
    monkeypatch.setattr(bench_model_module, "peak_memory", lambda fn, device: 2**20)
    cfg = model_config("tiny")
    B, T = 2, 24
    m = bench_model_module.bench_model(cfg, B, T, repeats=1, square=32)
    active = parameter_counts(cfg)["active"]["all"]
    flops = 3 * (2 * active * B * T + B * attention_flops(cfg, T) + B * T * stream_flops(cfg))
    assert m["model_flops_per_step"] == flops
    for p, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        step = m["train_step"][p]
        assert step["tokens_per_s"] == pytest.approx(B * T / seconds[p], rel=1e-12)
        assert step["model_gflops"] == pytest.approx(flops / seconds[p] / 1e9, rel=1e-12)
        assert step["peak_fraction"] == pytest.approx(
            flops / (seconds[p] * 1e9 * peaks[dtype]), rel=1e-12
        )
    assert m["ratios"]["peak_fraction"] == m["train_step"]["fp32"]["peak_fraction"]
    assert m["ratios"]["peak_fraction_bf16"] == m["train_step"]["bf16"]["peak_fraction"]
    assert m["ratios"]["train_step_vs_naive"] == pytest.approx(8.0)
    assert m["ratios"]["train_step_bf16_vs_fp32"] == pytest.approx(2.0)
    assert m["ratios"]["moe_vs_masked"] == pytest.approx(3.0)
