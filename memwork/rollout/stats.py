"""The statistics of the canary judge: pure functions of samples, no I/O, no verdicts.

Each answers one question the judge asks of a metric:

* :func:`mann_whitney_p` -- did the target move in the bad direction (one-sided Mann-Whitney U)?
* :func:`smallest_attainable_p` -- can that test reach significance at all with these sample sizes
  (with 2 against 2 the smallest one-sided p is 1/6: "not significant" there is no evidence)?
* :func:`minimum_detectable_shift` -- the smallest shift the test detects with ``power`` at ``alpha``
  (Noether's sample-size formula, turned into a shift on the baseline's own spread)?
* :func:`hodges_lehmann` -- how large is the shift, with its distribution-free CI?
* :func:`quantile_bounds` -- exact, distribution-free confidence bounds on a quantile (p95, p99) from
  order statistics, so a tail is judged and not only the centre.
* :func:`bootstrap_mean_ci` -- a seeded bootstrap CI of a mean (agreement figures).

Comparisons against ``alpha`` go through :func:`at_most`, which tolerates floating-point noise: an
exact p of 1/20 computed as ``0.05000000000000001`` is still ``<= 0.05``.
"""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np

#: pairwise differences above this many are computed on a seeded subsample of each side
MAX_PAIRS = 4_000_000
BOOTSTRAP_RESAMPLES = 2000
SEED = 20261201
#: relative tolerance of :func:`at_most` (far below any p-value or share that matters)
REL_TOLERANCE = 1e-9


def alpha_of(confidence: float) -> float:
    """``1 - confidence`` computed in decimal: 0.95 gives exactly 0.05, not 0.05000000000000004."""
    return float(Decimal(1) - Decimal(repr(float(confidence))))


def at_most(value: float, limit: float) -> bool:
    """``value <= limit`` up to floating-point noise (relative :data:`REL_TOLERANCE`)."""
    return value <= limit + abs(limit) * REL_TOLERANCE


def _subsample(values: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    return rng.choice(values, size, replace=False) if values.size > size else values


def mann_whitney_p(baseline: list[float], target: list[float], bad_is_increase: bool) -> float:
    """One-sided p-value of "the target moved in the bad direction" (scipy's Mann-Whitney U)."""
    from scipy.stats import mannwhitneyu

    if len(set(baseline) | set(target)) == 1:  # every value the same: no evidence of any change
        return 1.0
    if bad_is_increase:
        return float(mannwhitneyu(target, baseline, alternative="greater").pvalue)
    return float(mannwhitneyu(target, baseline, alternative="less").pvalue)


def smallest_attainable_p(n_baseline: int, n_target: int) -> float:
    """The smallest one-sided p :func:`mann_whitney_p` can give with these sample sizes: the p of
    two samples completely apart (every target value beyond every baseline value), computed the same
    way (exact for small samples: ``1 / C(n + m, n)``)."""
    if min(n_baseline, n_target) < 1:
        return 1.0
    baseline = [float(i) for i in range(n_baseline)]
    target = [float(n_baseline + i) for i in range(n_target)]
    return mann_whitney_p(baseline, target, bad_is_increase=True)


def smallest_testable_size(alpha: float, limit: int = 1000) -> int:
    """The smallest n (on each side) at which :func:`smallest_attainable_p` is at most ``alpha``."""
    for n in range(1, limit + 1):
        if at_most(smallest_attainable_p(n, n), alpha):
            return n
    return limit + 1


def minimum_detectable_shift(baseline: list[float], n_target: int, alpha: float, power: float) -> float:
    """The smallest shift (in the baseline's units, >= 0) the one-sided Mann-Whitney test at ``alpha``
    detects with probability ``power`` against ``n_target`` values, for a target that is the baseline
    shifted (the Hodges-Lehmann model).

    Noether (1987): the test has that power when P(target > baseline) reaches
    ``theta = 1/2 + (z_(1-alpha) + z_power) / sqrt(12 c (1 - c) N)`` (N = n + m, c = m / N). The shift
    giving that theta is the theta-quantile of the baseline's own pairwise differences, since
    P(B' + d > B) = P(B - B' < d). ``inf`` when no shift can reach theta (too few values)."""
    from scipy.stats import norm

    n_baseline = len(baseline)
    total = n_baseline + n_target
    if n_baseline < 2 or n_target < 1:
        return math.inf
    share = n_target / total
    z = float(norm.ppf(1 - alpha) + norm.ppf(power))
    theta = 0.5 + z / math.sqrt(12 * share * (1 - share) * total)
    if theta >= 1:
        return math.inf
    rng = np.random.default_rng(SEED)
    values = _subsample(np.asarray(baseline, dtype=float), int(math.sqrt(MAX_PAIRS)), rng)
    diffs = np.subtract.outer(values, values)[~np.eye(values.size, dtype=bool)]
    return max(0.0, float(np.quantile(diffs, theta, method="inverted_cdf")))


def hodges_lehmann(
    baseline: list[float], target: list[float], confidence: float
) -> tuple[float, float, float]:
    """The Hodges-Lehmann shift (target - baseline) and its distribution-free confidence interval:
    the order statistics of the pairwise differences at the Mann-Whitney critical value (normal
    approximation, as in Bauer 1972)."""
    from scipy.stats import norm

    rng = np.random.default_rng(SEED)
    side = int(math.sqrt(MAX_PAIRS))
    b = np.asarray(baseline, dtype=float)
    t = np.asarray(target, dtype=float)
    if b.size * t.size > MAX_PAIRS:
        b, t = _subsample(b, side, rng), _subsample(t, side, rng)
    diffs = np.sort((t[:, None] - b[None, :]).ravel())
    n, m, total = t.size, b.size, diffs.size
    z = float(norm.ppf(1 - (1 - confidence) / 2))
    k = math.floor(total / 2 - z * math.sqrt(n * m * (n + m + 1) / 12.0))
    k = min(max(k, 0), (total - 1) // 2)
    return float(np.median(diffs)), float(diffs[k]), float(diffs[total - 1 - k])


def _binomial_cdf(n: int, q: float) -> np.ndarray:
    from scipy.stats import binom

    return np.asarray(binom.cdf(np.arange(n + 1), n, q), dtype=float)


def quantile_upper_bound(values: list[float], q: float, alpha: float) -> float | None:
    """A distribution-free upper confidence bound (level ``1 - alpha``) on the ``q``-quantile: the
    order statistic X_(k) with the smallest k such that P(Binomial(n, q) <= k - 1) >= 1 - alpha.
    None when even the largest value is not high enough (n too small)."""
    n = len(values)
    if n == 0:
        return None
    cdf = _binomial_cdf(n, q)
    reaching = np.nonzero(cdf[:n] >= 1 - alpha)[0]  # k - 1 in 0 .. n - 1
    if reaching.size == 0:
        return None
    return float(np.sort(np.asarray(values, dtype=float))[int(reaching[0])])


def quantile_lower_bound(values: list[float], q: float, alpha: float) -> float | None:
    """A distribution-free lower confidence bound (level ``1 - alpha``) on the ``q``-quantile: X_(j)
    with the largest j such that P(Binomial(n, q) <= j - 1) <= alpha. None when n is too small."""
    n = len(values)
    if n == 0:
        return None
    cdf = _binomial_cdf(n, q)
    below = np.nonzero(cdf[:n] <= alpha)[0]  # j - 1 in 0 .. n - 1
    if below.size == 0:
        return None
    return float(np.sort(np.asarray(values, dtype=float))[int(below[-1])])


def quantile_bounds(values: list[float], q: float, alpha: float) -> tuple[float | None, float | None]:
    """(lower, upper) one-sided bounds on the ``q``-quantile, each at level ``1 - alpha``."""
    return quantile_lower_bound(values, q, alpha), quantile_upper_bound(values, q, alpha)


def smallest_bounded_size(q: float, alpha: float) -> int:
    """The smallest n for which :func:`quantile_upper_bound` exists: ``q ** n <= alpha``."""
    return max(1, math.ceil(math.log(alpha) / math.log(q) - REL_TOLERANCE))


def sample_quantile(values: list[float], q: float) -> float:
    return float(np.quantile(np.asarray(values, dtype=float), q))


def bootstrap_mean_ci(values: list[float], confidence: float) -> tuple[float, float, float]:
    """Mean and seeded bootstrap percentile CI of the mean."""
    arr = np.asarray(values, dtype=float)
    mean = float(arr.mean())
    if np.all(arr == arr[0]):
        return mean, mean, mean
    rng = np.random.default_rng(SEED)
    means = np.empty(BOOTSTRAP_RESAMPLES)
    chunk = max(1, 2_000_000 // arr.size)
    for start in range(0, BOOTSTRAP_RESAMPLES, chunk):
        stop = min(start + chunk, BOOTSTRAP_RESAMPLES)
        means[start:stop] = rng.choice(arr, (stop - start, arr.size), replace=True).mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    return mean, float(np.percentile(means, tail)), float(np.percentile(means, 100 - tail))
