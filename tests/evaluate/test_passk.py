import math

import numpy as np
import pytest

from glmflash.evaluate.passk import mean_pass_at_k, pass_at_k


def comb_pass_at_k(n: int, c: int, k: int) -> float:
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@pytest.mark.parametrize("n", [1, 2, 5, 8, 20, 33])
def test_matches_binomial_coefficients(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(comb_pass_at_k(n, c, k), abs=1e-12)


def test_large_n_stays_accurate():
    # C(1000, 500) overflows float64; the product form does not need it.
    n, c, k = 1000, 3, 500
    exact = 1.0 - math.comb(n - c, k) / math.comb(n, k)  # integer division by Python
    assert pass_at_k(n, c, k) == pytest.approx(exact, rel=1e-12)


def test_vectorised_over_problems():
    rng = np.random.default_rng(0)
    for size in [1, 7, 100]:
        ns = rng.integers(8, 40, size=size)
        cs = rng.integers(0, ns + 1)
        for k in [1, 4, 8]:
            got = pass_at_k(ns, cs, k)
            assert isinstance(got, np.ndarray) and got.shape == (size,)
            want = [comb_pass_at_k(int(n), int(c), k) for n, c in zip(ns, cs, strict=True)]
            np.testing.assert_allclose(got, want, atol=1e-12)
            assert mean_pass_at_k(ns, cs, k) == pytest.approx(np.mean(want), abs=1e-12)
            assert mean_pass_at_k(list(ns), list(cs), k) == pytest.approx(np.mean(want))


def test_pass_at_1_is_the_pass_rate():
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert mean_pass_at_k([4, 4, 4], [0, 2, 4], 1) == pytest.approx(0.5)


@pytest.mark.parametrize("n,c,k", [(5, 2, 2), (8, 1, 3), (12, 4, 4), (16, 3, 8)])
def test_matches_monte_carlo_draws_without_replacement(n, c, k):
    rng = np.random.default_rng(n * 100 + c * 10 + k)
    trials = 40_000
    draws = rng.random((trials, n)).argsort(axis=1)[:, :k]  # k distinct samples per trial
    hit = np.mean(np.any(draws < c, axis=1))  # samples 0..c-1 are the passing ones
    p = pass_at_k(n, c, k)
    assert abs(hit - p) < 5 * math.sqrt(p * (1 - p) / trials) + 1e-9


def test_edge_cases():
    assert pass_at_k(10, 0, 5) == 0.0
    assert pass_at_k(10, 10, 1) == 1.0
    assert pass_at_k(10, 10, 10) == 1.0
    assert pass_at_k(10, 6, 5) == 1.0  # n - c = 4 < k: every draw of 5 holds a pass
    assert pass_at_k(10, 5, 5) < 1.0  # n - c = k: one draw in C(10, 5) misses
    assert pass_at_k(10, 5, 5) == pytest.approx(1 - 1 / 252)
    assert pass_at_k(1, 0, 1) == 0.0 and pass_at_k(1, 1, 1) == 1.0
    np.testing.assert_array_equal(pass_at_k([4, 4, 4], [0, 1, 4], 4), [0.0, 1.0, 1.0])


@pytest.mark.parametrize(
    "n,c,k",
    [
        (4, 1, 5),  # k > n
        (4, 5, 2),  # c > n
        (4, -1, 2),  # negative c
        (-4, 0, 1),  # negative n
        (4, 1, 0),  # k < 1
        (4, 1, -2),
        (4.5, 1, 2),  # not an integer
        (4, 1, [1, 2]),  # k must be one number
        ([4, 2], [1, 3], 2),  # one problem has c > n
        ([4, 1], [1, 1], 2),  # one problem has k > n
    ],
)
def test_bad_input_raises(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_mean_needs_a_problem():
    with pytest.raises(ValueError):
        mean_pass_at_k([], [], 1)
