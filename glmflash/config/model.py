"""The model's shape and options, with named presets. Every field is validated at
construction; a bad value raises `ConfigError` naming the field."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from glmflash.flags import from_fields
from glmflash.tokenizer import VOCAB_SIZE


class ConfigError(ValueError):
    """An invalid configuration value; the message names the field."""


LINEAR_KINDS = ("elu", "delta")
SPARSE_KINDS = ("fixed", "indexer")
BALANCE_KINDS = ("aux", "bias")
STREAM_MIXERS = ("mhc", "static")


def check_choices(config: Any, **allowed: tuple[str, ...]) -> None:
    """Raise ConfigError naming the first field of `config` whose value is not among its
    allowed names."""
    for name, names in allowed.items():
        if getattr(config, name) not in names:
            raise ConfigError(f"{name} must be one of {names}, got {getattr(config, name)!r}")


@dataclass(frozen=True)
class ModelConfig:
    """Shape and options of the hybrid linear/sparse MoE language model."""

    vocab_size: int = VOCAB_SIZE
    d_model: int = 192
    n_heads: int = 6
    n_layers: int = 12
    layer_pattern: str = "LLLS"  # repeated over depth: L = linear attention, S = sparse
    context: int = 192
    # linear attention
    linear_kind: str = "elu"  # "elu": ELU+1 feature maps; "delta": gated delta rule (KDA style)
    linear_chunk: int = 32  # chunk length of the chunkwise-parallel form
    conv_size: int = 4  # taps of the short causal convolution (delta rule; elu with elu_conv)
    elu_conv: bool = False  # a short causal convolution on the ELU layers' q, k, v (Based)
    # sparse attention
    sparse_kind: str = "fixed"  # "fixed": local window + strided anchors; "indexer": learned
    sparse_window: int = 32
    sparse_stride: int = 32
    indexer_heads: int = 4
    indexer_dim: int = 32
    indexer_topk: int = 64
    index_pool: int = 1  # IndexPool: pool this many consecutive keys into one indexer key
    # positions
    rope_theta: float = 10000.0
    nope_main: bool = False  # NoPE in main attention, RoPE only in the indexer (as GLM does)
    # mixture of experts
    n_experts: int = 8
    expert_hidden: int = 384
    top_k: int = 2
    n_shared: int = 1
    balance: str = "aux"  # "aux": Switch-style loss; "bias": auxiliary-loss-free bias balancing
    balance_coef: float = 0.01
    bias_rate: float = 1e-3
    # residual streams
    n_streams: int = 4
    stream_mixer: str = "mhc"  # "mhc": manifold-constrained hyper-connections; "static"
    sinkhorn_iters: int = 20
    # misc
    mtp: bool = False  # multi-token prediction head (one extra depth)
    norm_eps: float = 1e-6
    init_std: float = 0.02

    def __post_init__(self) -> None:
        positive = (
            "vocab_size",
            "d_model",
            "n_heads",
            "n_layers",
            "context",
            "linear_chunk",
            "conv_size",
            "sparse_window",
            "sparse_stride",
            "indexer_heads",
            "indexer_dim",
            "indexer_topk",
            "index_pool",
            "n_experts",
            "expert_hidden",
            "top_k",
            "n_streams",
            "sinkhorn_iters",
        )
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.n_shared < 0:
            raise ConfigError(f"n_shared must be >= 0, got {self.n_shared}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"n_heads ({self.n_heads}) must divide d_model ({self.d_model})")
        if self.head_dim % 2:
            raise ConfigError(f"d_model / n_heads must be even for RoPE, got {self.head_dim}")
        if self.indexer_dim % 2:
            raise ConfigError(f"indexer_dim must be even for RoPE, got {self.indexer_dim}")
        if self.top_k > self.n_experts:
            raise ConfigError(f"top_k ({self.top_k}) must not exceed n_experts ({self.n_experts})")
        if not self.layer_pattern or set(self.layer_pattern) - {"L", "S"}:
            raise ConfigError(
                f"layer_pattern must be a non-empty string of 'L' and 'S', "
                f"got {self.layer_pattern!r}"
            )
        check_choices(
            self,
            linear_kind=LINEAR_KINDS,
            sparse_kind=SPARSE_KINDS,
            balance=BALANCE_KINDS,
            stream_mixer=STREAM_MIXERS,
        )
        if self.elu_conv and self.linear_kind != "elu":
            raise ConfigError("elu_conv applies to linear_kind elu (delta has its own convolution)")
        if self.vocab_size < VOCAB_SIZE:
            raise ConfigError(f"vocab_size must be at least {VOCAB_SIZE}, got {self.vocab_size}")
        if self.balance_coef < 0 or self.bias_rate < 0:
            raise ConfigError("balance_coef and bias_rate must be >= 0")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def layer_kinds(self) -> str:
        """One letter per layer: the pattern repeated over depth, e.g. LLLSLLLSLLLS."""
        reps = -(-self.n_layers // len(self.layer_pattern))
        return (self.layer_pattern * reps)[: self.n_layers]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        return from_fields(cls, data, "model option", ConfigError)


PRESETS: dict[str, dict[str, Any]] = {
    # The SPEC's default: 25.7M parameters, 12 layers L,L,L,S, 8 experts top-2 + 1 shared.
    "25m": {},
    # Every component on, well under 1M parameters: what the tests use.
    "tiny": dict(
        d_model=64,
        n_heads=4,
        n_layers=4,
        context=64,
        linear_chunk=16,
        sparse_window=8,
        sparse_stride=8,
        indexer_heads=2,
        indexer_dim=16,
        indexer_topk=16,
        n_experts=4,
        expert_hidden=64,
        top_k=2,
        n_shared=1,
        n_streams=4,
    ),
}


def model_config(preset: str = "25m", **overrides: Any) -> ModelConfig:
    """The named preset with `overrides` applied; unknown presets or options raise."""
    if preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
    return ModelConfig.from_dict({**PRESETS[preset], **overrides})


__all__ = ["ConfigError", "ModelConfig", "PRESETS", "model_config"]
