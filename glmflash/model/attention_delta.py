"""Gated delta rule with per-channel decay and a short causal convolution (Kimi Delta Attention).

Per head, with q_t, k_t in R^Dk (L2-normalised), v_t in R^Dv, a write strength beta_t in (0, 1)
and a per-channel decay alpha_t in (0, 1)^Dk, the state S_t in R^{Dk x Dv} follows

    S_t = Diag(alpha_t) S_{t-1} + beta_t k_t (v_t - (Diag(alpha_t) S_{t-1})^T k_t)^T
    o_t = S_t^T q_t

first forget channel by channel, then move the value stored under key k_t a fraction beta_t of
the way toward v_t (one step of online regression, the delta rule). Equivalently
S_t = (I - beta_t k_t k_t^T) Diag(alpha_t) S_{t-1} + beta_t k_t v_t^T.

Chunkwise-parallel form (chunks of C tokens, state S_0 at the chunk's start). With the decay
from the chunk's start G_t = sum_{s<=t} log alpha_s (per channel), every state in the chunk is

    S_t = Diag(e^{G_t}) S_0 + sum_{i<=t} Diag(e^{G_t - G_i}) k_i u_i^T

for pseudo-values u_i that solve a unit-lower-triangular system (the WY / UT representation):

    (I + A) U = Diag(beta) (V - K_G S_0),   A_ti = beta_t sum_c k_tc k_ic e^{G_tc - G_ic}, i < t,

where row t of K_G is e^{G_t} * k_t. So U = W_v - W_k S_0 with (I + A) [W_v, W_k] = Diag(beta)
[V, K_G], solved for all chunks at once; only the short loop over chunks is sequential:

    O   = (Q_G - M W_k) S_0 + M W_v,     M_ti = sum_c q_tc k_ic e^{G_tc - G_ic}, i <= t
    S_C = Diag(e^{G_C}) S_0 + sum_i (e^{G_C - G_i} * k_i) u_i^T.

Nothing larger than one [Dk, Dv] state per chunk is formed. The core runs in float32 (float64
for float64 inputs) even under bf16 autocast.

Position: there is no RoPE; the causal convolution and the decay carry order, so `offset` is
accepted for the common attention interface and ignored.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from glmflash.config.model import ModelConfig
from glmflash.model.norm import RMSNorm
from glmflash.model.short_conv import causal_conv, conv_weight

MAX_LOG_DECAY = 5.0  # log alpha lies in [-MAX_LOG_DECAY, 0): alpha >= e^-5 per token
DECAY_BLOCK = 16  # DECAY_BLOCK * MAX_LOG_DECAY = 80 < log(float32 max) = 88.7
GATE_RANK = 16  # rank of the decay and output-gate projections


class DeltaState(NamedTuple):
    """Recurrent state of one delta-rule layer."""

    S: Tensor  # [B, H, Dk, Dv] the recurrent matrix (float32, or float64 for float64 inputs)
    conv: Tensor  # [B, conv_size - 1, 3 * d_model] the convolution's last q, k, v inputs
    #               (same precision as S)


def delta_rule_recurrent(
    q: Tensor, k: Tensor, v: Tensor, alpha: Tensor, beta: Tensor, S0: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """The gated delta rule token by token (the oracle, and the decoding step).

    q, k, alpha [B, H, T, Dk], v [B, H, T, Dv], beta [B, H, T], S0 [B, H, Dk, Dv] or None
    -> (o [B, H, T, Dv], S_T).
    """
    B, H, T, Dk = k.shape
    S = k.new_zeros(B, H, Dk, v.shape[-1]) if S0 is None else S0
    outs = []
    for t in range(T):
        S = alpha[:, :, t, :, None] * S
        kt = k[:, :, t]
        error = v[:, :, t] - torch.einsum("bhkv,bhk->bhv", S, kt)
        S = S + beta[:, :, t, None, None] * kt[..., :, None] * error[..., None, :]
        outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, :, t]))
    return (torch.stack(outs, dim=2) if outs else v.clone()), S


def decayed_scores(a: Tensor, b: Tensor, G: Tensor) -> Tensor:
    """M[t, i] = sum_c a[t, c] b[i, c] exp(G[t, c] - G[i, c]) for i <= t, within each chunk.

    a, b, G [..., C, D] with G non-increasing along C; entries above the diagonal are finite
    but meaningless. The ratio e^{G_t - G_i} <= 1, but its factors e^{G_t}, e^{-G_i} over a
    whole chunk would overflow, so it is factored through a reference r close to both:
    e^{G_t - r} e^{r - G_i}. The chunk is cut into blocks of at most DECAY_BLOCK tokens:
      i in an earlier block than t: r = G at the end of i's block, so both factors are <= 1;
      i in t's block: r = G just before the block, so e^{r - G_i} <= e^{80} when every step
      has log alpha >= -MAX_LOG_DECAY (finite in float32).
    """
    C = G.shape[-2]
    s = max(n for n in range(1, min(DECAY_BLOCK, C) + 1) if C % n == 0)
    nb = C // s
    ab, bb, Gb = (u.unflatten(-2, (nb, s)) for u in (a, b, G))  # [..., nb, s, D]
    end = Gb[..., -1, :]  # [..., nb, D]
    before = F.pad(end, (0, 0, 1, 0))[..., :-1, :].unsqueeze(-2)  # G just before each block
    diag = (ab * (Gb - before).exp()) @ (bb * (before - Gb).exp()).transpose(-1, -2)
    if nb == 1:
        return diag.squeeze(-3)
    # Against every block j: a_t e^{G_t - end_j} (clamped where t precedes block j's end).
    ax = a.unsqueeze(-2) * (G.unsqueeze(-2) - end.unsqueeze(-3)).clamp(max=0).exp()
    bx = bb * (end.unsqueeze(-2) - Gb).exp()
    cross = torch.einsum("...tjd,...jid->...tji", ax, bx).unflatten(-3, (nb, s))
    same = torch.eye(nb, dtype=torch.bool, device=G.device).view(nb, 1, nb, 1)
    M = torch.where(same, diag.unsqueeze(-2), cross)  # [..., nb, s, nb, s]
    return M.reshape(*M.shape[:-4], C, C)


def delta_rule_chunked(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_alpha: Tensor,
    beta: Tensor,
    S0: Tensor | None = None,
    chunk: int = 32,
) -> tuple[Tensor, Tensor]:
    """Chunkwise-parallel form of `delta_rule_recurrent`, taking log alpha instead of alpha.

    Exact (up to rounding) for any chunk length and T; in float32 it needs
    log_alpha >= -MAX_LOG_DECAY, which `DeltaAttention` guarantees.
    """
    B, H, T, Dk = k.shape
    Dv = v.shape[-1]
    S = k.new_zeros(B, H, Dk, Dv) if S0 is None else S0
    C = min(chunk, T)
    N = -(-T // C)
    pad = N * C - T
    # Padding tokens (q = k = v = 0, alpha = 1, beta = 0) leave the state unchanged.
    q, k, v, G = (F.pad(u, (0, 0, 0, pad)).view(B, H, N, C, -1) for u in (q, k, v, log_alpha))
    b = F.pad(beta, (0, pad)).view(B, H, N, C, 1)
    G = G.cumsum(dim=-2)  # log decay from the chunk's start, <= 0

    M, A = decayed_scores(torch.stack((q, k)), k, G)
    causal = torch.ones(C, C, dtype=torch.bool, device=k.device).tril()
    M = M.masked_fill(~causal, 0)
    A = (b * A).masked_fill(~causal, 0)  # the diagonal is ignored: (I + strict part of A)
    W = torch.linalg.solve_triangular(
        A, b * torch.cat((v, G.exp() * k), dim=-1), upper=False, unitriangular=True
    )
    Wv, Wk = W.split((Dv, Dk), dim=-1)
    P = G.exp() * q - M @ Wk  # O = P S_0 + M W_v
    Ov = M @ Wv
    K_end = (G[..., -1:, :] - G).exp() * k  # each token's key decayed to the chunk's end
    decay = G[..., -1, :, None].exp()  # [B, H, N, Dk, 1]

    outs = []
    for n in range(N):
        outs.append(P[:, :, n] @ S + Ov[:, :, n])
        U = Wv[:, :, n] - Wk[:, :, n] @ S
        S = decay[:, :, n] * S + K_end[:, :, n].transpose(-1, -2) @ U
    o = torch.stack(outs, dim=2).view(B, H, N * C, Dv)[:, :, :T]
    return o, S


class DeltaAttention(nn.Module):
    """Multi-head gated delta rule (KDA style): short conv + SiLU on q, k, v; L2-normalised
    q, k; beta = sigmoid(W_beta x); per-channel decay log alpha = -5 sigmoid(low-rank(x) + b);
    output RMSNorm per head times a low-rank sigmoid gate, then the output projection."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d, H, D, K = cfg.d_model, cfg.n_heads, cfg.head_dim, cfg.conv_size
        self.n_heads, self.head_dim, self.chunk, self.conv_size = H, D, cfg.linear_chunk, K
        self.qkv_proj = nn.Linear(d, 3 * d, bias=False)
        # Depthwise causal convolution over time, one filter of K taps per q/k/v channel.
        self.conv_weight = conv_weight(3 * d, K)
        self.beta_proj = nn.Linear(d, H, bias=False)
        self.decay_down = nn.Linear(d, GATE_RANK, bias=False)
        self.decay_up = nn.Linear(GATE_RANK, d, bias=False)
        # Per-channel decay rates -log alpha log-spaced over [1e-3, 1] in every head at init:
        # memories from about a thousand tokens down to about one.
        rate = torch.logspace(-3, 0, D).repeat(H) / MAX_LOG_DECAY
        self.decay_bias = nn.Parameter(torch.log(rate) - torch.log1p(-rate))
        self.gate_down = nn.Linear(d, GATE_RANK, bias=False)
        self.gate_up = nn.Linear(GATE_RANK, d, bias=True)
        self.out_norm = RMSNorm(D, cfg.norm_eps)
        self.o_proj = nn.Linear(d, d, bias=False)

    def init_weights(self, std: float, out_std: float) -> None:
        """The fused q, k, v projection ~ N(0, std); o ~ N(0, out_std). The convolution,
        beta, decay and gate keep the init their own definitions give them."""
        nn.init.normal_(self.qkv_proj.weight, std=std)
        nn.init.normal_(self.o_proj.weight, std=out_std)

    def log_decay(self, x: Tensor) -> Tensor:
        """log alpha [B, T, d] in [-MAX_LOG_DECAY, 0), in at least float32 (alpha near 1
        would round to 1 in bf16; its logarithm does not)."""
        dtype = torch.promote_types(x.dtype, torch.float32)
        z = self.decay_up(self.decay_down(x)).to(dtype) + self.decay_bias.to(dtype)
        return -MAX_LOG_DECAY * torch.sigmoid(z)

    def forward(
        self, x: Tensor, state: DeltaState | None = None, offset: int | Tensor = 0
    ) -> tuple[Tensor, DeltaState]:
        """x [B, T, d_model] -> (y [B, T, d_model], state after x). `offset` is unused (no
        RoPE: order enters through the convolution and the decay)."""
        B, T, d = x.shape
        H, D = self.n_heads, self.head_dim
        # Between the input and output projections everything runs in float32 (or float64).
        dtype = torch.promote_types(x.dtype, torch.float32)
        qkv = self.qkv_proj(x).to(dtype)
        past = qkv.new_zeros(B, self.conv_size - 1, 3 * d) if state is None else state.conv
        qkv, conv = causal_conv(qkv, past, self.conv_weight)
        q, k, v = (u.reshape(B, T, H, D).transpose(1, 2) for u in qkv.chunk(3, dim=-1))
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        log_alpha = self.log_decay(x).view(B, T, H, D).transpose(1, 2)
        beta = torch.sigmoid(self.beta_proj(x).to(dtype)).transpose(1, 2)  # [B, H, T]

        with torch.autocast(x.device.type, enabled=False):
            S0 = None if state is None else state.S
            if T == 1:
                o, S = delta_rule_recurrent(q, k, v, log_alpha.exp(), beta, S0)
            else:
                o, S = delta_rule_chunked(q, k, v, log_alpha, beta, S0, self.chunk)
            o = self.out_norm(o.transpose(1, 2))  # [B, T, H, D]

        gate = torch.sigmoid(self.gate_up(self.gate_down(x))).view(B, T, H, D)
        y = self.o_proj((o * gate).reshape(B, T, d).to(gate.dtype))
        return y, DeltaState(S, conv)


def extra_parameters(cfg: ModelConfig) -> int:
    """Parameters of one DeltaAttention beyond the four d x d projections of plain attention."""
    d, K, H, r = cfg.d_model, cfg.conv_size, cfg.n_heads, GATE_RANK
    return 3 * d * K + d * H + (2 * d * r + d) + (2 * d * r + d) + cfg.head_dim


__all__ = [
    "DeltaAttention",
    "DeltaState",
    "decayed_scores",
    "delta_rule_chunked",
    "delta_rule_recurrent",
    "extra_parameters",
    "MAX_LOG_DECAY",
]
