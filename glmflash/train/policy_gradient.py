"""The two pieces of a policy-gradient update from verified rollouts: the advantage of each
completion, and the loss that turns advantages and log-probabilities into a gradient.

Advantages, over a group of G completions of one prompt with rewards r [..., G]:

    rloo     A_i = r_i - (1 / (G - 1)) sum_{j != i} r_j     leave-one-out (Ahmadian et al. 2024)
    grpo     A_i = (r_i - mean r) / (std r + eps)           group-normalised (Shao et al. 2024)
    dr_grpo  A_i = r_i - mean r                             no std division (Liu et al. 2025)
    rft      A_i = 1 if r_i >= 1 (every case passed), else 0

A group whose rewards are all equal gets exactly A = 0 under the first three: it gives no
gradient. rft is not a policy gradient but its supervised control: rejection-sampling
fine-tuning (RFT; Yuan et al. 2023), the likelihood of the policy's own correct completions
raised and nothing else, including in groups where every completion passed.

Loss, over N completions i with tokens t, logp_it = log pi_theta(y_it | prompt, y_i<t):

    loss = -(1 / N) sum_i agg_i(A_i logp_it)               (one update per batch: REINFORCE)

with the per-completion aggregation `agg`:

    sequence    sum_t                     each completion's whole log-probability: a long
                                          completion is not down-weighted (RLOO as here)
    token_mean  (1 / |o_i|) sum_t         GRPO's length normalisation
    constant    (1 / L) sum_t             Dr. GRPO: one constant L (the token budget) for all,
                                          so neither length nor std biases the update

With several updates on one batch of rollouts (update_epochs > 1), the log-probability is
replaced by PPO's clipped ratio against the policy that sampled them (Schulman et al. 2017):

    rho_it = exp(logp_it - logp_old_it)
    term_it = min(rho_it A_i, clip(rho_it, 1 - e_lo, 1 + e_hi) A_i)

whose gradient at rho = 1 equals A_i grad logp_it, and which stops pushing a token once its
ratio has left [1 - e_lo, 1 + e_hi] in the direction the advantage favours. PPO has e_lo =
e_hi; DAPO (Yu et al. 2025) raises e_hi alone (0.2, 0.28): the high side is where a token the
old policy found unlikely gains probability, and with a small old probability a symmetric
bound lets it grow only by a little, which collapses the policy's entropy.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from glmflash.config.rl import ADVANTAGES, AGGREGATIONS

EPS = 1e-6

# the named algorithms of the `rl-algorithms` experiment, as RLConfig fields
ALGORITHMS: dict[str, dict[str, object]] = {
    "rloo": {"advantage": "rloo", "aggregation": "sequence", "update_epochs": 1},
    "grpo": {"advantage": "grpo", "aggregation": "token_mean", "update_epochs": 1},
    "dr_grpo": {"advantage": "dr_grpo", "aggregation": "constant", "update_epochs": 1},
    "ppo": {"advantage": "rloo", "aggregation": "token_mean", "update_epochs": 4},
}


def advantages(rewards: Tensor, kind: str = "rloo", normalize_std: bool = False) -> Tensor:
    """Advantages over the last dim (the group) by estimator `kind`; `normalize_std` also
    divides rloo's by the group's std (GRPO style)."""
    G = rewards.shape[-1]
    if G < 2:
        raise ValueError(f"a group needs at least 2 completions, got {G}")
    mean = rewards.mean(-1, keepdim=True)
    std = rewards.std(-1, keepdim=True)
    if kind == "rloo":
        adv = rewards - (rewards.sum(-1, keepdim=True) - rewards) / (G - 1)
        if normalize_std:
            adv = adv / (std + EPS)
    elif kind == "grpo":
        adv = (rewards - mean) / (std + EPS)
    elif kind == "dr_grpo":
        adv = rewards - mean
    elif kind == "rft":
        return (rewards >= 1).to(rewards.dtype)
    else:
        raise ValueError(f"unknown advantage {kind!r}; choose from {', '.join(ADVANTAGES)}")
    # equal rewards give exactly zero (not a rounding residue): no gradient from such a group
    spread = rewards.amax(-1, keepdim=True) > rewards.amin(-1, keepdim=True)
    return adv * spread


def aggregate(per_token: Tensor, mask: Tensor, kind: str, budget: int) -> Tensor:
    """[N, L] per-token terms (zero where mask is False) -> [N] per completion."""
    total = (per_token * mask).sum(-1)
    if kind == "sequence":
        return total
    if kind == "token_mean":
        return total / mask.sum(-1).clamp_min(1)
    if kind == "constant":
        return total / budget
    raise ValueError(f"unknown aggregation {kind!r}; choose from {', '.join(AGGREGATIONS)}")


@dataclass
class Surrogate:
    """The policy term of the loss and what it did: clip_fraction is the share of scored
    tokens whose ratio was clipped (0 without an old policy)."""

    loss: Tensor
    clip_fraction: float


def policy_surrogate(
    logp: Tensor,
    mask: Tensor,
    adv: Tensor,
    aggregation: str = "sequence",
    budget: int = 1,
    old_logp: Tensor | None = None,
    clip: float = 0.2,
    clip_high: float | None = None,
) -> Surrogate:
    """-(1/N) sum_i agg_i(A_i * term_it) with term = logp (no old policy) or PPO's clipped
    ratio against `old_logp`, bounded to [1 - clip, 1 + clip_high] (clip_high None: clip).
    N is len(adv)."""
    a = adv[:, None].to(logp.dtype)
    if old_logp is None:
        per_token, clipped = a * logp, 0.0
    else:
        ratio = torch.exp((logp - old_logp) * mask)
        high = clip if clip_high is None else clip_high
        unclipped, bounded = ratio * a, ratio.clamp(1 - clip, 1 + high) * a
        per_token = torch.minimum(unclipped, bounded)
        hit = (bounded < unclipped) & mask
        clipped = float(hit.sum() / mask.sum().clamp_min(1))
    loss = -aggregate(per_token, mask, aggregation, budget).sum() / len(adv)
    return Surrogate(loss, clipped)


def k3_kl(logp: Tensor, ref_logp: Tensor, mask: Tensor) -> Tensor:
    """Mean per-token KL(pi || ref) by the k3 estimator exp(d) - d - 1, d = ref - logp
    (unbiased and never negative; Schulman 2020)."""
    d = (ref_logp - logp) * mask
    return ((torch.exp(d) - d - 1) * mask).sum() / mask.sum().clamp_min(1)


__all__ = [
    "ADVANTAGES",
    "AGGREGATIONS",
    "ALGORITHMS",
    "Surrogate",
    "advantages",
    "aggregate",
    "k3_kl",
    "policy_surrogate",
]
