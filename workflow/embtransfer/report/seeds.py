"""Verdicts across seeds: one comparisons table from the tables of every seed of a run.

A run with several seeds (the config's ``seeds``, the first the primary) makes every
seed-dependent stage once per seed, and the report decides each seed's tests apart, each
family with its own Holm-Bonferroni correction (:func:`embtransfer.report.comparisons.decide`).
:func:`combine` reads them together: the primary's table, where a verdict stands only if it
holds in every seed that made its test, with how many seeds made each test, in how many it
held, and whether it lies near its threshold in any (:func:`borderline`); and the primary's
summaries with each value's range over the seeds. With one seed the table's decisions are
the primary's own, so a one-seed run reads as it always did.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pandas as pd

from embtransfer.core.paired import FAMILY_ALPHA
from embtransfer.report.comparisons import KEYS, metric_spec, pair_ids

#: What the consensus adds to a decided table, and the summaries' spread.
CONSENSUS_COLUMNS = ["seeds", "held", "borderline", "in_seeds"]
SPREAD_COLUMNS = ["seeds", "value_min", "value_max"]
NOT_APART = "not apart"
FLIPPED = {"better": "worse", "worse": "better", NOT_APART: NOT_APART}

_NORMAL = NormalDist()
_UP = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")
_DOWN = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def fraction(k: int, n: int) -> str:
    """``k`` of ``n`` as one compact mark: ²⁄₃."""
    return f"{k}".translate(_UP) + "⁄" + f"{n}".translate(_DOWN)


def several(decided: pd.DataFrame) -> bool:
    """Whether ``decided`` is a consensus over several seeds (:func:`combine`)."""
    return "seeds" in decided and len(decided) > 0 and int(decided["seeds"].max()) > 1


def primary_relation(test: pd.Series) -> str:
    """The relation the primary seed gave a consensus line that held in some seeds only
    (its consensus relation is "not apart"): read from its difference as
    :func:`embtransfer.report.comparisons.decide` reads it."""
    if metric_spec(str(test["metric"])).higher_is_better:
        return "better" if test["diff"] > 0 else "worse"
    return "better" if test["diff"] < 0 else "worse"


def z_of_p(p: float) -> float:
    """The normal quantile of a two-sided p-value: z with P(|Z| >= z) = p (inf at p = 0,
    0 at p >= 1, NaN for no test)."""
    if math.isnan(p):
        return math.nan
    if p <= 0:
        return math.inf
    return 0.0 if p >= 1 else -_NORMAL.inv_cdf(p / 2)


def holm_steps(decided: pd.DataFrame, alpha: float | None = None) -> pd.Series:
    """Each line's Holm step threshold, alpha / (m - i): i (from 0) is its pair's place among
    the m tested pairs of its family sorted by p (ties in table order), as
    :func:`embtransfer.report.comparisons.decide` sorts them; both lines of a pair share
    it. NaN where there is no test. ``alpha``: the table's (its ``attrs``) by default."""
    alpha = decided.attrs.get("alpha", FAMILY_ALPHA) if alpha is None else alpha
    pair = pair_ids(decided)
    first = decided[~pair.duplicated()]
    p = first["p"].astype(float)
    by_family = p.groupby(first["family"], sort=False)
    place = by_family.rank(method="first") - 1  # NaN stays NaN
    m = by_family.transform("count")
    step = alpha / (m - place)
    return pair.map(dict(zip(pair[first.index], step, strict=True))).astype(float)


def borderline(decided: pd.DataFrame, alpha: float | None = None) -> pd.Series:
    """Whether each test of one seed's decided table lies within one standard error of its
    decision threshold.

    The statistic is the normal quantile of the test's own p, z = Φ⁻¹(1 − p/2), for every
    kind of test: for the paired bootstrap (and the ratio's) it is exactly the difference
    over the bootstrap's standard error, for a probe's given z the z itself, and for
    McNemar's exact test and the binomial tests the normal z of the same tail. The threshold
    is the test's own Holm step (:func:`holm_steps`), z* = Φ⁻¹(1 − α_i/2) with
    α_i = alpha / (m − i); p < α_i exactly when z > z*. A test is borderline when
    |z − z*| < 1: one standard error, the unit of z, either side of the line. Not the
    ``diff`` over the ``se`` column: that is the plain paired standard error for McNemar
    and the delta method's for bits per byte, while their p come from the exact test and
    the bootstrap, so that ratio can sit on the other side of z* from the p that decided
    the test. A test without a p is never borderline; p = 0 (every resample agrees) is
    never borderline.
    """
    step = holm_steps(decided, alpha)
    z = decided["p"].astype(float).map(z_of_p)
    threshold = step.map(z_of_p)
    near = (z - threshold).abs() < 1
    return near.fillna(False).astype(bool)


def _sides(decided: pd.DataFrame) -> dict[str, tuple[dict[str, str], bool]]:
    """Per pair (:func:`pair_ids`): the relation from each of its two methods' side, and
    whether it is borderline."""
    near = borderline(decided)
    sides: dict[str, tuple[dict[str, str], bool]] = {}
    for pair, method, other, relation, close in zip(
            pair_ids(decided), decided["method"], decided["other"], decided["relation"], near,
            strict=True):
        side, was = sides.get(pair, ({}, False))
        side[str(method)], side[str(other)] = relation, FLIPPED.get(relation, relation)
        sides[pair] = side, was or bool(close)
    return sides


def combine(per_seed: list[tuple[int, pd.DataFrame, pd.DataFrame]]
            ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(consensus, summaries with spread, long) of ``per_seed``: each seed's (seed, decided
    table, summaries), the primary first.

    ``consensus`` is the primary's decided table (its lines, columns, attrs and diff, se
    and p) with ``seeds``: how many seeds made the test; ``held``: in how many of those it
    cleared with the primary's relation (0 where the primary's does not clear);
    ``borderline``: near its threshold in at least one of them (:func:`borderline`); and
    ``in_seeds``: "k of n" where it held in some seeds but not all (else empty). A test is
    matched across seeds by its setting, metric and two methods (:func:`pair_ids`), with
    the relation read from the line's own method, so the two lines of a pair (SALT against
    the best, the best against SALT) stay one test in every seed. ``clears`` stands only
    where the test cleared with one relation in every seed that made it, and ``relation``
    follows: a verdict that does not hold in every seed is "not apart".

    ``summaries``: the primary's, with ``seeds`` (how many seeds have the line, by
    :data:`KEYS` and method) and ``value_min``, ``value_max`` over them.
    ``long``: every seed's decided table under a leading ``seed`` column.
    """
    if not per_seed:
        raise ValueError("combine needs one seed's tables at least")
    seeds = [int(seed) for seed, _, _ in per_seed]
    if len(set(seeds)) < len(seeds):
        raise ValueError(f"a seed is given twice: {seeds}")
    primary = per_seed[0][1]
    sides = [_sides(decided) for _, decided, _ in per_seed]
    made, held, near = [], [], []
    for pair, method, relation in zip(pair_ids(primary), primary["method"],
                                      primary["relation"], strict=True):
        found = [table[pair] for table in sides if pair in table]
        made.append(len(found))
        held.append(0 if relation == NOT_APART else
                    sum(side[str(method)] == relation for side, _ in found))
        near.append(any(close for _, close in found))
    out = primary.copy()
    out.attrs = dict(primary.attrs)
    out["seeds"] = np.asarray(made, np.int64)
    out["held"] = np.asarray(held, np.int64)
    out["borderline"] = np.asarray(near, bool)
    every = (out["held"] > 0) & (out["held"] == out["seeds"])
    out["clears"] = out["clears"].astype(bool) & every
    out["relation"] = out["relation"].where(out["clears"], NOT_APART)
    out["in_seeds"] = [f"{h} of {n}" if 0 < h < n else ""
                       for h, n in zip(out["held"], out["seeds"], strict=True)]
    return out, spread(per_seed), long_table(per_seed)


def spread(per_seed: list[tuple[int, pd.DataFrame, pd.DataFrame]]) -> pd.DataFrame:
    """The primary's summaries with ``seeds``, ``value_min`` and ``value_max`` over every
    seed's line of the same :data:`KEYS` and method."""
    key = [*KEYS, "method"]
    values: dict[tuple, dict[int, float]] = {}
    for seed, _, summaries in per_seed:
        for line, value in zip(summaries[key].itertuples(index=False, name=None),
                               summaries["value"], strict=True):
            values.setdefault(line, {})[seed] = float(value)
    out = per_seed[0][2].copy()
    out.attrs = dict(per_seed[0][2].attrs)
    lines = [values[line] for line in out[key].itertuples(index=False, name=None)]
    out["seeds"] = np.asarray([len(v) for v in lines], np.int64)
    ranges = [np.asarray(list(v.values()), np.float64) for v in lines]
    # a seed without a value (NaN) widens no range
    out["value_min"] = [r[~np.isnan(r)].min() if (~np.isnan(r)).any() else math.nan
                        for r in ranges]
    out["value_max"] = [r[~np.isnan(r)].max() if (~np.isnan(r)).any() else math.nan
                        for r in ranges]
    return out


def long_table(per_seed: list[tuple[int, pd.DataFrame, pd.DataFrame]]) -> pd.DataFrame:
    """Every seed's decided table, one after another, under a leading ``seed`` column."""
    parts = [decided.assign(seed=int(seed))[["seed", *decided.columns]]
             for seed, decided, _ in per_seed]
    out = pd.concat(parts, ignore_index=True)
    out.attrs = dict(per_seed[0][1].attrs)
    return out
