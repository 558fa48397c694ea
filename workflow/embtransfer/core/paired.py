"""Paired comparisons of two methods over the same items (questions or tokens).

Two methods scored on the same items differ by less noise than two independent samples:
the item's difficulty cancels. So the report compares methods item by item:

* :func:`mcnemar` for 0/1 outcomes (a question answered, a translation retrieved): the exact
  two-sided McNemar test, a binomial test on the items where exactly one method is right;
* :func:`paired_bootstrap` for continuous scores (cosine to the oracle row): the mean
  difference over the standard deviation of its seeded bootstrap resamples, and the normal
  distribution's two-sided tail there (the share of resamples past zero cannot go below
  1 / samples, far above the corrected threshold below);
* :func:`difference` the mean difference with its paired standard error (the standard
  deviation of the per-item differences over sqrt(n)): "k standard errors of the difference";
* :func:`ratio_se` and :func:`paired_ratio` for a ratio of sums over the items (bits per
  byte: the items' summed losses over their summed bytes): the standard error by the delta
  method, the p-value by a paired bootstrap that recomputes the same difference of ratios
  on each resample (the ± and the p are of one statistic).

The report decides every test with one rule, in one place
(:func:`embtransfer.report.comparisons.decide`): the Holm-Bonferroni correction at
family-wise level :data:`FAMILY_ALPHA` over the family of every paired test one table
reports. A difference that clears it is called a difference; any other pair of methods is
"not apart".
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np

#: The family-wise level of the report's paired tests: the chance that a table (or its
#: findings) calls any one of its pairs apart when none is stays below it.
FAMILY_ALPHA = 0.001
#: How the family's p-values are corrected for their number (report.comparisons.holm).
CORRECTION = "Holm-Bonferroni"
BOOTSTRAP_SAMPLES = 2000


@dataclass(frozen=True)
class Comparison:
    diff: float  # mean of a - b
    se: float  # paired standard error of the difference
    p: float  # two-sided p-value of the paired test
    test: str  # "mcnemar" | "bootstrap"

    @property
    def z(self) -> float:
        """The difference in standard errors of the difference (inf when they always agree
        in one direction)."""
        if self.se == 0:
            return 0.0 if self.diff == 0 else math.copysign(math.inf, self.diff)
        return self.diff / self.se

    @property
    def clears(self) -> bool:
        """Whether the difference clears the test alone (a family of one)."""
        return self.p < FAMILY_ALPHA


def normal_p(z: float) -> float:
    """Two-sided tail of the standard normal beyond ``z``."""
    return math.erfc(abs(z) / math.sqrt(2)) if not math.isinf(z) else 0.0


def derived_seed(*key: object) -> int:
    """A seed of its own for each comparison (``key``: its setting, method and the run's
    seed), the same in every run and process."""
    return zlib.crc32(repr(key).encode())


def _pair(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired scores must be two vectors of one length, got {a.shape} "
                         f"and {b.shape}")
    if a.size < 2:
        raise ValueError("a paired comparison needs at least two items")
    return a, b


def difference(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(mean(a - b), its paired standard error)."""
    a, b = _pair(a, b)
    d = a - b
    return float(d.mean()), float(d.std(ddof=1) / math.sqrt(d.size))


def binomial_two_sided(k: int, n: int) -> float:
    """P(X <= min(k, n-k)) + P(X >= max(k, n-k)) for X ~ Binomial(n, 1/2), capped at 1."""
    if n == 0:
        return 1.0
    low = min(k, n - k)
    tail = sum(math.comb(n, i) for i in range(low + 1)) / 2**n
    return min(1.0, 2 * tail)


def binomial_upper_tail(hits: int, n: int, p: float) -> float:
    """P(X >= hits) for X ~ Binomial(n, p)."""
    if hits <= 0:
        return 1.0
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    logs = [
        math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
        + i * math.log(p) + (n - i) * math.log1p(-p)
        for i in range(hits, n + 1)
    ]  # fmt: skip
    top = max(logs)
    return min(1.0, math.exp(top) * math.fsum(math.exp(v - top) for v in logs))


def binomial_test(hits: int, n: int, p: float) -> float:
    """Two-sided exact test of ``hits`` of ``n`` against the rate ``p``: twice the smaller
    tail, capped at 1 (a method's hits against a random ranking's chance)."""
    if n == 0:
        return 1.0
    upper = binomial_upper_tail(hits, n, p)
    lower = 1.0 - binomial_upper_tail(hits + 1, n, p) if hits < n else 1.0
    return min(1.0, 2 * min(upper, lower))


def mcnemar(a: np.ndarray, b: np.ndarray) -> Comparison:
    """Exact McNemar test of two 0/1 outcome vectors over the same items."""
    a, b = _pair(a, b)
    if not np.isin(a, (0, 1)).all() or not np.isin(b, (0, 1)).all():
        raise ValueError("McNemar's test takes 0/1 outcomes")
    only_a = int(((a == 1) & (b == 0)).sum())
    only_b = int(((a == 0) & (b == 1)).sum())
    diff, se = difference(a, b)
    return Comparison(diff, se, binomial_two_sided(only_a, only_a + only_b), "mcnemar")


def _resampled_sums(columns: np.ndarray, seed: int, samples: int) -> np.ndarray:
    """Each column's sum over each of ``samples`` bootstrap resamples of the items (drawn with
    replacement, one draw for every column, from a generator seeded with ``seed``):
    ``columns`` is (k, items), the result (samples, k). Resamples are drawn 256 at a time, so
    memory stays at 256 x items whatever ``samples`` is."""
    rng = np.random.default_rng(seed)
    n = columns.shape[1]
    sums = np.empty((samples, columns.shape[0]))
    for start in range(0, samples, 256):
        idx = rng.integers(0, n, size=(min(256, samples - start), n))
        # a column at a time: one (k, 256, items) gather is an order of magnitude slower
        for k, column in enumerate(columns):
            sums[start : start + idx.shape[0], k] = column[idx].sum(axis=1)
    return sums


def _bootstrap_p(diff: float, resampled: np.ndarray) -> float:
    """The normal two-sided tail of ``diff`` over the standard deviation of its resampled
    values (0 when every resample agrees exactly and the difference is not 0)."""
    spread = float(resampled.std(ddof=1))
    z = diff / spread if spread > 0 else math.copysign(math.inf, diff) if diff else 0.0
    return normal_p(z)


def paired_bootstrap(a: np.ndarray, b: np.ndarray, seed: int,
                     samples: int = BOOTSTRAP_SAMPLES) -> Comparison:
    """Paired bootstrap of mean(a - b), from a generator seeded with ``seed``: p is the
    normal two-sided tail of mean(a - b) over the standard deviation of the resampled
    means (0 when every resample agrees exactly and the difference is not 0)."""
    a, b = _pair(a, b)
    d = a - b
    if not d.any():
        return Comparison(0.0, 0.0, 1.0, "bootstrap")
    diff, se = difference(a, b)
    means = _resampled_sums(d[np.newaxis], seed, samples)[:, 0] / d.size
    return Comparison(diff, se, _bootstrap_p(diff, means), "bootstrap")


def _ratio_terms(y: np.ndarray, x: np.ndarray) -> tuple[float, float]:
    """(sum(y) / sum(x), its delta-method standard error over the items)."""
    y, x = _pair(y, x)
    total = x.sum()
    if total <= 0:
        raise ValueError("a ratio of sums needs a positive denominator")
    ratio = y.sum() / total
    # the ratio's linearisation: each item's residual from the line y = ratio * x
    residual = y - ratio * x
    se = math.sqrt(y.size / (y.size - 1) * float((residual**2).sum())) / total
    return float(ratio), se


def ratio_se(y: np.ndarray, x: np.ndarray) -> float:
    """Delta-method standard error of the ratio estimator sum(y) / sum(x) over the items."""
    return _ratio_terms(y, x)[1]


def paired_ratio(a: np.ndarray, b: np.ndarray, x: np.ndarray, seed: int,
                 samples: int = BOOTSTRAP_SAMPLES) -> Comparison:
    """sum(a) / sum(x) - sum(b) / sum(x) over the same items with one denominator ``x`` (two
    methods' losses on the same documents, ``x`` their bytes): the difference, its
    delta-method standard error, and the p-value of a paired bootstrap of that same
    statistic: each resample of the items (from a generator seeded with ``seed``) recomputes
    sum(a - b) / sum(x) over the items it drew, and p is the normal two-sided tail of the
    difference over the resampled differences' standard deviation. So the ± and the p speak
    of one statistic, each item weighed by its denominator (a document by its bytes)."""
    a, b = _pair(a, b)
    d = a - b
    diff, se = _ratio_terms(d, x)
    if not d.any():
        return Comparison(0.0, 0.0, 1.0, "bootstrap")
    sums = _resampled_sums(np.stack([d, np.asarray(x, np.float64)]), seed, samples)
    drawn = sums[:, 1] > 0  # a resample of only empty items has no ratio
    resampled = sums[drawn, 0] / sums[drawn, 1]
    return Comparison(diff, se, _bootstrap_p(diff, resampled), "bootstrap")
