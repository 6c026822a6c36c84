"""`glmflash bench model`: training speed against the straightforward implementation.

Measured in one run, so that every figure sees the same machine:
  * the matmul peak in fp32 and bf16 (the model's own [B*T, d] @ [d, hidden] shapes and a
    large square), the yardstick for the model FLOP/s;
  * the whole train step (forward, backward, gradient clipping, AdamW) in fp32 and under bf16
    autocast, and the same step of `naive_glmflash` (fp32), taking turns;
  * the core of each attention and of the MoE against its naive form: the kernels on q, k, v,
    the routed experts on routed tokens (forward + backward of that function alone, same
    inputs and weights), with the peak tensor memory of each.

Model FLOPs per step = 6 * active parameters * tokens + 3 * attention FLOPs (forward, and twice
that for backward), with the attention FLOPs of `attention_flops`. Each step's `peak_fraction`
divides its model FLOP/s by the matmul peak of its own precision: the fp32 step by the fp32
peak, the bf16-autocast step by the bf16 peak (ratios: `peak_fraction`, `peak_fraction_bf16`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from glmflash.bench.baselines.attention import cumsum_linear_attention, gathered_sparse_attention
from glmflash.bench.baselines.naive_model import naive_form, naive_glmflash
from glmflash.bench.peak import MEMORY_METHOD, best_times, matmul_peak, peak_memory
from glmflash.config import ModelConfig, PretrainConfig
from glmflash.device import autocast_dtype
from glmflash.info import parameter_counts
from glmflash.model.attention_linear import elu_linear_attention_chunked
from glmflash.model.attention_sparse import fixed_sparse_mask
from glmflash.model.lm import GLMFlash
from glmflash.model.moe import MoE
from glmflash.train.optim import make_optimizer
from glmflash.train.pretrain import pretrain_step

Log = Callable[[str], None]


def attention_flops(cfg: ModelConfig, T: int) -> int:
    """Forward FLOPs of one sequence of T tokens spent in attention outside parameter matmuls,
    counted as the kernels execute them (per head, D = head_dim):

        linear, per chunk of c tokens: phi(Q) phi(K)^T and A V (the causal block in full,
                2 c^2 D each), phi(Q) S and the state update phi(K)^T V (2 c D^2 each), the
                normaliser phi(Q) z (2 c D)
        sparse: scaled_dot_product_attention with a mask: Q K^T and P V over all T keys
                (2 T^2 D each)

    The delta-rule variant is counted like the ELU one (a lower bound)."""
    C, D, H = cfg.linear_chunk, cfg.head_dim, cfg.n_heads
    chunks = [min(C, T - start) for start in range(0, T, C)]
    linear = H * sum(4 * c * c * D + 4 * c * D * D + 2 * c * D for c in chunks)
    sparse = H * 4 * T * T * D
    n_linear = cfg.layer_kinds.count("L") + int(cfg.mtp)
    return n_linear * linear + cfg.layer_kinds.count("S") * sparse


def stream_flops(cfg: ModelConfig) -> int:
    """Forward FLOPs per token of the residual streams' connections (two per block): the read
    sum_s w_s H_s (2 S C) and the write M H (2 S^2 C), batched matmuls per token."""
    S, C = cfg.n_streams, cfg.d_model
    return 2 * (cfg.n_layers + int(cfg.mtp)) * (2 * S * C + 2 * S * S * C)


def train_flops(cfg: ModelConfig, batch_size: int, seq_len: int) -> int:
    """Model FLOPs of one train step: 3x the forward's, which is 2 N_active per token, the
    attention outside parameter matmuls, and the streams' connections."""
    active = parameter_counts(cfg)["active"]["all"]
    tokens = batch_size * seq_len
    forward = 2 * active * tokens + batch_size * attention_flops(cfg, seq_len)
    return 3 * (forward + tokens * stream_flops(cfg))


def train_step(
    model: GLMFlash,
    x: Tensor,
    y: Tensor,
    amp: torch.dtype | None,
    cfg: PretrainConfig | None = None,
) -> Callable[[], None]:
    """The pretraining loop's update (`train.pretrain.pretrain_step`) on a fixed batch, with the
    settings of `cfg` (default: PretrainConfig's)."""
    cfg = cfg or PretrainConfig()
    optimizer = make_optimizer(model, cfg)

    def step() -> None:
        pretrain_step(model, optimizer, x, y, cfg, amp)

    return step


@dataclass
class Contest:
    """Our core function and its naive form, called on the same inputs."""

    baseline: str  # the naive form's short name, in the ratio names
    compares: str
    ours: Callable[..., Tensor]
    naive: Callable[..., Tensor]
    inputs: tuple[Tensor, ...]
    ours_params: nn.Module | None = None  # whose gradients each call starts afresh
    naive_params: nn.Module | None = None


def contests(
    cfg: ModelConfig, batch_size: int, seq_len: int, device: torch.device
) -> dict[str, Contest]:
    """The attention kernels on q, k, v [B, H, T, D]; the routed experts of one MoE on
    x [B*T, d_model] with its own routing (the router and shared expert are common to both)."""
    g = torch.Generator().manual_seed(0)

    def leaf(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=g).to(device).requires_grad_()

    B, T, H, D = batch_size, seq_len, cfg.n_heads, cfg.head_dim
    window, stride = cfg.sparse_window, cfg.sparse_stride
    qkv = (leaf(B, H, T, D), leaf(B, H, T, D), leaf(B, H, T, D))
    mask = fixed_sparse_mask(T, T, 0, window, stride, device)
    torch.manual_seed(0)
    moe = MoE(cfg).to(device)
    masked = naive_form(moe, cfg)
    x = leaf(B * T, cfg.d_model)
    with torch.no_grad():
        index, gates, _ = moe.route(x)
    counts = torch.bincount(index.flatten(), minlength=cfg.n_experts)
    return {
        "linear_attention": Contest(
            "cumsum",
            "chunkwise vs cumsum of outer products",
            lambda q, k, v: elu_linear_attention_chunked(q, k, v, None, cfg.linear_chunk)[0],
            cumsum_linear_attention,
            qkv,
        ),
        "sparse_attention": Contest(
            "gathered",
            "masked SDPA vs gathered keys",
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
            lambda q, k, v: gathered_sparse_attention(q, k, v, window, stride),
            qkv,
        ),
        "moe": Contest(
            "masked",
            "sorted dispatch vs a boolean mask per expert",
            moe.experts,
            masked.experts,
            (x, index, gates.requires_grad_(), counts),
            moe,
            masked,
        ),
    }


def forward_backward(
    fn: Callable[..., Tensor], inputs: tuple[Tensor, ...], params: nn.Module | None
) -> Callable[[], None]:
    """fn(*inputs) and its backward from a fixed random output gradient, fresh gradients."""
    with torch.no_grad():
        grad = torch.randn_like(fn(*inputs))

    def run() -> None:
        for t in inputs:
            t.grad = None
        if params is not None:
            params.zero_grad(set_to_none=True)
        fn(*inputs).backward(grad)

    return run


def bench_components(
    cfg: ModelConfig, batch_size: int, seq_len: int, repeats: int, device: torch.device, log: Log
) -> dict[str, dict[str, Any]]:
    """Forward + backward time and peak memory of each contest, ours against naive."""
    results = {}
    for name, c in contests(cfg, batch_size, seq_len, device).items():
        log(f"component {name} ({c.compares})")
        fns = {
            "ours": forward_backward(c.ours, c.inputs, c.ours_params),
            "naive": forward_backward(c.naive, c.inputs, c.naive_params),
        }
        seconds = best_times(fns, repeats, device)
        memory = {k: peak_memory(fn, device) for k, fn in fns.items()}
        results[name] = {
            "baseline": c.baseline,
            "compares": c.compares,
            "ours_ms": 1e3 * seconds["ours"],
            "naive_ms": 1e3 * seconds["naive"],
            "ours_peak_mb": _mb(memory["ours"]),
            "naive_peak_mb": _mb(memory["naive"]),
        }
    return results


def time_train_steps(
    cfg: ModelConfig,
    batch_size: int,
    seq_len: int,
    precisions: list[str],
    repeats: int,
    naive_repeats: int,
    device: torch.device,
) -> dict[str, float]:
    """Best seconds of our train step in each precision and of the naive model's in fp32, on
    one random batch, both models from the same initial weights."""
    g = torch.Generator().manual_seed(0)
    batch = torch.randint(4, 260, (batch_size, seq_len + 1), generator=g).to(device)
    x, y = batch[:, :-1], batch[:, 1:]
    torch.manual_seed(0)
    ours = GLMFlash(cfg).to(device).train()
    torch.manual_seed(0)
    naive = naive_glmflash(cfg).to(device).train()
    steps = {
        p: train_step(ours, x, y, autocast_dtype(device, "bf16") if p == "bf16" else None)
        for p in precisions
    }
    steps["naive_fp32"] = train_step(naive, x, y, None)
    counts = {**dict.fromkeys(precisions, repeats), "naive_fp32": naive_repeats}
    return best_times(steps, counts, device)


def model_ratios(train: dict[str, Any], components: dict[str, Any]) -> dict[str, float]:
    """The headline figures: each one a ratio of two timings (or a FLOP rate over the peak)
    measured in the same run."""
    ratios = {
        "train_step_vs_naive": train["naive_fp32"]["seconds"] / train["fp32"]["seconds"],
        "peak_fraction": train["fp32"]["peak_fraction"],
    }
    if "bf16" in train:
        ratios["peak_fraction_bf16"] = train["bf16"]["peak_fraction"]
        ratios["train_step_bf16_vs_fp32"] = train["fp32"]["seconds"] / train["bf16"]["seconds"]
    for name, c in components.items():
        ratios[f"{name}_vs_{c['baseline']}"] = c["naive_ms"] / c["ours_ms"]
        if c["ours_peak_mb"] and c["naive_peak_mb"] is not None:
            ratios[f"{name}_memory_vs_{c['baseline']}"] = c["naive_peak_mb"] / c["ours_peak_mb"]
    return ratios


def bench_model(
    cfg: ModelConfig,
    batch_size: int = 32,
    seq_len: int = 128,
    repeats: int = 3,
    naive_repeats: int = 1,
    square: int = 1024,
    bf16: bool = True,
    device: torch.device | str = "cpu",
    log: Log = lambda _: None,
) -> dict[str, Any]:
    """Every figure of `glmflash bench model`, as one JSON-ready dict with `ratios`.
    One piece on purpose: the measurements in the order they run (the peak before and after)."""
    device = torch.device(device)
    tokens = batch_size * seq_len
    precisions = {"fp32": torch.float32, **({"bf16": torch.bfloat16} if bf16 else {})}

    shapes = [
        (tokens, cfg.d_model, cfg.expert_hidden),
        (tokens, cfg.expert_hidden, cfg.d_model),
        (square, square, square),
    ]

    def measure_peak(earlier: dict[str, Any]) -> dict[str, Any]:
        return {
            p: matmul_peak(shapes, dtype, device, max(repeats, 5), earlier.get(p))
            for p, dtype in precisions.items()
        }

    log("matmul peak (measured now and again at the end)")
    peak = measure_peak({})

    log(f"train steps: ours in {', '.join(precisions)}, naive in fp32 (slow)")
    seconds = time_train_steps(
        cfg, batch_size, seq_len, list(precisions), repeats, naive_repeats, device
    )
    components = bench_components(cfg, batch_size, seq_len, repeats, device, log)
    log("matmul peak, again")
    peak = measure_peak(peak)

    flops = train_flops(cfg, batch_size, seq_len)
    train = {}
    for name, s in seconds.items():
        train[name] = {"seconds": s, "tokens_per_s": tokens / s, "model_gflops": flops / s / 1e9}
    for p in precisions:  # each step against the peak of its own matmul dtype
        train[p]["peak_fraction"] = train[p]["model_gflops"] / peak[p]["gflops"]

    ratios = model_ratios(train, components)
    counts = parameter_counts(cfg)
    return {
        "bench": "model",
        "batch_size": batch_size,
        "seq_len": seq_len,
        "tokens_per_step": tokens,
        "repeats": repeats,
        "naive_repeats": naive_repeats,
        "parameters": {"total": counts["total"]["all"], "active": counts["active"]["all"]},
        "model_flops_per_step": flops,
        "matmul_peak_gflops": peak,
        "train_step": train,
        "naive_model": "static mixer, cumsum linear attention, gathered sparse attention, "
        "masked MoE",
        "components": components,
        "memory_method": MEMORY_METHOD,
        "ratios": ratios,
    }


def _mb(nbytes: int | None) -> float | None:
    return None if nbytes is None else nbytes / 2**20


__all__ = ["attention_flops", "bench_components", "bench_model", "train_flops"]
