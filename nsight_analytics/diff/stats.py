"""The step-time statistic: a Mann-Whitney U test with the Hodges-Lehmann shift and its CI.

Step times are skewed (a slow step now and then: a log line, a garbage collection) and few
(a profiler captures tens of steps, Kineto often four), so the test makes no normality
assumption: the shift B - A is the median of all pairwise differences (Hodges-Lehmann), and
its confidence interval is the distribution-free one that inverts the Mann-Whitney test
(Moses): the order statistics of those differences at the critical value of U. For small
samples the null distribution of U is exact (the coefficients of a Gaussian binomial
polynomial, in integers); past `EXACT_LIMIT` pairs it is the normal approximation. Nothing is
random, so the same inputs always give the same interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

# Above this many pairs (n * m) the normal approximation replaces the exact distribution.
EXACT_LIMIT = 40_000
_Z_975 = 1.959963984540054  # standard normal quantile for a 95% two-sided interval


@dataclass(frozen=True)
class Shift:
    """B minus A: the Hodges-Lehmann estimate and its confidence interval, in the samples' unit.

    `ci` is None when the samples are too small for any result to reach `confidence`
    (`min_p` says how close the most extreme result gets)."""

    estimate: float
    ci: tuple[float, float] | None
    confidence: float
    p_value: float
    u: float
    n_a: int
    n_b: int
    min_p: float
    exact: bool


@lru_cache(maxsize=64)
def _u_counts(n: int, m: int) -> tuple[int, ...]:
    """How many of the C(n+m, n) orderings give U = 0, 1, ..., n*m: the coefficients of the
    Gaussian binomial [n+m choose n]_q = prod_{i=1..n} (1 - q^(m+i)) / (1 - q^i)."""
    import numpy as np  # here, not at import: `import nsight_analytics` stays quick

    size = n * m + 1
    poly: Any = np.zeros(size, dtype=object)  # numpy's shape types differ across versions
    poly[0] = 1
    for i in range(1, n + 1):
        shifted = np.zeros(size, dtype=object)
        shifted[m + i :] = poly[: size - m - i]
        poly = poly - shifted
        # division by (1 - q^i): a running sum over every i-th coefficient
        pad = (-size) % i
        cols = np.concatenate([poly, np.zeros(pad, dtype=object)]).reshape(-1, i)
        poly = np.cumsum(cols, axis=0).reshape(-1)[:size]
    return tuple(int(v) for v in poly)


def _cdf(n: int, m: int) -> list[float]:
    """P(U <= u) for u = 0..n*m under the null hypothesis (exact)."""
    counts = _u_counts(n, m)
    total = math.comb(n + m, n)
    out, acc = [], 0
    for c in counts:
        acc += c
        out.append(acc / total)
    return out


def _normal_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def _z(confidence: float) -> float:
    if abs(confidence - 0.95) < 1e-12:
        return _Z_975
    lo, hi = 0.0, 10.0  # bisection on the normal CDF: no scipy
    target = 1 - (1 - confidence) / 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _normal_cdf(mid) < target else (lo, mid)
    return (lo + hi) / 2


def shift(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> Shift:
    """The shift of B against A (B - A) with its `confidence` interval and the two-sided
    Mann-Whitney p-value. Needs at least one value on each side."""
    import numpy as np

    xa = np.asarray(a, dtype=float)
    xb = np.asarray(b, dtype=float)
    n, m = len(xa), len(xb)
    if not n or not m:
        raise ValueError("shift needs at least one value on each side")
    diffs = np.sort((xb[None, :] - xa[:, None]).ravel())
    estimate = float(np.median(diffs))
    u = float(np.sum(diffs > 0) + 0.5 * np.sum(diffs == 0))  # pairs where B is the larger
    alpha = 1 - confidence
    exact = n * m <= EXACT_LIMIT
    if exact:
        cdf = _cdf(n, m)
        min_p = min(1.0, 2 * cdf[0])
        lo_u, hi_u = math.floor(u), math.ceil(u)
        p = min(1.0, 2 * min(cdf[min(lo_u, n * m)], 1 - (cdf[hi_u - 1] if hi_u > 0 else 0.0)))
        # the largest k with P(U <= k) <= alpha / 2; none when even U = 0 is likelier
        k = max((i for i, c in enumerate(cdf) if c <= alpha / 2 + 1e-12), default=-1)
    else:
        mean, sd = n * m / 2, math.sqrt(n * m * (n + m + 1) / 12)
        min_p = min(1.0, 2 * _normal_cdf((0 - mean) / sd))
        p = min(1.0, 2 * _normal_cdf(-abs(u - mean) / sd))
        k = math.floor(mean - _z(confidence) * sd) - 1
    ci = None if k < 0 else (float(diffs[k]), float(diffs[n * m - 1 - k]))
    return Shift(estimate, ci, confidence, p, u, n, m, min_p, exact)
