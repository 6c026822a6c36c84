import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats as sps

from glmflash.evaluate.stats import (
    Comparison,
    Interval,
    bootstrap_mean,
    compare,
    hierarchical_bootstrap,
    hierarchical_bootstrap_means,
    holm,
    mcnemar_exact,
    paired_bootstrap,
    proportion_interval,
    seeds_agree,
    sign_flip_test,
)

# --- bootstrap -------------------------------------------------------------------------


@pytest.mark.parametrize("n", [5, 12, 40])
def test_paired_bootstrap_matches_scipy(n):
    rng = np.random.default_rng(n)
    a = rng.normal(0.3, 1.0, size=n)
    b = a + rng.normal(0.2, 0.5, size=n)  # correlated pairs
    resamples = 10_000
    got = paired_bootstrap(a, b, n_resamples=resamples, seed=1)
    ref = sps.bootstrap(
        (b - a,),
        np.mean,
        n_resamples=resamples,
        method="percentile",
        confidence_level=0.95,
        rng=np.random.default_rng(2),
    )
    spread = np.std(b - a) / math.sqrt(n)  # standard deviation of the resampled means
    assert got.estimate == pytest.approx(np.mean(b - a))
    assert got.confidence == 0.95
    # each endpoint's Monte Carlo error is about 2.7 spread / sqrt(resamples)
    assert abs(got.low - ref.confidence_interval.low) < 0.15 * spread
    assert abs(got.high - ref.confidence_interval.high) < 0.15 * spread
    assert got.low < got.estimate < got.high


def test_bootstrap_mean_matches_normal_theory_for_large_n():
    rng = np.random.default_rng(3)
    x = rng.exponential(2.0, size=2000)
    got = bootstrap_mean(x, n_resamples=4000, confidence=0.9, seed=0)
    half = sps.norm.ppf(0.95) * np.std(x) / math.sqrt(x.size)
    assert got.estimate == pytest.approx(x.mean())
    assert got.low == pytest.approx(x.mean() - half, abs=0.08 * half)
    assert got.high == pytest.approx(x.mean() + half, abs=0.08 * half)


def test_paired_bootstrap_resamples_pairs():
    rng = np.random.default_rng(4)
    a, b = rng.normal(size=9), rng.normal(size=9)
    assert paired_bootstrap(a, b, n_resamples=500, seed=7) == bootstrap_mean(
        b - a, n_resamples=500, seed=7
    )
    # a shared per-seed offset cancels in the pairs: adding it changes nothing
    shift = rng.normal(0.0, 100.0, size=9)
    base = paired_bootstrap(a, b, n_resamples=500, seed=7)
    shifted = paired_bootstrap(a + shift, b + shift, n_resamples=500, seed=7)
    assert shifted.low == pytest.approx(base.low) and shifted.high == pytest.approx(base.high)


def test_bootstrap_is_deterministic_given_seed():
    x = np.random.default_rng(5).normal(size=15)
    assert bootstrap_mean(x, 300, seed=3) == bootstrap_mean(list(x), 300, seed=3)
    assert bootstrap_mean(x, 300, seed=3) != bootstrap_mean(x, 300, seed=4)


def test_bootstrap_blocks_match_one_draw():
    # 70,000 resamples of 20 values span two memory blocks; the quantiles stay sane
    x = np.arange(20.0)
    got = bootstrap_mean(x, n_resamples=70_000, seed=0)
    half = 1.959964 * np.std(x) / math.sqrt(20)
    assert got.low == pytest.approx(9.5 - half, abs=0.1) and got.high == pytest.approx(
        9.5 + half, abs=0.1
    )


def test_bootstrap_degenerate_and_bad_input():
    assert bootstrap_mean([2.5], n_resamples=50) == Interval(2.5, 2.5, 2.5, 0.95)
    assert paired_bootstrap([1, 2, 3], [2, 3, 4], n_resamples=50) == Interval(1, 1, 1, 0.95)
    for bad in ([], [[1.0, 2.0]], [1.0, float("nan")]):
        with pytest.raises(ValueError):
            bootstrap_mean(bad)
    with pytest.raises(ValueError, match="equal lengths"):
        paired_bootstrap([1, 2, 3], [1, 2])
    with pytest.raises(ValueError):
        paired_bootstrap([], [])
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_mean([1, 2], confidence=1.0)
    with pytest.raises(ValueError, match="n_resamples"):
        bootstrap_mean([1, 2], n_resamples=0)


# --- sign-flip test --------------------------------------------------------------------


def scipy_sign_flip(a, b):
    res = sps.permutation_test(
        (np.asarray(a, float), np.asarray(b, float)),
        lambda x, y, axis: np.mean(y, axis=axis) - np.mean(x, axis=axis),
        permutation_type="samples",
        vectorized=True,
        n_resamples=np.inf,
        alternative="two-sided",
    )
    return res.pvalue


def loop_sign_flip(a, b):
    """Independent reference: a Python loop over every sign pattern in exact arithmetic."""
    d = [Fraction(y) - Fraction(x) for x, y in zip(a, b, strict=True)]
    observed = abs(sum(d))
    hits = sum(
        abs(sum(s * di for s, di in zip(signs, d, strict=True))) >= observed
        for signs in itertools.product([1, -1], repeat=len(d))
    )
    return hits / 2 ** len(d)


@pytest.mark.parametrize("n", range(2, 11))  # scipy needs two pairs
def test_sign_flip_matches_scipy_exactly_continuous(n):
    rng = np.random.default_rng(10 + n)
    a = rng.normal(size=n)
    b = a + rng.normal(0.4, 1.0, size=n)
    assert sign_flip_test(a, b) == pytest.approx(scipy_sign_flip(a, b), rel=1e-12, abs=0)


@pytest.mark.parametrize("n", [3, 6, 8, 10])
def test_sign_flip_matches_scipy_and_loop_with_ties(n):
    # pass counts: small integers, many equal differences and many tied sums
    rng = np.random.default_rng(20 + n)
    a = rng.integers(0, 4, size=n) / 8
    b = rng.integers(0, 5, size=n) / 8
    p = sign_flip_test(a, b)
    assert p == pytest.approx(scipy_sign_flip(a, b), rel=1e-12, abs=0)
    assert p == loop_sign_flip(a, b)


@pytest.mark.parametrize("den", [10, 24])
def test_sign_flip_decimal_ties(den):
    # pass rates k/den are inexact in binary: sums equal on paper differ in the last bit
    rng = np.random.default_rng(den)
    for n in [4, 7, 10]:
        ka, kb = rng.integers(0, den + 1, size=n), rng.integers(0, den + 1, size=n)
        exact = loop_sign_flip(
            [Fraction(int(k), den) for k in ka], [Fraction(int(k), den) for k in kb]
        )
        assert sign_flip_test(ka / den, kb / den) == exact


def test_sign_flip_reference_lab_case():
    # 10 seeds all favouring one arm: only the all-plus and all-minus patterns are as extreme
    rng = np.random.default_rng(0)
    a = rng.uniform(0, 0.5, size=10)
    b = a + rng.uniform(0.01, 0.3, size=10)
    assert sign_flip_test(a, b) == 2 / 1024 == 0.001953125
    assert sign_flip_test(b, a) == 0.001953125


def test_sign_flip_edge_cases():
    assert sign_flip_test([1.0, 2.0], [1.0, 2.0]) == 1.0  # no difference at all
    assert sign_flip_test([0.0], [1.0]) == 1.0  # one pair can never be significant
    assert sign_flip_test([0, 0, 0], [1, 1, -2]) == 1.0  # mean difference zero
    with pytest.raises(ValueError, match="equal lengths"):
        sign_flip_test([1, 2], [1, 2, 3])
    with pytest.raises(ValueError):
        sign_flip_test([], [])


def test_sign_flip_exact_at_twenty():
    rng = np.random.default_rng(30)
    a = rng.normal(size=20)
    b = a + rng.normal(0.5, 1.0, size=20)
    p = sign_flip_test(a, b)  # 2^20 patterns, enumerated
    assert p * 2**20 == round(p * 2**20)  # a count of patterns
    assert p == pytest.approx(
        sign_flip_test(a, b, exact_max_n=0, n_resamples=40_000),
        abs=5 * math.sqrt(p * (1 - p) / 40_000) + 1e-4,
    )


@pytest.mark.parametrize("n", [8, 12])
def test_sign_flip_monte_carlo_agrees_with_exact(n):
    rng = np.random.default_rng(40 + n)
    a = rng.normal(size=n)
    b = a + rng.normal(0.3, 1.0, size=n)
    exact = sign_flip_test(a, b)
    resamples = 20_000
    mc = sign_flip_test(a, b, n_resamples=resamples, seed=1, exact_max_n=0)
    assert abs(mc - exact) < 5 * math.sqrt(exact * (1 - exact) / resamples) + 2 / resamples
    assert mc == sign_flip_test(a, b, n_resamples=resamples, seed=1, exact_max_n=0)


def test_sign_flip_monte_carlo_beyond_twenty():
    rng = np.random.default_rng(50)
    n = 30
    a = rng.normal(size=n)
    shift = rng.normal(0.0, 1.0, size=n)
    p_null = sign_flip_test(a, a + shift, n_resamples=20_000)
    # large n: the sign-flip null of the sum is close to normal with variance sum d^2
    z = abs(shift.sum()) / math.sqrt(np.sum(shift**2))
    assert p_null == pytest.approx(2 * sps.norm.sf(z), abs=0.03)
    p_all = sign_flip_test(a, a + np.abs(shift) + 0.1, n_resamples=2_000)
    assert p_all == 1 / 2001  # nothing as extreme as all 30 pairs agreeing: (1 + 0) / (1 + R)


# --- McNemar ---------------------------------------------------------------------------


def binomial_two_sided(k: int, n: int) -> float:
    """Exact two-sided p for Binomial(n, 1/2): twice the smaller tail, capped at 1."""
    tail = sum(math.comb(n, i) for i in range(min(k, n - k) + 1)) / 2**n
    return min(1.0, 2 * tail)


@pytest.mark.parametrize("n", [1, 10, 37, 200])
def test_mcnemar_matches_binomial(n):
    rng = np.random.default_rng(60 + n)
    a = rng.random(n) < 0.4
    b = rng.random(n) < 0.6
    got = mcnemar_exact(a, b)
    b01 = sum(1 for x, y in zip(a, b, strict=True) if not x and y)
    b10 = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    assert (got.b01, got.b10) == (b01, b10)
    if b01 + b10:
        assert got.p == pytest.approx(sps.binomtest(b01, b01 + b10, 0.5).pvalue, rel=1e-12)
        assert got.p == pytest.approx(binomial_two_sided(b01, b01 + b10), rel=1e-9)
    else:
        assert got.p == 1.0


def test_mcnemar_hand_examples():
    r = mcnemar_exact([0, 0, 0, 0, 0, 1, 1], [1, 1, 1, 1, 1, 1, 0])
    assert (r.b01, r.b10) == (5, 1)
    assert r.p == pytest.approx(2 * (1 + 6) / 64)  # 2 P(X <= 1), X ~ Bin(6, 1/2)
    r = mcnemar_exact([False] * 5, [True] * 5)
    assert (r.b01, r.b10, r.p) == (5, 0, pytest.approx(2 / 32))
    assert mcnemar_exact([1, 0, 1], [1, 0, 1]).p == 1.0  # no discordant pair
    assert mcnemar_exact([1, 0], [0, 1]).p == 1.0


def test_mcnemar_bad_input():
    with pytest.raises(ValueError, match="equal lengths"):
        mcnemar_exact([1, 0], [1, 0, 1])
    with pytest.raises(ValueError):
        mcnemar_exact([], [])
    with pytest.raises(ValueError, match="pass/fail"):
        mcnemar_exact([0.5, 1], [1, 0])


# --- Holm ------------------------------------------------------------------------------


def holm_by_definition(p):
    """Adjusted p_i = max over j ranked no later than i of min(1, (m - rank_j) p_j)."""
    m = len(p)
    rank = sorted(range(m), key=lambda i: p[i])
    pos = {idx: r for r, idx in enumerate(rank)}
    return [
        max(min(1.0, (m - pos[j]) * p[j]) for j in range(m) if pos[j] <= pos[i]) for i in range(m)
    ]


def holm_step_down_rejects(p, alpha):
    """Holm's procedure: reject in ascending order while p_(j) <= alpha / (m - j)."""
    m = len(p)
    reject = [False] * m
    for j, i in enumerate(sorted(range(m), key=lambda i: p[i])):
        if p[i] > alpha / (m - j):
            break
        reject[i] = True
    return reject


@pytest.mark.parametrize("m", [1, 2, 5, 13, 40])
def test_holm_matches_definition_and_step_down(m):
    rng = np.random.default_rng(70 + m)
    p = (rng.random(m) ** 3).tolist()  # many small p-values
    adjusted = holm(p)
    np.testing.assert_allclose(adjusted, holm_by_definition(p), rtol=1e-12)
    assert all(q >= x for q, x in zip(adjusted, p, strict=True)) and max(adjusted) <= 1.0
    order = np.argsort(p)
    assert np.all(np.diff(np.asarray(adjusted)[order]) >= 0)  # monotone in the raw order
    for alpha in [0.01, 0.05, 0.2]:
        assert [q <= alpha for q in adjusted] == holm_step_down_rejects(p, alpha)


def test_holm_hand_examples():
    # statsmodels.stats.multitest.multipletests(p, method="holm") gives the same values
    np.testing.assert_allclose(holm([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
    np.testing.assert_allclose(holm([0.5, 0.6]), [1.0, 1.0])  # capped at 1
    np.testing.assert_allclose(holm([0.02, 0.02, 0.9]), [0.06, 0.06, 0.9])  # ties
    assert holm([0.3]) == [0.3]
    with pytest.raises(ValueError):
        holm([])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        holm([0.1, 1.5])


# --- seeds agreeing, proportions, compare -----------------------------------------------


def test_seeds_agree():
    assert seeds_agree([0, 0, 0, 0], [1, 2, -1, 3]) == (3, 4)
    assert seeds_agree([1, 2, 3], [0, 0, 0]) == (3, 3)
    assert seeds_agree([0, 0, 0], [1, 0, 2]) == (2, 3)  # a tied pair favours neither arm
    assert seeds_agree([0, 0], [1, -1]) == (0, 2)  # no direction
    assert seeds_agree([0, 0, 0], [1, -1, 0]) == (0, 3)
    rng = np.random.default_rng(80)
    for n in [1, 6, 25]:
        a, b = rng.normal(size=n), rng.normal(size=n)
        k, size = seeds_agree(a, b)
        direction = 1 if np.mean(b - a) > 0 else -1
        assert size == n
        assert k == sum(1 for x, y in zip(a, b, strict=True) if (y - x) * direction > 0)
    with pytest.raises(ValueError):
        seeds_agree([1], [1, 2])


@pytest.mark.parametrize("k,n", [(0, 24), (9, 24), (19, 24), (24, 24), (119, 200), (1, 1)])
def test_proportion_interval_clopper_pearson(k, n):
    got = proportion_interval(k, n)
    low = 0.0 if k == 0 else sps.beta.ppf(0.025, k, n - k + 1)
    high = 1.0 if k == n else sps.beta.ppf(0.975, k + 1, n - k)
    assert got.estimate == k / n and got.confidence == 0.95
    assert got.low == pytest.approx(low, abs=1e-9) and got.high == pytest.approx(high, abs=1e-9)


@pytest.mark.parametrize("k,n", [(0, 24), (16, 24), (25, 64), (200, 200)])
def test_proportion_interval_wilson(k, n):
    got = proportion_interval(k, n, confidence=0.9, method="wilson")
    z = sps.norm.ppf(0.95)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert got.low == pytest.approx(centre - half, abs=1e-12)
    assert got.high == pytest.approx(centre + half, abs=1e-12)


def test_proportion_interval_bad_input():
    for k, n in [(5, 4), (-1, 4), (1, 0), (1.5, 4)]:
        with pytest.raises(ValueError):
            proportion_interval(k, n)
    with pytest.raises(ValueError, match="method"):
        proportion_interval(1, 4, method="normal")


def test_compare_bundles_the_pieces():
    rng = np.random.default_rng(90)
    a = rng.uniform(0.2, 0.4, size=10)
    b = a + rng.normal(0.1, 0.05, size=10)
    got = compare(list(a), b, n_resamples=800, seed=2)
    assert isinstance(got, Comparison)
    assert got.mean_a == pytest.approx(a.mean()) and got.mean_b == pytest.approx(b.mean())
    assert got.difference == paired_bootstrap(a, b, n_resamples=800, seed=2)
    assert got.p == sign_flip_test(a, b)
    assert (got.seeds_agree, got.n) == seeds_agree(a, b)
    assert f"{got.seeds_agree}/10 seeds agree" in str(got)
    with pytest.raises(ValueError, match="equal lengths"):
        compare([1, 2], [1])


@pytest.mark.parametrize("sizes", [(32, 32, 32, 32, 32), (10, 20, 40), (64,)])
def test_hierarchical_bootstrap_against_its_variance_formula(sizes):
    """The resampled grand means have the mean and variance computed directly from the data."""
    rng = np.random.default_rng(len(sizes))
    groups = [rng.integers(-1, 2, size=n).astype(float) + rng.normal() for n in sizes]
    means = hierarchical_bootstrap_means(groups, n_resamples=200_000, seed=1)
    m = np.array([g.mean() for g in groups])
    within = np.array([g.var() / g.size for g in groups])
    S = len(groups)
    variance = (np.mean((m - m.mean()) ** 2) + within.mean()) / S
    assert means.mean() == pytest.approx(m.mean(), abs=4 * np.sqrt(variance / 200_000))
    assert means.var() == pytest.approx(variance, rel=0.02)
    iv = hierarchical_bootstrap(groups, n_resamples=20_000, seed=2)
    assert iv.estimate == pytest.approx(m.mean())
    assert iv.low < m.mean() < iv.high
    # nearly normal here: the 95% interval is about 1.96 standard deviations either side
    assert iv.high - iv.low == pytest.approx(2 * 1.96 * np.sqrt(variance), rel=0.1)


def test_hierarchical_bootstrap_seed_level_spread_dominates():
    """Seeds that disagree widen the interval even when each seed's tasks agree."""
    flat = [np.full(50, 0.2)] * 5
    spread = [np.full(50, v) for v in (-0.2, 0.0, 0.2, 0.4, 0.6)]
    assert hierarchical_bootstrap(flat).high - hierarchical_bootstrap(flat).low < 1e-12
    iv = hierarchical_bootstrap(spread)
    assert iv.estimate == pytest.approx(0.2) and iv.low < 0.05 and iv.high > 0.35
