"""The bootstrap p-values of embtransfer.core.paired test the statistic the report shows: the
p of a paired test agrees with the normal tail of its difference over its standard error (the
± beside it), within the bootstrap's noise, on the z scale."""

from __future__ import annotations

import math

import numpy as np
import pytest

from embtransfer.core.paired import (
    Comparison,
    binomial_test,
    difference,
    paired_bootstrap,
    paired_ratio,
)

scipy_stats = pytest.importorskip("scipy.stats")

#: How far a bootstrap's z may stand from the delta method's, relative to it. The bootstrap's
#: spread from 2,000 resamples has a relative noise of about 1 / sqrt(2 * 2000) = 1.6 %, and
#: the two variance estimates differ in their higher-order terms by a few percent more.
Z_TOLERANCE = 0.08


def z_of(test: Comparison) -> float:
    """The |z| a two-sided normal p-value stands for."""
    return float(scipy_stats.norm.isf(test.p / 2))


def _documents(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(bits of one method per document, bytes per document): documents of very different
    lengths (log-normal, as text's are), each with its own difficulty."""
    x = np.rint(rng.lognormal(6.0, 1.0, size=n)) + 1
    return x * rng.gamma(6.0, 0.25, size=n), x


@pytest.mark.parametrize("seed", range(8))
def test_paired_ratios_p_is_the_delta_methods_z_within_the_bootstraps_noise(seed):
    """One method a steady share of bits per byte better on every document (z 5 to 30):
    the documents' unweighted mean difference is far fewer standard errors from 0, since
    the documents' lengths vary, so only a bootstrap of the ratio agrees with the ±."""
    rng = np.random.default_rng(seed)
    b, x = _documents(rng, 300)
    shift = rng.choice([-1, 1]) * rng.uniform(0.025, 0.12)
    a = b + x * rng.normal(shift, 0.05, size=x.size)
    test = paired_ratio(a, b, x, seed=seed)
    assert test.diff == pytest.approx(a.sum() / x.sum() - b.sum() / x.sum())
    assert abs(z_of(test) - abs(test.z)) <= Z_TOLERANCE * abs(test.z) + 0.05, (
        z_of(test), test.z)


@pytest.mark.parametrize("seed", range(8))
def test_paired_bootstraps_p_is_the_paired_z_within_the_bootstraps_noise(seed):
    rng = np.random.default_rng(100 + seed)
    b = rng.normal(0.3, 0.2, size=250)
    a = b + rng.normal(rng.uniform(-0.05, 0.05), 0.15, size=b.size)
    test = paired_bootstrap(a, b, seed=seed)
    assert (test.diff, test.se) == pytest.approx(difference(a, b))
    assert abs(z_of(test) - abs(test.z)) <= Z_TOLERANCE * abs(test.z) + 0.05, (
        z_of(test), test.z)


def test_paired_ratios_p_tests_the_byte_weighted_difference_not_the_documents_mean():
    """Few long documents where ``a`` wins carry the bytes; many short ones where ``b`` wins
    are most of the documents. Bits per byte weighs each document by its bytes, so ``a`` is
    far better per byte (z about -10), while the documents' unweighted mean difference is
    a third as many standard errors from 0 (z about -4): the p must be the former's."""
    rng = np.random.default_rng(0)
    long, short = np.rint(rng.lognormal(8, 1, 60)), rng.integers(10, 30, 1500).astype(float)
    x = np.r_[long, short]
    gain = -0.1 * long * (1 + rng.normal(0, 0.05, long.size))  # a: 0.1 bits per byte fewer
    loss = 0.03 * long.sum() / short.sum() * short * (1 + rng.normal(0, 0.3, short.size))
    b = x * rng.gamma(8, 0.25, x.size)
    a = b + np.r_[gain, loss]
    assert ((a - b) > 0).mean() > 0.95  # b wins 96 % of the documents
    test = paired_ratio(a, b, x, seed=3)
    assert test.diff < 0 and test.z < -8
    assert abs(z_of(test) - abs(test.z)) <= 2 * Z_TOLERANCE * abs(test.z)
    mean, se = difference(a, b)
    assert abs(mean / se) < abs(test.z) / 2  # what an unweighted bootstrap would report
    assert test.p < 1e-12


def test_a_pair_in_either_order_has_one_p_and_opposite_differences():
    rng = np.random.default_rng(4)
    b, x = _documents(rng, 80)
    a = b + x * rng.normal(0.02, 0.3, size=x.size)
    one, other = paired_ratio(a, b, x, seed=11), paired_ratio(b, a, x, seed=11)
    assert (one.p, one.se, one.diff) == (other.p, other.se, -other.diff)
    one, other = paired_bootstrap(a / x, b / x, seed=11), paired_bootstrap(b / x, a / x, seed=11)
    assert (one.p, one.se, one.diff) == (other.p, other.se, -other.diff)


def test_no_difference_is_p_one():
    rng = np.random.default_rng(5)
    b, x = _documents(rng, 20)
    assert paired_ratio(b, b.copy(), x, seed=1) == Comparison(0.0, 0.0, 1.0, "bootstrap")
    assert paired_bootstrap(b, b.copy(), seed=1) == Comparison(0.0, 0.0, 1.0, "bootstrap")


def test_a_difference_every_resample_agrees_on_is_p_zero():
    """Every document a fixed share of its bytes better: the ratio difference is the same in
    every resample (no spread), so it is no chance."""
    rng = np.random.default_rng(6)
    b, x = _documents(rng, 40)
    test = paired_ratio(b - 0.25 * x, b, x, seed=2)
    assert test.diff == pytest.approx(-0.25) and test.p == 0.0
    assert math.isclose(test.se, 0.0, abs_tol=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_the_binomial_test_against_a_rate_is_twice_the_smaller_exact_tail(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 60))
    p = float(rng.uniform(0.01, 0.6))
    pmf = [math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(n + 1)]
    for hits in range(n + 1):
        brute = min(1.0, 2 * min(sum(pmf[hits:]), sum(pmf[: hits + 1])))
        assert binomial_test(hits, n, p) == pytest.approx(brute, rel=1e-9, abs=1e-12)
