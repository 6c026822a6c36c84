"""Advantage estimators and losses of the RL update against hand computations and loops."""

import math

import pytest
import torch

from glmflash.config import RLConfig
from glmflash.train.policy_gradient import (
    ALGORITHMS,
    advantages,
    aggregate,
    k3_kl,
    policy_surrogate,
)


def test_advantages_by_hand():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0]], dtype=torch.float64)
    std = math.sqrt(4 * 0.25 / 3)  # unbiased std of (1, 0, 0, 1)
    sign = torch.tensor([[1.0, -1.0, -1.0, 1.0]], dtype=torch.float64)
    torch.testing.assert_close(advantages(r, "rloo"), sign * 2 / 3)
    torch.testing.assert_close(advantages(r, "grpo"), sign * 0.5 / (std + 1e-6))
    torch.testing.assert_close(advantages(r, "dr_grpo"), sign * 0.5)


@pytest.mark.parametrize("kind", ["rloo", "grpo", "dr_grpo"])
def test_advantages_against_a_loop_and_zero_without_spread(kind):
    g = torch.Generator().manual_seed(0)
    for G in (2, 3, 8):
        r = torch.randn(4, G, generator=g, dtype=torch.float64)
        r[0] = 0.25  # a group without spread
        rows = []
        for row in r.tolist():
            mean = sum(row) / G
            std = math.sqrt(sum((x - mean) ** 2 for x in row) / (G - 1))
            rows.append(
                [
                    {
                        "rloo": x - (sum(row) - x) / (G - 1),
                        "grpo": (x - mean) / (std + 1e-6),
                        "dr_grpo": x - mean,
                    }[kind]
                    for x in row
                ]
            )
        expected = torch.tensor(rows, dtype=torch.float64)
        expected[0] = 0.0
        got = advantages(r, kind)
        torch.testing.assert_close(got, expected)
        assert torch.equal(got[0], torch.zeros(G, dtype=torch.float64))  # exactly, not ~0


def test_aggregations_by_hand():
    terms = torch.tensor([[1.0, 2.0, 9.0], [4.0, 9.0, 9.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    torch.testing.assert_close(aggregate(terms, mask, "sequence", 10), torch.tensor([3.0, 4.0]))
    torch.testing.assert_close(aggregate(terms, mask, "token_mean", 10), torch.tensor([1.5, 4.0]))
    torch.testing.assert_close(aggregate(terms, mask, "constant", 10), torch.tensor([0.3, 0.4]))
    with pytest.raises(ValueError, match="aggregation"):
        aggregate(terms, mask, "mean", 10)


def test_plain_surrogate_is_minus_the_advantage_weighted_log_likelihood():
    logp = torch.tensor([[-1.0, -2.0], [-0.5, 0.0]], requires_grad=True)
    mask = torch.tensor([[True, True], [True, False]])
    adv = torch.tensor([1.0, -2.0])
    # token_mean: -(1 * (-1.5) + (-2) * (-0.5)) / 2 = 0.25
    out = policy_surrogate(logp, mask, adv, "token_mean")
    assert float(out.loss.detach()) == pytest.approx(0.25) and out.clip_fraction == 0.0
    out.loss.backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-0.25, -0.25], [1.0, 0.0]]))


def test_clipped_surrogate_by_hand():
    """Ratios 1.5 and 0.5 under advantages +1 and -1: the clip binds where the ratio has gone
    past 1 +- 0.2 in the advantage's favour (1.5 with A > 0, 0.5 with A < 0), and there the
    token gives no gradient."""
    old = torch.zeros(2, 2)
    logp = torch.log(torch.tensor([[1.5, 0.5], [0.5, 1.5]])).requires_grad_()
    mask = torch.ones(2, 2, dtype=torch.bool)
    adv = torch.tensor([1.0, -1.0])
    out = policy_surrogate(logp, mask, adv, "sequence", old_logp=old, clip=0.2)
    # terms: min(1.5, 1.2) = 1.2, min(0.5, 0.8) = 0.5; min(-0.5, -0.8) = -0.8, min(-1.5, -1.2)
    # = -1.5; loss = -((1.2 + 0.5) + (-0.8 - 1.5)) / 2 = 0.3
    assert float(out.loss.detach()) == pytest.approx(0.3)
    assert out.clip_fraction == pytest.approx(0.5)
    out.loss.backward()
    # d/dlogp of -(rho A)/2 = -rho A / 2 where unclipped
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, -0.25], [0.0, 0.75]]))


def test_asymmetric_clip_by_hand():
    """DAPO's range [1 - 0.2, 1 + 0.28]: with A = +1, ratio 1.25 (past PPO's 1.2) still
    pushes and 1.35 is held at 1.28; with A = -1, ratio 0.75 is held at 0.8 and 0.85 and 1.35
    push. Clipped tokens give no gradient."""
    old = torch.zeros(2, 3)
    ratios = torch.tensor([[1.25, 1.35, 0.75], [0.75, 0.85, 1.35]], dtype=torch.float64)
    logp = torch.log(ratios).requires_grad_()
    mask = torch.ones(2, 3, dtype=torch.bool)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    out = policy_surrogate(logp, mask, adv, "sequence", old_logp=old, clip=0.2, clip_high=0.28)
    # terms: 1.25, min(1.35, 1.28) = 1.28, 0.75; min(-0.75, -0.8) = -0.8, -0.85, -1.35
    # loss = -((1.25 + 1.28 + 0.75) + (-0.8 - 0.85 - 1.35)) / 2 = -(3.28 - 3.0) / 2 = -0.14
    assert float(out.loss.detach()) == pytest.approx(-0.14)
    assert out.clip_fraction == pytest.approx(2 / 6)
    out.loss.backward()
    # d/dlogp of -(rho A) / 2 = -rho A / 2 where unclipped, 0 where clipped
    expected = torch.tensor([[-0.625, 0.0, -0.375], [0.0, 0.425, 0.675]], dtype=torch.float64)
    torch.testing.assert_close(logp.grad, expected)
    symmetric = policy_surrogate(logp, mask, adv, "sequence", old_logp=old, clip=0.2)
    assert float(symmetric.loss.detach()) == pytest.approx(-((1.2 + 1.2 + 0.75) - 3.0) / 2)


def test_clipped_surrogate_at_ratio_one_has_the_reinforce_gradient():
    g = torch.Generator().manual_seed(1)
    logp = torch.randn(3, 5, generator=g).requires_grad_()
    mask = torch.rand(3, 5, generator=g) > 0.3
    adv = torch.randn(3, generator=g)
    plain = policy_surrogate(logp, mask, adv, "token_mean")
    (grad_plain,) = torch.autograd.grad(plain.loss, logp)
    clipped = policy_surrogate(logp, mask, adv, "token_mean", old_logp=logp.detach())
    (grad_clipped,) = torch.autograd.grad(clipped.loss, logp)
    torch.testing.assert_close(grad_clipped, grad_plain)
    assert clipped.clip_fraction == 0.0


def test_k3_kl_is_zero_at_the_reference_and_positive_elsewhere():
    logp = torch.tensor([[-1.0, -2.0, 5.0]])
    mask = torch.tensor([[True, True, False]])
    assert float(k3_kl(logp, logp, mask)) == 0.0
    ref = torch.tensor([[-1.5, -1.0, 0.0]])  # d = -0.5, 1.0; the masked position is ignored
    expected = ((math.exp(-0.5) + 0.5 - 1) + (math.exp(1.0) - 1.0 - 1)) / 2
    assert float(k3_kl(logp, ref, mask)) == pytest.approx(expected)


def test_algorithms_are_valid_configs():
    for fields in ALGORITHMS.values():
        RLConfig(**fields)  # each named algorithm is a settable combination
    assert ALGORITHMS["rloo"] == {
        "advantage": RLConfig().advantage,
        "aggregation": RLConfig().aggregation,
        "update_epochs": RLConfig().update_epochs,
    }  # the default
    with pytest.raises(ValueError, match="advantage"):
        RLConfig(advantage="ppo")
    with pytest.raises(ValueError, match="update epochs"):
        RLConfig(update_epochs=0)


def test_rft_imitates_exactly_the_passing_completions():
    r = torch.tensor([[1.0, 0.0, -0.1, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.5, 0.0, 0.0]])
    want = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(advantages(r, "rft"), want)  # all-pass groups are kept
    # its loss is minus the mean (over all N completions) of the passing ones' log-likelihood
    logp = torch.randn(4, 3)
    mask = torch.ones(4, 3, dtype=torch.bool)
    loss = policy_surrogate(logp, mask, advantages(r[0], "rft")).loss
    torch.testing.assert_close(loss, -(logp[0].sum() + logp[3].sum()) / 4)
