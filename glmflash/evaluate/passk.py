"""The unbiased pass@k estimator (Chen et al. 2021, "Evaluating Large Language Models
Trained on Code").

From n samples per problem of which c pass, the probability that at least one of k samples
drawn without replacement passes is

    pass@k = 1 - C(n-c, k) / C(n, k) = 1 - prod_{i=0}^{k-1} (n-c-i) / (n-i)

The product form never forms a binomial coefficient, so it stays exact in float64 for any n.
When n - c < k the factor i = n - c is zero: every draw of k holds a pass and pass@k = 1.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

IntLike = int | Sequence[int] | np.ndarray


def _counts(x: IntLike, name: str) -> np.ndarray:
    """x as an int64 array; raises ValueError unless every entry is a non-negative integer."""
    arr = np.asarray(x)
    if arr.dtype == bool or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise ValueError(f"{name} must hold integers, got dtype {arr.dtype}")
    if not np.all(np.isfinite(arr)) or not np.all(arr == np.floor(arr)):
        raise ValueError(f"{name} must hold integers, got {x!r}")
    if np.any(arr < 0):
        raise ValueError(f"{name} must be non-negative, got {x!r}")
    return arr.astype(np.int64)


def pass_at_k(n: IntLike, c: IntLike, k: int) -> float | np.ndarray:
    """Unbiased pass@k per problem, from n samples with c passing; vectorised over problems.

    n and c broadcast against each other; a float for scalar input, else an array.
    Raises ValueError for k < 1, k > n, c > n or negative counts.
    """
    ks = _counts(k, "k")
    if ks.ndim != 0 or ks < 1:
        raise ValueError(f"k must be a single integer >= 1, got {k!r}")
    k = int(ks)
    ns, cs = np.broadcast_arrays(_counts(n, "n"), _counts(c, "c"))
    if np.any(ns < k):
        raise ValueError(f"k={k} exceeds the number of samples n={n!r}")
    if np.any(cs > ns):
        raise ValueError(f"passing samples c={c!r} exceed the samples n={n!r}")
    fail_all = np.ones(ns.shape)  # C(n-c, k) / C(n, k): probability all k draws fail
    for i in range(k):
        fail_all *= np.maximum(ns - cs - i, 0) / (ns - i)
    result = 1.0 - fail_all
    return float(result) if result.ndim == 0 else result


def mean_pass_at_k(ns: IntLike, cs: IntLike, k: int) -> float:
    """pass@k averaged over problems (the benchmark score)."""
    per_problem = np.atleast_1d(pass_at_k(ns, cs, k))
    if per_problem.size == 0:
        raise ValueError("mean_pass_at_k needs at least one problem")
    return float(per_problem.mean())
