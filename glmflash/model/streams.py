"""Residual streams: S parallel copies of the residual, mixed around every sublayer.

The model carries H [B, T, S, C]: the embedding copied into every stream, averaged back into
one vector before the final norm. Around each sublayer f a connection reads one input from the
streams and writes the output back into all of them:

    x  = read(H)                           (the block then applies its RMSNorm and f)
    H' = M H + h_post ⊗ f(norm(x))         M [S, S] mixes the streams, h_post [S] spreads f

Manifold-constrained hyper-connections (mHC, DeepSeek 2025) make the coefficients depend on
the token, from z = RMSNorm(vec(H)) [S*C], through one projection W [S*C, 2S + S^2]:

    h_pre  = sigmoid(alpha_pre  * z W_pre + b_pre)             [S]
    h_post = 2 sigmoid(alpha_post * z W_post + b_post)         [S]
    M      = SinkhornKnopp(exp(alpha_res * z W_res + b_res))   [S, S], doubly stochastic

A doubly stochastic M keeps the mean over streams of H' exactly the mean of H plus the mean
update, so stacking many layers neither amplifies nor drains the residual (unconstrained
hyper-connections can). Sinkhorn converges slowest near the identity: after the default 20
iterations the columns sum to 1 exactly and the rows to within a few percent.

The read is the h_pre-weighted mean of the streams: the block's RMSNorm removes any overall
scale anyway, and dividing by sum(h_pre) makes one stream exactly the plain pre-norm residual
H + f(norm(H)).

Initialisation: W = 0 (so the coefficients start static), alpha = 0.01, h_post = 1, M the
Sinkhorn projection of a strongly diagonal matrix (close to I), and b_pre random. While the
streams are equal (as they start) every read returns the embedding and every write adds the
same update to each stream: the network is exactly the plain pre-norm residual. The random
b_pre breaks the symmetry between streams; with equal pre weights all streams would receive
identical gradients and stay copies of each other forever.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from glmflash.config.model import ModelConfig

RES_OFF_DIAGONAL = -4.0  # initial logit of M off the diagonal (0 on it): M_ii ~ 0.95 for S = 4
ALPHA_INIT = 0.01


def expand_streams(x: Tensor, n: int) -> Tensor:
    """[B, T, C] -> [B, T, n, C]: the same vector in every stream."""
    return x.unsqueeze(2).expand(-1, -1, n, -1).contiguous()


def merge_streams(h: Tensor) -> Tensor:
    """[B, T, S, C] -> [B, T, C]: the mean over streams."""
    return h.mean(2)


def sinkhorn(logits: Tensor, iters: int) -> Tensor:
    """SinkhornKnopp(exp(logits)) over the last two dims: alternately normalise rows and
    columns, in log space, where normalising is a log_softmax (no overflow, no division by
    zero). Columns sum to 1 exactly, rows to within the residual of the iteration.

    The two matrix dims are moved in front, so that each normalisation runs over whole
    contiguous vectors of tokens instead of many rows of S elements (much faster on CPU)."""
    x = logits.movedim((-2, -1), (0, 1)).contiguous()
    for _ in range(iters):
        x = x.log_softmax(1)
        x = x.log_softmax(0)
    return x.exp().movedim((0, 1), (-2, -1))


def weighted_read(h: Tensor, weights: Tensor) -> Tensor:
    """x = sum_s w_s H_s / sum_s w_s for h [..., S, C] and positive weights [..., S] (or [S] for
    all tokens), in the streams' precision: the weights are normalised first, so the one pass
    over h is a batched [1, S] @ [S, C] matmul."""
    S, C = h.shape[-2:]
    with torch.autocast(h.device.type, enabled=False):
        weights = weights.to(h.dtype)
        weights = weights / weights.sum(-1, keepdim=True)
        weights = weights.expand(h.shape[:-1]).reshape(-1, 1, S).contiguous()
        return torch.bmm(weights, h.reshape(-1, S, C)).view(*h.shape[:-2], C)


class MixWrite(torch.autograd.Function):
    """H'_s = sum_t M_st H_t + h_post_s y for N tokens: h [N, S, C], y [N, C], M [N, S, S],
    h_post [N, S]. One batched matmul and one multiply-add forward; backward, with G = dL/dH':

        dH = M^T G     dM = G H^T     dy = h_post^T G     dh_post = G y

    four batched matmuls that each read G once. Autograd's backward of the same sum written as
    S multiply-adds makes two passes over [N, S, C] per stream, several times slower on CPU
    (measured by results/profile/stream_write.py), where these memory-bound passes were the
    largest part of a train step."""

    @staticmethod
    def forward(ctx: Any, h: Tensor, y: Tensor, mix: Tensor, post: Tensor) -> Tensor:
        ctx.save_for_backward(h, y, mix, post)
        return _mix_write(h, y, mix, post)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        h, y, mix, post = ctx.saved_tensors
        with torch.autocast(g.device.type, enabled=False):
            dh = torch.bmm(mix.mT, g)
            dmix = torch.bmm(g, h.mT)
            dy = torch.bmm(post.unsqueeze(-2), g).squeeze(-2)
            dpost = torch.bmm(g, y.unsqueeze(-1)).squeeze(-1)
        return dh, dy, dmix, dpost


def _mix_write(h: Tensor, y: Tensor, mix: Tensor, post: Tensor) -> Tensor:
    return torch.bmm(mix, h).addcmul_(post.unsqueeze(-1), y.unsqueeze(-2))


def mix_write(h: Tensor, y: Tensor, mix: Tensor, post: Tensor) -> Tensor:
    """H' = M H + h_post ⊗ y per token, for h [..., S, C], y [..., C] and coefficients per token
    (M [..., S, S], h_post [..., S]) or shared by all (M [S, S], h_post [S]); in the streams'
    precision, never bf16 under autocast. Where no gradient is recorded (decoding) the
    forward runs without the autograd Function: its call costs more than the few ops it wraps
    on a decoding step's handful of rows (measured with `normed_projection` by
    results/profile/decode_step.py)."""
    S, C = h.shape[-2:]
    with torch.autocast(h.device.type, enabled=False):
        mix = mix.to(h.dtype).expand(*h.shape[:-2], S, S).reshape(-1, S, S).contiguous()
        post = post.to(h.dtype).expand(*h.shape[:-1]).reshape(-1, S)
        y = y.to(h.dtype).reshape(-1, C)
        write = MixWrite.apply if torch.is_grad_enabled() else _mix_write
        return write(h.reshape(-1, S, C), y, mix, post).view(h.shape)


def _projection_and_scale(v: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """p = v W^T and r = (mean(v^2) + eps)^(-1/2)."""
    return v @ weight.to(v.dtype).T, torch.rsqrt(v.square().mean(-1, keepdim=True) + eps)


def normed_projection(v: Tensor, weight: Tensor, eps: float) -> Tensor:
    """RMSNorm(v) W^T through `NormedProjection`, or its forward alone where no gradient is
    recorded (see `mix_write`)."""
    if torch.is_grad_enabled():
        return NormedProjection.apply(v, weight, eps)
    p, r = _projection_and_scale(v, weight, eps)
    return p * r


class NormedProjection(torch.autograd.Function):
    """a = RMSNorm(v) W^T = (v W^T) r,  r = (mean(v^2) + eps)^(-1/2), for rows v [N, D] and
    W [K, D] (no gain: the mHC projection is a plain linear map). The normalised [N, D] vector
    is never formed, only the K projections are rescaled. Backward, with p = v W^T:

        dp = da r     dW = dp^T v     dv = dp W - v r^3 sum_k(da_k p_k) / D

    two passes over [N, D] (a matmul and one multiply-add) where autograd's backward of the
    norm and the product makes five."""

    @staticmethod
    def forward(ctx: Any, v: Tensor, weight: Tensor, eps: float) -> Tensor:
        weight = weight.to(v.dtype)
        p, r = _projection_and_scale(v, weight, eps)
        ctx.save_for_backward(v, weight, p, r)
        return p * r

    @staticmethod
    def backward(ctx: Any, da: Tensor) -> tuple[Tensor | None, Tensor | None, None]:
        v, weight, p, r = ctx.saved_tensors
        with torch.autocast(da.device.type, enabled=False):
            dp = da * r
            dv = dw = None
            if ctx.needs_input_grad[0]:
                coef = (da * p).sum(-1, keepdim=True) * r.pow(3) / -v.shape[-1]
                dv = (dp @ weight).addcmul_(v, coef)
            if ctx.needs_input_grad[1]:  # a frozen layer (RL's scopes) needs no dW
                dw = dp.T @ v
        return dv, dw, None


class HyperConnection(nn.Module):
    """mHC around one sublayer: input-dependent pre/post weights and a doubly stochastic mix."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        S, C = cfg.n_streams, cfg.d_model
        self.n_streams, self.sinkhorn_iters, self.eps = S, cfg.sinkhorn_iters, cfg.norm_eps
        self.proj = nn.Linear(S * C, 2 * S + S * S, bias=False)
        nn.init.zeros_(self.proj.weight)
        self.alpha_pre = nn.Parameter(torch.tensor(ALPHA_INIT))
        self.alpha_post = nn.Parameter(torch.tensor(ALPHA_INIT))
        self.alpha_res = nn.Parameter(torch.tensor(ALPHA_INIT))
        self.bias_pre = nn.Parameter(torch.randn(S))
        self.bias_post = nn.Parameter(torch.zeros(S))  # 2 sigmoid(0) = 1
        self.bias_res = nn.Parameter(RES_OFF_DIAGONAL * (1 - torch.eye(S)))

    def coefficients(self, h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """h [B, T, S, C] -> h_pre [B, T, S], h_post [B, T, S], M [B, T, S, S], in float32
        (float64 for float64 streams), whatever the autocast setting."""
        S = self.n_streams
        dtype = torch.promote_types(h.dtype, torch.float32)
        with torch.autocast(h.device.type, enabled=False):
            flat = h.flatten(-2).to(dtype)
            a = normed_projection(flat.reshape(-1, flat.shape[-1]), self.proj.weight, self.eps)
            a = a.view(*flat.shape[:-1], -1)
            a_pre, a_post, a_res = a.split((S, S, S * S), -1)
            pre = torch.sigmoid(self.alpha_pre * a_pre + self.bias_pre)
            post = 2 * torch.sigmoid(self.alpha_post * a_post + self.bias_post)
            res = self.alpha_res * a_res.unflatten(-1, (S, S)) + self.bias_res
            return pre, post, sinkhorn(res, self.sinkhorn_iters)

    def read(self, h: Tensor) -> tuple[Tensor, Any]:
        """h [B, T, S, C] -> the sublayer input x [B, T, C], and (h_post, M) for `write`."""
        pre, post, mix = self.coefficients(h)
        return weighted_read(h, pre), (post, mix)

    def write(self, h: Tensor, y: Tensor, ctx: Any) -> Tensor:
        """H' = M H + h_post ⊗ y, with the coefficients `read` computed from the same H."""
        post, mix = ctx
        return mix_write(h, y, mix, post)


class StaticMixer(nn.Module):
    """Static hyper-connection: the same learned weights for every token.

    x = sum_s w_s H_s with w = softmax(pre); H' = M H + h_post ⊗ y with M and h_post free
    parameters (M = I, h_post = 1 at init; a random `pre` breaks the symmetry between streams).
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        S = cfg.n_streams
        self.pre = nn.Parameter(torch.randn(S))
        self.mix = nn.Parameter(torch.eye(S))
        self.post = nn.Parameter(torch.ones(S))

    def read(self, h: Tensor) -> tuple[Tensor, Any]:
        return weighted_read(h, self.pre.exp()), None  # softmax weights

    def write(self, h: Tensor, y: Tensor, ctx: Any) -> Tensor:
        return mix_write(h, y, self.mix, self.post)


def make_stream_mixer(cfg: ModelConfig) -> nn.Module:
    """The connection of one sublayer, by cfg.stream_mixer: 'mhc' or 'static'."""
    if cfg.stream_mixer == "mhc":
        return HyperConnection(cfg)
    if cfg.stream_mixer == "static":
        return StaticMixer(cfg)
    raise ValueError(f"unknown stream mixer {cfg.stream_mixer!r}")


__all__ = [
    "HyperConnection",
    "StaticMixer",
    "expand_streams",
    "make_stream_mixer",
    "merge_streams",
    "sinkhorn",
]
