"""Mixture of experts: a softmax router picks top-k of n SwiGLU experts per token, plus shared
experts every token uses.

    p     = softmax(W_r x)                          (float32)
    S     = top-k indices of p + b                  (b: selection bias, zero unless 'bias')
    g_e   = p_e / sum_{j in S} p_j   for e in S     (gates from p, never from p + b)
    y     = sum_{e in S} g_e E_e(x) + sum_shared E_s(x),    E(x) = W2 (silu(W1 x) * W3 x)

Dispatch: the N*k (token, slot) assignments are sorted by expert, the rows gathered so that
each expert sees one contiguous block, one matmul chain per expert, then the gated outputs are
scattered back with index_add_. No Python loop over tokens. Where the matmuls run in a 16-bit
dtype on the CPU (bf16 autocast), each expert's rows are zero-padded to a multiple of
ROW_GRANULE: oneDNN compiles a kernel per matrix shape, and routing changes every expert's row
count each step, so unpadded it spends more time compiling than multiplying (about 0.9 s of a
25m bf16 step).

Balancing, two options:
- 'aux' (Switch Transformer): L = coef * n * sum_e f_e P_e, with f_e the fraction of
  assignments to e (no gradient) and P_e the mean router probability (gradient flows).
  For a uniform router L = coef; concentrating probability where the load is high raises it.
- 'bias' (DeepSeek-V3 auxiliary-loss-free): no loss; after each step the caller passes the
  observed load to `update_bias`, which raises b_e for underloaded experts and lowers it for
  overloaded ones. b changes which experts are selected, not the gate values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from glmflash.config.model import ModelConfig


@dataclass
class MoEStats:
    balance_loss: Tensor  # scalar; differentiable w.r.t. the router (0 when balance == 'bias')
    load: Tensor  # [n_experts] fraction of routed assignments per expert (detached)


class SwiGLU(nn.Module):
    """E(x) = W2 (silu(W1 x) * W3 x), no biases."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


ROW_GRANULE = 64  # 16-bit matmuls: expert row counts padded to a multiple of this


def swiglu(x: Tensor, w1: Tensor, w3: Tensor, w2: Tensor) -> Tensor:
    """One routed expert on rows x [n, C], with weights w1, w3 [C, H] and w2 [H, C]."""
    return (F.silu(x @ w1) * (x @ w3)) @ w2


def compiled_per_shape(x: Tensor) -> bool:
    """Whether a matmul of x goes to kernels compiled per shape: oneDNN's 16-bit ones on the
    CPU (x is 16-bit, or autocast is on). cuBLAS kernels are not, and padding would only add
    work there."""
    low = x.element_size() < 4 or torch.is_autocast_enabled(x.device.type)
    return x.device.type == "cpu" and low


def padded_swiglu(x: Tensor, w1: Tensor, w3: Tensor, w2: Tensor, granule: int) -> Tensor:
    """swiglu on x padded with zero rows to a multiple of `granule`; the padding's outputs
    are dropped (a zero row stays its own row: rows never mix in a SwiGLU)."""
    n, pad = x.shape[0], -x.shape[0] % granule
    if not pad:
        return swiglu(x, w1, w3, w2)
    return swiglu(F.pad(x, (0, 0, 0, pad)), w1, w3, w2)[:n]


class MoE(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        C, H, E = cfg.d_model, cfg.expert_hidden, cfg.n_experts
        self.n_experts, self.top_k = E, cfg.top_k
        self.balance, self.balance_coef, self.bias_rate = (
            cfg.balance,
            cfg.balance_coef,
            cfg.bias_rate,
        )
        self.router = nn.Linear(C, E, bias=False)
        # Routed experts as stacked weights: expert e is (w1[e], w3[e], w2[e]).
        self.w1 = nn.Parameter(torch.empty(E, C, H))
        self.w3 = nn.Parameter(torch.empty(E, C, H))
        self.w2 = nn.Parameter(torch.empty(E, H, C))
        for w in (self.w1, self.w3, self.w2):  # nn.Linear's default: U(+-1/sqrt(fan_in))
            bound = 1 / math.sqrt(w.shape[1])
            nn.init.uniform_(w, -bound, bound)
        # n_shared experts of hidden H, summed, are exactly one SwiGLU of hidden n_shared * H.
        self.shared = SwiGLU(C, cfg.n_shared * H) if cfg.n_shared else None
        self.register_buffer("select_bias", torch.zeros(E))

    def init_weights(self, std: float, out_std: float) -> None:
        """Router and the experts' input projections ~ N(0, std); the experts' output
        projections, which write into the residual streams, ~ N(0, out_std)."""
        nn.init.normal_(self.router.weight, std=std)
        for w in (self.w1, self.w3):
            nn.init.normal_(w, std=std)
        nn.init.normal_(self.w2, std=out_std)
        if self.shared is not None:
            nn.init.normal_(self.shared.w1.weight, std=std)
            nn.init.normal_(self.shared.w3.weight, std=std)
            nn.init.normal_(self.shared.w2.weight, std=out_std)

    def route(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x [N, C] -> expert indices [N, k], gates [N, k] (summing to 1), probabilities
        p [N, E]. The router runs in float32 (or float64) even under autocast."""
        dtype = torch.promote_types(x.dtype, torch.float32)
        with torch.autocast(x.device.type, enabled=False):
            probs = F.linear(x.to(dtype), self.router.weight.to(dtype)).softmax(-1)
        index = (probs + self.select_bias.to(dtype)).topk(self.top_k, dim=-1).indices
        gates = probs.gather(-1, index)
        return index, gates / gates.sum(-1, keepdim=True), probs

    def experts(self, x: Tensor, index: Tensor, gates: Tensor, counts: Tensor) -> Tensor:
        """sum_k gates[:, k] * E_{index[:, k]}(x), computed expert by expert on sorted rows;
        counts [E]: the number of assignments to each expert."""
        N, k = index.shape
        if N == 0:
            return x.new_zeros(0, x.shape[1])
        expert = index.flatten()  # assignment a = n * k + slot
        order = expert.argsort(stable=True)
        token = order // k  # the token of each sorted assignment
        rows = x.index_select(0, token).split(counts.tolist())  # backward: index_add_
        weights = zip(self.w1.unbind(0), self.w3.unbind(0), self.w2.unbind(0), strict=True)
        granule = ROW_GRANULE if compiled_per_shape(x) else 1
        out = torch.cat(
            [padded_swiglu(r, *w, granule) for r, w in zip(rows, weights, strict=True) if len(r)]
        )  # an expert without rows is skipped (decoding a few rows leaves most of them idle)
        out = out * gates.flatten()[order, None].to(out.dtype)
        return out.new_zeros(N, x.shape[1]).index_add_(0, token, out)

    def forward(self, x: Tensor) -> tuple[Tensor, MoEStats]:
        """x [B, T, C] (normalised) -> y [B, T, C] and the balance statistics."""
        flat = x.reshape(-1, x.shape[-1])
        index, gates, probs = self.route(flat)
        counts = torch.bincount(index.flatten(), minlength=self.n_experts)
        y = self.experts(flat, index, gates, counts)
        if self.shared is not None:
            y = y + self.shared(flat)
        load = counts.to(probs.dtype) / max(1, index.numel())  # no tokens: no load
        if self.balance == "aux":
            mean_probs = probs.sum(0) / max(1, probs.shape[0])
            balance_loss = self.balance_coef * self.n_experts * (load * mean_probs).sum()
        else:
            balance_loss = probs.new_zeros(())
        return y.view(x.shape), MoEStats(balance_loss, load)

    @torch.no_grad()
    def update_bias(self, load: Tensor) -> None:
        """b_e += rate * sign(mean(load) - load_e): favour underloaded experts next step."""
        if self.balance == "bias":
            load = load.to(self.select_bias)
            self.select_bias.add_(self.bias_rate * torch.sign(load.mean() - load))


__all__ = ["MoE", "MoEStats", "SwiGLU", "padded_swiglu", "swiglu"]
