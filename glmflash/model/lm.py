"""The language model: embedding -> 4 residual streams -> hybrid blocks -> merge -> tied head.

    h_0     = expand(E[tokens])                       (the embedding copied into every stream)
    for each block:  h = hc_attn.write(h, attn(norm(hc_attn.read(h))))
                     h = hc_moe.write(h, moe(norm(hc_moe.read(h))))
    logits  = final_norm(mean over streams of h) @ E^T    (head tied to the embedding)

Layers follow the pattern linear, linear, linear, sparse. `step` decodes incrementally with a
recurrent state per linear layer and a KV cache per sparse layer; it equals recomputing the
whole prefix.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from glmflash.config.model import ModelConfig
from glmflash.model.attention_sparse import SparseAttention, evict, still_visible
from glmflash.model.moe import MoE, MoEStats
from glmflash.model.norm import RMSNorm
from glmflash.model.streams import expand_streams, make_stream_mixer, merge_streams


def make_attention(cfg: ModelConfig, kind: str) -> nn.Module:
    """The attention of one layer: 'L' linear (ELU or gated delta rule), 'S' sparse."""
    if kind == "S":
        return SparseAttention(cfg)
    if cfg.linear_kind == "delta":
        from glmflash.model.attention_delta import DeltaAttention

        return DeltaAttention(cfg)
    from glmflash.model.attention_linear import LinearAttention

    return LinearAttention(cfg)


@dataclass
class DecodeState:
    """Everything `step` needs to continue a batch of sequences: one state per layer, and the
    position of the next token: one int, or one per row after `merge_states`."""

    layers: list[Any]
    position: int | Tensor = 0  # number of tokens consumed so far (the next token's position)

    def expand(self, n: int) -> DecodeState:
        """Repeat a batch-1 state n times along the batch (one prompt, n samples)."""
        first = _first_tensor(self.layers)
        if first.shape[0] != 1:
            raise ValueError("expand repeats a state of one row; use select for more")
        return self.select(torch.zeros(n, dtype=torch.long, device=first.device))

    def select(self, index: Tensor) -> DecodeState:
        """The batch rows in `index`, in its order: drop finished sequences, or repeat a
        shared prompt's state for each of its samples."""
        position = self.position
        if isinstance(position, Tensor):
            position = position.index_select(0, index)
        return DecodeState(_map_tensors(self.layers, lambda t: t.index_select(0, index)), position)


def merge_states(states: list[DecodeState]) -> DecodeState:
    """One state for the rows of all `states`, in order, each row at its own position: every
    tensor of a layer's state is concatenated along the batch, and where a dimension besides
    the batch differs (a KV cache's length) the shorter ones are padded on the left with zeros,
    which their slots mark as padding (`attention_sparse.slot_mask`). Recurrent states have
    no length and are simply stacked."""

    def rows(state: DecodeState) -> int:
        return _first_tensor(state.layers).shape[0]

    def cat(*parts: Tensor) -> Tensor:
        longest = [max(t.shape[d] for t in parts) for d in range(parts[0].dim())]
        padded = []
        for t in parts:
            pad: list[int] = []
            for d in reversed(range(1, t.dim())):  # F.pad lists the last dim first
                pad += [longest[d] - t.shape[d], 0]
            padded.append(F.pad(t, pad))
        return torch.cat(padded)

    device = _first_tensor(states[0].layers).device
    position = torch.cat(
        [torch.as_tensor(s.position, device=device).expand(rows(s)).reshape(-1) for s in states]
    )
    return DecodeState(_zip_tensors([s.layers for s in states], cat), position)


def _first_tensor(obj: Any) -> Tensor:
    found: list[Tensor] = []
    _map_tensors(obj, lambda t: found.append(t) or t)
    return found[0]


def _zip_tensors(objs: list[Any], fn) -> Any:
    """Like `_map_tensors` over several objects of one structure: fn(*tensors at a place)."""
    first = objs[0]
    if isinstance(first, Tensor):
        return fn(*objs)
    if isinstance(first, (list, tuple)) and not hasattr(first, "_fields"):
        return type(first)(_zip_tensors(list(parts), fn) for parts in zip(*objs, strict=True))
    if hasattr(first, "_fields"):  # NamedTuple
        return type(first)(*(_zip_tensors(list(parts), fn) for parts in zip(*objs, strict=True)))
    if hasattr(first, "__dataclass_fields__"):
        fields = first.__dataclass_fields__
        return type(first)(**{k: _zip_tensors([getattr(o, k) for o in objs], fn) for k in fields})
    return first


def _map_tensors(obj: Any, fn) -> Any:
    """obj (tensors in lists, tuples, NamedTuples and dataclasses) with fn applied to each."""
    return _zip_tensors([obj], fn)


@dataclass
class ModelOutput:
    logits: Tensor  # [B, T, V]
    loss: Tensor | None = None  # next-token cross-entropy, when targets are given
    aux_loss: Tensor | None = None  # sum of the MoE balance losses (and MTP loss, if on)
    indexer_kl: Tensor | None = None  # sum over sparse layers, lightning indexer in training
    # [n_moe, n_experts] fraction of assignments per expert, one row per MoE that ran: the
    # layers', then the MTP block's when its loss was computed (the order of moe_layers())
    load: Tensor | None = None
    state: DecodeState | None = None
    extra: dict[str, Tensor] = field(default_factory=dict)


def cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean next-token cross-entropy in at least float32 (targets of -100 are ignored)."""
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)


class Block(nn.Module):
    """One hybrid layer: attention and MoE sublayers, each behind its own stream connection."""

    def __init__(self, cfg: ModelConfig, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = make_attention(cfg, kind)
        self.hc_attn = make_stream_mixer(cfg)
        self.moe_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.moe = MoE(cfg)
        self.hc_moe = make_stream_mixer(cfg)

    def forward(self, h: Tensor, state: Any = None, offset: int | Tensor = 0):
        x, ctx = self.hc_attn.read(h)
        y, state = self.attn(self.attn_norm(x), state, offset)
        h = self.hc_attn.write(h, y, ctx)
        x, ctx = self.hc_moe.read(h)
        y, stats = self.moe(self.moe_norm(x))
        h = self.hc_moe.write(h, y, ctx)
        return h, state, stats

    @property
    def indexer_kl(self) -> Tensor | None:
        """The last forward's KL from main attention to the lightning indexer (None unless
        this is a sparse layer with an indexer, in training mode)."""
        return getattr(self.attn, "indexer_kl", None)


class GLMFlash(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embedding = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg, kind) for kind in cfg.layer_kinds)
        self.final_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.output = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.output.weight = self.embedding.weight  # weight tying
        if cfg.mtp:
            # Multi-token prediction: one extra block predicts token t+2 from the last hidden
            # state at t and the embedding of token t+1 (DeepSeek-V3 style, depth 1).
            self.mtp_norm_h = RMSNorm(cfg.d_model, cfg.norm_eps)
            self.mtp_norm_e = RMSNorm(cfg.d_model, cfg.norm_eps)
            self.mtp_proj = nn.Linear(2 * cfg.d_model, cfg.d_model, bias=False)
            self.mtp_block = Block(cfg, "L")
        self._init_weights()

    def _init_weights(self) -> None:
        """GPT-2 style: embedding and projections N(0, std), and the projections that write
        into the residual streams N(0, std / sqrt(2 * n_layers)), so that at the start each
        sublayer adds an update of the embedding's scale instead of drowning it. Each sublayer
        owns its `init_weights(std, out_std)` (an attention variant without one fails here,
        instead of silently keeping PyTorch's default init); gates, decays, convolutions, the
        indexer and the stream coefficients keep the init their modules give them."""
        std, out_std = self.cfg.init_std, self.cfg.init_std / (2 * self.cfg.n_layers) ** 0.5
        nn.init.normal_(self.embedding.weight, std=std)
        for block in self.blocks():
            block.attn.init_weights(std, out_std)
            block.moe.init_weights(std, out_std)

    # -- full-sequence forward ------------------------------------------------------------
    def forward(self, tokens: Tensor, targets: Tensor | None = None) -> ModelOutput:
        """tokens [B, T] -> logits [B, T, V]; with targets [B, T], the mean cross-entropy
        (targets < 0 are ignored)."""
        out = self.forward_embeddings(self.embedding(tokens))
        hidden = out.extra.pop("hidden", None)
        if targets is not None:
            out.loss = cross_entropy(out.logits, targets)
            if self.cfg.mtp:
                mtp, stats = self._mtp_loss(hidden, targets)
                out.extra["mtp_loss"] = mtp
                out.aux_loss = out.aux_loss + mtp + stats.balance_loss
                out.load = torch.cat((out.load, stats.load[None]))
        return out

    def forward_embeddings(self, x: Tensor, state: DecodeState | None = None) -> ModelOutput:
        """Run the network on input embeddings x [B, T, C] (the vision path places image
        tokens here). With a state, continue from it and return the new state."""
        offset = 0 if state is None else state.position
        layer_states = [None] * len(self.layers) if state is None else state.layers
        h = expand_streams(x, self.cfg.n_streams)
        new_states, aux, loads, kls = [], x.new_zeros((), dtype=torch.float32), [], []
        for layer, s in zip(self.layers, layer_states, strict=True):
            h, s, stats = layer(h, s, offset)
            new_states.append(s)
            aux = aux + stats.balance_loss
            loads.append(stats.load)
            if layer.indexer_kl is not None:
                kls.append(layer.indexer_kl)
        hidden = self.final_norm(merge_streams(h))
        out = ModelOutput(
            self.output(hidden),
            aux_loss=aux,
            indexer_kl=torch.stack(kls).sum() if kls else None,
            load=torch.stack(loads),
            state=DecodeState(new_states, offset + x.shape[1]),
        )
        if self.cfg.mtp:  # for the MTP loss, in training and evaluation alike
            out.extra["hidden"] = hidden
        return out

    def _mtp_loss(self, hidden: Tensor, targets: Tensor) -> tuple[Tensor, MoEStats]:
        """Cross-entropy of predicting targets[t + 1] from hidden[t] and embedding(targets[t]),
        and the MTP block's MoE statistics (its balance loss and load, balanced like a layer's)."""
        nxt = self.embedding(targets[:, :-1].clamp_min(0))
        z = self.mtp_proj(torch.cat((self.mtp_norm_h(hidden[:, :-1]), self.mtp_norm_e(nxt)), -1))
        h, _, stats = self.mtp_block(expand_streams(z, self.cfg.n_streams))
        logits = self.output(self.final_norm(merge_streams(h)))
        return cross_entropy(logits, targets[:, 1:]), stats

    # -- incremental decoding ---------------------------------------------------------------
    @torch.inference_mode()
    def step(self, tokens: Tensor, state: DecodeState | None = None) -> tuple[Tensor, DecodeState]:
        """Consume tokens [B, t] after `state` (None: an empty prefix); return the logits of
        these t positions [B, t, V] and the state after them. Prefill is one call with the
        whole prompt; each decoding step is a call with t = 1. The state keeps only what a
        later token can see (`_evicted`). In inference mode, which skips autograd's per-op
        bookkeeping (a faster decoding step: results/profile/decode_step.py measures it); what
        it caches for later calls (RoPE tables, sparse masks) is built as ordinary tensors,
        since training uses it too."""
        out = self.forward_embeddings(self.embedding(tokens), state)
        return out.logits, self._evicted(out.state)

    def _evicted(self, state: DecodeState) -> DecodeState:
        """The state without the keys no later token can see (fixed sparse layers, once a
        window's worth can go: `still_visible`); every such layer holds the same positions, so
        one index serves them all."""
        fixed = [
            i
            for i, layer in enumerate(self.layers)
            if layer.kind == "S" and layer.attn.indexer is None
        ]
        if not fixed:
            return state
        attn = self.layers[fixed[0]].attn
        index = still_visible(state.layers[fixed[0]].slots, attn.window, attn.stride)
        if index is None:
            return state
        layers = [evict(s, index) if i in fixed else s for i, s in enumerate(state.layers)]
        return DecodeState(layers, state.position)

    # -- bookkeeping ------------------------------------------------------------------------
    def set_indexer_warmup(self, on: bool) -> None:
        """Dense warm-up of the lightning indexer: main attention dense causal, the indexer
        trained by its KL alone (no effect without an indexer)."""
        for layer in self.layers:
            if layer.kind == "S":
                layer.attn.dense_warmup = on

    @property
    def ragged_decoding(self) -> bool:
        """Whether rows of different lengths can decode in one batch (`merge_states`): every
        layer places tokens by position alone, which the indexer's pooled keys do not."""
        return self.cfg.sparse_kind == "fixed" or "S" not in self.cfg.layer_kinds

    def compile_blocks(self) -> None:
        """Compile every block with inductor for training on one fixed shape: the graphs of a
        kind of block serve all its layers (parameters are the graph's inputs), and fusing the
        stream connections' many small ops is most of the gain. The routed experts stay eager:
        their row counts change every step, and a graph per count would recompile without end.
        Run anything else under `torch.compiler.set_stance("force_eager")`: a decoding step's
        shapes would each compile. Dynamo traces through the lru_cache of
        `fixed_sparse_mask` (and warns that it does); the mask is a pure function of its
        arguments, so the traced graph builds the same mask and the warning is silenced."""
        warnings.filterwarnings("ignore", message=".*functools.lru_cache", category=UserWarning)
        for block in self.blocks():
            block.moe.experts = torch.compiler.disable(block.moe.experts)
            block.compile(dynamic=False)

    def blocks(self) -> list[Block]:
        """The layers, then the MTP block when there is one."""
        return [*self.layers, *([self.mtp_block] if self.cfg.mtp else [])]

    def moe_layers(self) -> list[MoE]:
        """Every MoE in the order of `ModelOutput.load`'s rows: the layers', then the MTP
        block's (its row is present when the MTP loss was computed, i.e. with targets)."""
        return [block.moe for block in self.blocks()]

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
