"""Paired statistics for comparing two arms of an experiment run over the same seeds.

Arm a is the baseline, arm b the treatment; a difference is always b - a. Inputs are plain
sequences or numpy arrays; paired inputs must have equal, non-zero length. Every random
procedure takes a seed and is deterministic given it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

ArrayLike = Sequence[float] | np.ndarray

EXACT_SIGN_FLIP_MAX_N = 20  # 2^20 sign patterns, about 8 MB of sums
SIGN_FLIP_RESAMPLES = 100_000  # Monte Carlo beyond: standard error of p <= 0.0016
_BLOCK = 1 << 20  # elements per resampling block, bounding memory


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float
    confidence: float

    def __str__(self) -> str:
        return f"{self.estimate:+.4g} [{self.low:+.4g}, {self.high:+.4g}]"


@dataclass(frozen=True)
class McNemarResult:
    b01: int  # pairs where a fails and b passes
    b10: int  # pairs where a passes and b fails
    p: float


@dataclass(frozen=True)
class Comparison:
    mean_a: float
    mean_b: float
    difference: Interval  # mean of b - a, paired bootstrap interval
    p: float  # two-sided sign-flip test of the mean difference
    seeds_agree: int  # pairs whose difference has the sign of the mean difference
    n: int  # pairs

    def __str__(self) -> str:
        return (
            f"{self.mean_a:.4g} -> {self.mean_b:.4g}, difference {self.difference}, "
            f"p = {self.p:.3g}, {self.seeds_agree}/{self.n} seeds agree"
        )


def _sample(x: ArrayLike, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite")
    return arr


def _differences(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """b - a for paired samples; raises ValueError unless the lengths match."""
    a, b = _sample(a, "a"), _sample(b, "b")
    if a.shape != b.shape:
        raise ValueError(f"paired samples need equal lengths, got {a.size} and {b.size}")
    return b - a


def _check_resampling(n_resamples: int, confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")


def bootstrap_mean(
    x: ArrayLike, n_resamples: int = 10_000, confidence: float = 0.95, seed: int = 0
) -> Interval:
    """The mean of x with a percentile bootstrap interval.

    Each resample draws len(x) values with replacement; the interval is the
    (1-confidence)/2 and (1+confidence)/2 quantiles of the resampled means.
    """
    x = _sample(x, "x")
    _check_resampling(n_resamples, confidence)
    rng = np.random.default_rng(seed)
    rows = max(1, _BLOCK // x.size)
    means = np.concatenate(
        [
            x[rng.integers(0, x.size, size=(min(rows, n_resamples - start), x.size))].mean(axis=1)
            for start in range(0, n_resamples, rows)
        ]
    )
    alpha = 1.0 - confidence
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return Interval(float(x.mean()), float(low), float(high), confidence)


def paired_bootstrap(
    a: ArrayLike, b: ArrayLike, n_resamples: int = 10_000, confidence: float = 0.95, seed: int = 0
) -> Interval:
    """Mean difference b - a with a percentile bootstrap interval, resampling whole pairs.

    Resampling pairs (a_i, b_i) together is resampling the differences d_i = b_i - a_i,
    which keeps the between-seed correlation that an unpaired bootstrap would throw away.
    """
    return bootstrap_mean(_differences(a, b), n_resamples, confidence, seed)


def _signed_sums(d: np.ndarray) -> np.ndarray:
    """sum_i s_i d_i for all 2^n sign patterns s in {-1, +1}^n, built one difference at a time."""
    sums = np.zeros(1)
    for di in d:
        sums = np.concatenate([sums + di, sums - di])
    return sums


def sign_flip_test(
    a: ArrayLike,
    b: ArrayLike,
    n_resamples: int = SIGN_FLIP_RESAMPLES,
    seed: int = 0,
    exact_max_n: int = EXACT_SIGN_FLIP_MAX_N,
) -> float:
    """Two-sided paired permutation test of the mean difference, by flipping signs.

    Under H0 (the arms are exchangeable within each pair) every d_i = b_i - a_i is equally
    likely to have either sign, so p = P(|sum_i s_i d_i| >= |sum_i d_i|) over uniform random
    signs s (the sum orders patterns as the mean does). For n <= exact_max_n all 2^n
    patterns are enumerated and p is exact; beyond, n_resamples random patterns give
    p = (1 + hits) / (1 + n_resamples), which is a valid p-value itself.
    Ten pairs all favouring one arm give the smallest exact p: 2 / 2^10 = 0.001953125.
    """
    d = _differences(a, b)
    observed = abs(d.sum())
    tol = 1e-12 * np.abs(d).sum()  # equal sums reached by a different rounding are ties
    if d.size <= exact_max_n:
        return float(np.mean(np.abs(_signed_sums(d)) >= observed - tol))
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    rng = np.random.default_rng(seed)
    rows = max(1, _BLOCK // d.size)
    hits = 0
    for start in range(0, n_resamples, rows):
        signs = rng.choice([-1.0, 1.0], size=(min(rows, n_resamples - start), d.size))
        hits += int(np.sum(np.abs(signs @ d) >= observed - tol))
    return (1 + hits) / (1 + n_resamples)


def _passes(x: ArrayLike, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence of pass/fail values")
    if not np.all((arr == 0) | (arr == 1)):
        raise ValueError(f"{name} must hold only pass/fail values (True/False or 1/0)")
    return arr.astype(bool)


def mcnemar_exact(a_pass: ArrayLike, b_pass: ArrayLike) -> McNemarResult:
    """Exact McNemar test for paired pass/fail outcomes, two-sided.

    Only discordant pairs carry information: under H0 each is equally likely to favour
    either arm, so b01 ~ Binomial(b01 + b10, 1/2). No discordant pairs gives p = 1.
    """
    a, b = _passes(a_pass, "a_pass"), _passes(b_pass, "b_pass")
    if a.shape != b.shape:
        raise ValueError(f"paired samples need equal lengths, got {a.size} and {b.size}")
    b01, b10 = int(np.sum(~a & b)), int(np.sum(a & ~b))
    p = 1.0 if b01 + b10 == 0 else float(sps.binomtest(b01, b01 + b10, 0.5).pvalue)
    return McNemarResult(b01, b10, p)


def holm(pvalues: ArrayLike) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input order.

    With p-values sorted ascending p_(1) <= ... <= p_(m), the adjusted value is
    max_{j <= i} min(1, (m - j + 1) p_(j)); rejecting where it is <= alpha is Holm's
    step-down procedure and controls the family-wise error rate at alpha.
    """
    p = _sample(pvalues, "pvalues")
    if np.any((p < 0) | (p > 1)):
        raise ValueError("p-values must lie in [0, 1]")
    m = p.size
    order = np.argsort(p, kind="stable")
    stepped = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted = np.empty(m)
    adjusted[order] = np.maximum.accumulate(stepped)
    return adjusted.tolist()


def seeds_agree(a: ArrayLike, b: ArrayLike) -> tuple[int, int]:
    """(k, n): k of the n pairs have a difference b - a with the sign of the mean difference.

    A mean difference of exactly zero has no direction, and then k = 0.
    """
    d = _differences(a, b)
    direction = np.sign(d.mean())
    k = 0 if direction == 0 else int(np.sum(np.sign(d) == direction))
    return k, d.size


def proportion_interval(
    k: int, n: int, confidence: float = 0.95, method: str = "clopper-pearson"
) -> Interval:
    """k passes of n trials: the rate k/n with a Clopper-Pearson (exact) or Wilson interval.

    Clopper-Pearson inverts the two one-sided binomial tests and never under-covers;
    Wilson inverts the score test and is shorter, with coverage close to nominal.
    """
    methods = {"clopper-pearson": "exact", "wilson": "wilson"}
    if method not in methods:
        raise ValueError(f"method must be one of {sorted(methods)}, got {method!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    if int(n) != n or int(k) != k or n < 1 or not 0 <= k <= n:
        raise ValueError(f"need integers 0 <= k <= n and n >= 1, got k={k}, n={n}")
    ci = sps.binomtest(int(k), int(n)).proportion_ci(confidence, method=methods[method])
    return Interval(k / n, float(ci.low), float(ci.high), confidence)


def compare(
    a: ArrayLike, b: ArrayLike, n_resamples: int = 10_000, confidence: float = 0.95, seed: int = 0
) -> Comparison:
    """Everything a report line needs about arm b against arm a over paired seeds."""
    d = _differences(a, b)
    k, n = seeds_agree(a, b)
    return Comparison(
        mean_a=float(np.mean(a)),
        mean_b=float(np.mean(b)),
        difference=bootstrap_mean(d, n_resamples, confidence, seed),
        p=sign_flip_test(a, b, seed=seed),
        seeds_agree=k,
        n=n,
    )


def hierarchical_bootstrap_means(
    groups: Sequence[ArrayLike], n_resamples: int = 10_000, seed: int = 0
) -> np.ndarray:
    """Resampled grand means of two-level data (seeds, then tasks within a seed).

    Each resample draws S = len(groups) seeds with replacement and, for each drawn seed,
    its tasks with replacement, and averages the S task means: the uncertainty of a mean gain
    from both the RL seed and the finite task set. Its variance is
    (1/S) [ (1/S) sum_j (m_j - m)^2 + (1/S) sum_j s_j^2 / n_j ]
    (m_j, s_j^2: seed j's task mean and variance with ddof 0; m the mean of the m_j).
    """
    xs = [_sample(x, f"group {i}") for i, x in enumerate(groups)]
    if not xs:
        raise ValueError("need at least one group")
    _check_resampling(n_resamples, 0.5)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(xs), size=(n_resamples, len(xs)))
    means = np.empty(picks.shape)
    for i, x in enumerate(xs):
        where = picks == i
        means[where] = x[rng.integers(0, x.size, size=(int(where.sum()), x.size))].mean(axis=1)
    return means.mean(axis=1)


def hierarchical_bootstrap(
    groups: Sequence[ArrayLike], n_resamples: int = 10_000, confidence: float = 0.95, seed: int = 0
) -> Interval:
    """The mean of the group means with a percentile interval from
    `hierarchical_bootstrap_means`."""
    _check_resampling(n_resamples, confidence)
    means = hierarchical_bootstrap_means(groups, n_resamples, seed)
    alpha = 1.0 - confidence
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    estimate = float(np.mean([np.mean(_sample(x, "group")) for x in groups]))
    return Interval(estimate, float(low), float(high), confidence)
