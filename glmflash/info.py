"""Total and active parameters per component, from a model config alone (no torch): the
counts `glmflash info` prints.

Active parameters are those one token uses: every parameter except the routed experts, of
which a token uses top_k of n_experts. The tied head is the embedding, counted once.
"""

from __future__ import annotations

from collections import Counter

from glmflash.config import ModelConfig

COMPONENTS = (
    "embedding",
    "attention",
    "router",
    "routed_experts",
    "shared_experts",
    "streams",
    "norms",
    "mtp",
)


def component_of(name: str) -> str:
    """The component a parameter belongs to, from its qualified name."""
    parts = name.split(".")
    if parts[0].startswith("mtp"):
        return "mtp"
    if parts[0] in ("embedding", "output"):
        return "embedding"
    if parts[0] == "final_norm":
        return "norms"
    sub = parts[2]  # layers.<i>.<sublayer>...
    if sub.startswith("hc_"):
        return "streams"
    if sub.endswith("_norm"):
        return "norms"
    if sub == "attn":
        return "attention"
    if sub == "moe":
        if parts[3].startswith("router"):
            return "router"
        return "shared_experts" if parts[3].startswith("shared") else "routed_experts"
    raise ValueError(f"parameter {name} belongs to no known component")


GATE_RANK = 16  # attention_delta.GATE_RANK (the test compares these counts with the model's)


def _attention(cfg: ModelConfig, kind: str) -> int:
    C, K, R = cfg.d_model, cfg.conv_size, GATE_RANK
    if kind == "L" and cfg.linear_kind == "delta":
        # qkv and o, conv, beta, the decay and gate LoRAs, decay bias and gate bias, out norm
        return 4 * C * C + 3 * C * K + cfg.n_heads * C + 4 * R * C + 2 * C + cfg.head_dim
    indexer = 0
    if kind == "S" and cfg.sparse_kind == "indexer":
        indexer = (cfg.indexer_heads * cfg.indexer_dim + cfg.indexer_dim + cfg.indexer_heads) * C
    conv = 3 * C * K if kind == "L" and cfg.elu_conv else 0
    return 4 * C * C + indexer + conv  # q, k, v, o (+ the indexer's q, k, weights; the conv)


def _block(cfg: ModelConfig, kind: str) -> Counter[str]:
    """Parameters of one Block by component, from the config alone (no torch)."""
    C, S, E, H = cfg.d_model, cfg.n_streams, cfg.n_experts, cfg.expert_hidden
    mixer = (
        (2 * S + S * S) * S * C + 3 + 2 * S + S * S if cfg.stream_mixer == "mhc" else 2 * S + S * S
    )  # mhc: projection, alphas, biases; static: pre, mix, post
    return Counter(
        {
            "attention": _attention(cfg, kind),
            "norms": 2 * C,
            "router": E * C,
            "routed_experts": 3 * E * C * H,
            "shared_experts": 3 * cfg.n_shared * H * C,
            "streams": 2 * mixer,
        }
    )


def parameter_counts(cfg: ModelConfig) -> dict[str, dict[str, int]]:
    """{'total': {component: n}, 'active': {component: n}} plus the sums under 'all'. Computed
    from the config's shapes, so `glmflash info` needs no torch; a test checks them against
    the model's own parameters for every option."""
    total: Counter[str] = Counter(
        {"embedding": cfg.vocab_size * cfg.d_model, "norms": cfg.d_model}
    )  # tied head; final norm
    for kind in cfg.layer_kinds:
        total.update(_block(cfg, kind))
    if cfg.mtp:  # two norms, the projection and one linear block, all counted as mtp
        total["mtp"] = 2 * cfg.d_model + 2 * cfg.d_model**2 + sum(_block(cfg, "L").values())
    return tables(total, cfg)


def tables(total: Counter[str], cfg: ModelConfig) -> dict[str, dict[str, int]]:
    """Per-component totals -> {'total', 'active'} tables with their sums under 'all'."""
    active = dict(total)
    active["routed_experts"] = total["routed_experts"] * cfg.top_k // cfg.n_experts
    total_d = {c: total.get(c, 0) for c in COMPONENTS}
    active_d = {c: active.get(c, 0) for c in COMPONENTS}
    total_d["all"], active_d["all"] = sum(total.values()), sum(active.values())
    return {"total": total_d, "active": active_d}
