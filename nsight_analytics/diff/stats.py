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
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

# Above this many pairs (n * m) the normal approximation replaces the exact distribution.
EXACT_LIMIT = 40_000
_Z_975 = 1.959963984540054  # standard normal quantile for a 95% two-sided interval
# The chance that a capture of `steps_needed` steps resolves a change like the one seen.
POWER = 0.8


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


def _quantile(p: float) -> float:
    """The standard normal quantile at `p` (bisection on the CDF: no scipy)."""
    lo, hi = -10.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _normal_cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def superiority(s: Shift) -> float:
    """P(a value of B exceeds a value of A), ties counted half: U / (n m). 0.5 is no change."""
    return s.u / (s.n_a * s.n_b)


def steps_needed(
    a: Sequence[float],
    b: Sequence[float],
    s: Shift,
    floor: float,
    power: float = POWER,
) -> int | None:
    """Steps a side for the test to resolve a change like this one, at this spread.

    A shift of at least `floor` (in the samples' unit) is to be told from no change: Noether's
    sample size for the Mann-Whitney test, from the observed P(B > A) (`superiority`, which
    carries the spread and the outliers: a third of B's steps far slower than A's weakens a
    large median shift), for `power` at the shift's confidence. A smaller shift is to be told
    from the noise floor: the interval must fit between the shift and the floor (at least half
    the floor), and the Hodges-Lehmann estimate's spread is about pi/3 sigma^2 (1/n + 1/m) for
    steps of standard deviation sigma (pooled; the exact interval of a few steps is their whole
    range, so its width says little about more steps). None when no number of steps would (B
    above A exactly as often as below), or without two steps on a side to measure a spread."""
    if abs(s.estimate) >= floor:
        p = superiority(s)
        if abs(p - 0.5) < 1e-9:
            return None
        z = _z(s.confidence) + _quantile(power)
        total = z**2 / (3 * (p - 0.5) ** 2)  # Noether (1987), equal sides
        return max(4, math.ceil(total / 2))
    sigma = pooled_sd(a, b)
    if sigma is None or floor <= 0:
        return None
    target = max(floor - abs(s.estimate), floor / 2)
    return max(4, math.ceil(2 * (math.pi / 3) * (_z(s.confidence) * sigma / target) ** 2))


def pooled_sd(a: Sequence[float], b: Sequence[float]) -> float | None:
    """The steps' standard deviation, pooled over the sides that have two steps or more."""
    spreads = [statistics.variance(x) for x in (a, b) if len(x) > 1]
    return math.sqrt(statistics.fmean(spreads)) if spreads else None


def slow_outliers(xs: Sequence[float]) -> list[int]:
    """Positions of values far above the rest: beyond the median by more than five scaled
    median absolute deviations and a quarter of the median (a slow step, not jitter)."""
    if len(xs) < 3:
        return []
    med = statistics.median(xs)
    mad = 1.4826 * statistics.median(abs(x - med) for x in xs)
    limit = med + max(5 * mad, 0.25 * abs(med))
    return [i for i, x in enumerate(xs) if x > limit]
