"""The report's spine: every paired comparison of the run in one long table.

Each table module hands over per-item scores (per token, document or question) of the
methods of one setting and metric (:func:`compare_setting`), or a test it made against a
fixed baseline (:func:`given_test`). Here each method is summarised (value, standard error,
rank among the competing methods: the method catalog's :func:`role` shows the oracle and the
source model but never ranks them); each competing method is compared with its setting's
best, Random and SALT by the metric's test (:data:`METRICS`); and every test is decided by
one rule (:func:`decide`, the only call of :func:`holm`). Every mark, verdict and finding
of the report reads the decided table (``comparisons.csv``) and the summaries.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from embtransfer.core import paired
from embtransfer.transfer.method_catalog import COMPETING_ROLES, RANDOM, SALT, role, start_of

#: What identifies a setting and metric; a family is one table's tests.
KEYS = ["family", "stage", "lang", "source", "target", "side", "split", "variant", "metric"]
TEST_COLUMNS = [*KEYS, "method", "versus", "other", "n", "diff", "se", "p", "test"]
SUMMARY_COLUMNS = [*KEYS, "method", "role", "n", "value", "se", "rank", "chance", "flags"]


@dataclass(frozen=True)
class Metric:
    """How a metric is shown and tested: its label, direction, digits and display scale
    (100: a 0/1 score shown in percent), and its paired test (``ratio``: bits per byte over
    one denominator per item; ``mcnemar``: 0/1 scores; ``bootstrap``: continuous scores;
    ``auto``: McNemar where both methods' scores are 0/1, else the bootstrap; ``given``: a
    test against chance made elsewhere)."""

    label: str
    higher_is_better: bool = True
    digits: int = 4
    scale: float = 1.0
    test: str = "auto"


METRICS = {
    "bits_per_byte": Metric("bits per byte", False, 4, 1.0, "ratio"),
    "p_at_1": Metric("P@1", True, 1, 100.0, "mcnemar"),
    "p_at_10": Metric("P@10", True, 1, 100.0, "mcnemar"),
    "cos_oracle": Metric("cos to oracle", True, 3, 1.0, "bootstrap"),
    "cos_centred": Metric("centred cos", True, 3, 1.0, "bootstrap"),
    # the held-out shared tokens' (embtransfer.evaluation.heldout_rows)
    "mrr": Metric("MRR", True, 3, 1.0, "bootstrap"),
    "contrast": Metric("contrast", True, 3, 1.0, "bootstrap"),
    "span_probe": Metric("span probe z", True, 1, 1.0, "given"),
    "class_probe": Metric("class probe z", True, 1, 1.0, "given"),
    "bli_p_at_10": Metric("BLI P@10", True, 1, 1.0, "given"),
}


def metric_spec(name: str) -> Metric:
    """The spec of ``name``; an lm-eval score not listed (per-question scores in [0, 1],
    shown in percent as the paper tables show them) is higher-is-better, tested by McNemar
    where 0/1 and by the bootstrap otherwise."""
    return METRICS.get(name, Metric(name, digits=1, scale=100.0))


def setting_key(setting: dict[str, Any]) -> dict[str, Any]:
    """``setting`` with every key of :data:`KEYS` (an absent one is the empty string)."""
    return {key: setting.get(key) if setting.get(key) is not None else "" for key in KEYS}


def _test(metric: Metric, a: np.ndarray, b: np.ndarray, seed: int,
          denominator: np.ndarray | None) -> paired.Comparison:
    if metric.test == "ratio":
        return paired.paired_ratio(a, b, denominator, seed)
    binary = np.isin(a, (0, 1)).all() and np.isin(b, (0, 1)).all()
    if metric.test == "mcnemar" or (metric.test == "auto" and binary):
        return paired.mcnemar(a, b)
    return paired.paired_bootstrap(a, b, seed)


def _value(metric: Metric, scores: np.ndarray, denominator: np.ndarray | None
           ) -> tuple[float, float]:
    if metric.test == "ratio":
        return float(scores.sum() / denominator.sum()), paired.ratio_se(scores, denominator)
    se = float(scores.std(ddof=1) / math.sqrt(scores.size)) if scores.size > 1 else math.nan
    return metric.scale * float(scores.mean()), metric.scale * se


#: What names a checkpoint: the row check is of a transferred one, which every later stage's
#: checkpoint of the same four (LAPT's) is trained from.
CHECKPOINT = ("lang", "source", "target", "method")


def row_check_flag(check: dict[str, Any]) -> str:
    """The flag of a transferred checkpoint's row check
    (:func:`embtransfer.transfer.row_check.check_new_rows`): "N rows flagged" where it
    flags new rows (blown up or zero), else empty."""
    rows = int(check["flagged_rows"])
    return f"{rows} rows flagged" if rows else ""


def flagged_checkpoints(summaries: Iterable[dict[str, Any]]) -> dict[tuple[str, ...], str]:
    """The flag of every flagged checkpoint of the transfer stage's summary lines, by
    :data:`CHECKPOINT`."""
    return {tuple(line[k] for k in CHECKPOINT): line["flags"] for line in summaries
            if line["stage"] == "transfer" and line["flags"]}


def checkpoint_flags(flagged: dict[tuple[str, ...], str], setting: dict[str, Any]
                     ) -> dict[str, str]:
    """Each method's flag in ``setting`` (its stage, lang, source and target): the transferred
    checkpoint's own at the transfer stage, and at a later stage the rows it was trained
    from, since LAPT starts from those rows."""
    where = tuple(setting[k] for k in CHECKPOINT[:-1])
    later = setting["stage"] != "transfer"
    return {key[-1]: f"trained from flagged rows: {flag}" if later else flag
            for key, flag in flagged.items() if key[:-1] == where}


def compare_setting(setting: dict[str, Any], scores: dict[str, np.ndarray], seed: int,
                    denominator: np.ndarray | None = None, flags: dict[str, str] | None = None,
                    chance: float = math.nan
                    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(summary lines, test lines) of one setting and metric (``setting``: :data:`KEYS`).
    ``scores``: each method's per-item scores over the same items (for ``bits_per_byte`` the
    items' bits, ``denominator`` their bytes); ``flags``: a note per method, the row check's
    (:func:`checkpoint_flags`); ``chance``: what a ranking that ignores the rows scores
    (retrieval metrics).
    A setting ranks its methods only where two or more compete: a lone method is shown, not
    credited with a win. A flagged method (rows blown up or zero) is shown with its value
    and flag as the oracle is, never ranked or compared: its score says what broken rows
    did, not how its method places tokens, so it is no setting's best, no other method is
    tested against it, and it is tested against none. Tied values share a rank; the method
    the others are compared with as best is the first of the tied by name. A pair's test is
    seeded by the pair in either order, so its two lines (SALT against the best and the
    best against SALT) carry one p."""
    key = setting_key(setting)
    metric = metric_spec(key["metric"])
    flags = {m: flag for m, flag in (flags or {}).items() if flag}
    arrays = {m: np.asarray(s, np.float64) for m, s in scores.items()}
    sizes = {m: a.size for m, a in arrays.items()}
    if len(set(sizes.values())) > 1:
        raise ValueError(f"{key}: the methods were scored on different items ({sizes})")
    stats = {m: _value(metric, a, denominator) for m, a in arrays.items()}
    sign = 1 if metric.higher_is_better else -1
    competing = sorted((m for m in scores if role(m) in COMPETING_ROLES and m not in flags),
                       key=lambda m: (-sign * stats[m][0], m))
    best = competing[0] if len(competing) >= 2 else None
    # tied values share a rank (every method at 0 is first); the best is the first by name
    rank = {m: 1 + sum(sign * (stats[o][0] - stats[m][0]) > 0 for o in competing)
            for m in competing}
    summaries = [key | {"method": m, "role": role(m), "n": sizes[m], "value": stats[m][0],
                        "se": stats[m][1], "rank": rank[m] if best and m in competing else math.nan,
                        "chance": chance, "flags": flags.get(m, "")} for m in scores]
    tests = []
    for method in competing if best else []:
        start = (start_of(method) or (None,))[0]
        for versus, other in (("best", best), ("random", RANDOM), ("salt", SALT),
                              ("start", start)):
            if other == method or other not in competing:
                continue
            seeded = paired.derived_seed(tuple(key.values()), *sorted((method, other)), seed)
            test = _test(metric, arrays[method], arrays[other], seeded, denominator)
            scale = 1.0 if metric.test == "ratio" else metric.scale
            tests.append(key | {"method": method, "versus": versus, "other": other,
                                "n": sizes[method], "diff": scale * test.diff,
                                "se": scale * test.se, "p": test.p, "test": test.test})
    return summaries, tests


def given_test(setting: dict[str, Any], method: str, diff: float, se: float, p: float,
               test: str) -> dict[str, Any]:
    """A test of ``method`` against chance made elsewhere (a probe's z, a retrieval space's
    binomial test), as a line of the comparisons table."""
    return setting_key(setting) | {"method": method, "versus": "chance", "other": "chance",
                                   "n": math.nan, "diff": diff, "se": se, "p": p, "test": test}


def holm(pvalues: object, alpha: float = paired.FAMILY_ALPHA) -> np.ndarray:
    """Which tests of one family clear the Holm-Bonferroni correction at family-wise
    level ``alpha``: sorted ascending, the i-th p-value (from 0) must be below
    alpha / (m - i), and the first that is not stops every later one. NaN is no test (not
    counted in m, never clears)."""
    p = np.asarray(pvalues, np.float64).ravel()
    tested = np.flatnonzero(~np.isnan(p))
    order = tested[np.argsort(p[tested], kind="stable")]
    m = order.size
    below = p[order] < alpha / (m - np.arange(m))
    stop = int(np.argmin(below)) if not below.all() else m  # step-down
    clears = np.zeros(p.size, bool)
    clears[order[:stop]] = True
    return clears


def frame_of(lines: Iterable[dict[str, Any]], columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame(list(lines), columns=columns)


def pair_ids(tests: pd.DataFrame) -> pd.Series:
    """Which test each line is: its setting and metric and the two methods, in either order
    (SALT against the best and the best against SALT are one test)."""
    return pd.Series(["\t".join([*map(str, key), *sorted(map(str, pair))]) for key, pair in zip(
        tests[KEYS].itertuples(index=False), zip(tests["method"], tests["other"], strict=True),
        strict=True)], index=tests.index, dtype=object)


def decide(tests: pd.DataFrame, alpha: float = paired.FAMILY_ALPHA) -> pd.DataFrame:
    """The comparisons table: ``tests`` with ``clears`` (Holm over each family) and the
    ``relation`` of the method to the other (``better``, ``worse``, ``not apart``). A pair
    the table holds twice (SALT against the best, and the best against SALT; a method
    against Random where Random is also the best) is one test: it counts once in its
    family's m and is decided alike on both lines."""
    out = tests.reindex(columns=TEST_COLUMNS).reset_index(drop=True)
    pair = pair_ids(out)
    first = ~pair.duplicated()
    out["clears"] = False
    for _, index in out[first].groupby("family", sort=False).groups.items():
        out.loc[index, "clears"] = holm(out.loc[index, "p"], alpha)
    out["clears"] = pair.map(dict(zip(pair[first], out.loc[first, "clears"], strict=True)))
    higher = out["metric"].map(lambda m: metric_spec(m).higher_is_better).astype(bool)
    better = np.where(higher, out["diff"] > 0, out["diff"] < 0)
    out["relation"] = np.where(out["clears"].astype(bool),
                               np.where(better, "better", "worse"), "not apart")
    out["clears"] = out["clears"].astype(bool)
    return out


def detectable_discordant(threshold: float) -> int:
    """The fewest discordant items, all on one side, whose exact two-sided McNemar p-value
    is below ``threshold``: fewer can never clear it, however they fall."""
    if not 0 < threshold <= 1:
        raise ValueError(f"a p-value threshold lies in (0, 1], got {threshold}")
    d = 1
    while paired.binomial_two_sided(d, d) >= threshold:
        d += 1
    return d


def power(decided: pd.DataFrame, alpha: float = paired.FAMILY_ALPHA) -> pd.DataFrame:
    """Per setting and McNemar metric: ``detectable`` (the :func:`detectable_discordant` count
    at its family's strictest Holm step, alpha over the family's tests), the largest net
    difference in items of any of its tests, and ``powerless``: no test reaches it (a
    difference of fewer net items can never clear, whatever the discordant items)."""
    mc = decided[decided["test"] == "mcnemar"]
    if mc.empty:
        return pd.DataFrame(columns=[*KEYS, "n", "detectable", "largest", "powerless"])
    family_size = decided[~pair_ids(decided).duplicated()].groupby("family")["p"].count()
    scale = mc["metric"].map(lambda m: metric_spec(m).scale)
    net = np.rint((mc["diff"] / scale).abs() * mc["n"])
    frame = mc[KEYS].assign(n=mc["n"], net=net)
    out = frame.groupby(KEYS, sort=False).agg(n=("n", "max"), largest=("net", "max")).reset_index()
    out["detectable"] = [detectable_discordant(alpha / family_size[f]) for f in out["family"]]
    out["powerless"] = out["largest"] < out["detectable"]
    return out


def with_decisions(summaries: pd.DataFrame, decided: pd.DataFrame) -> pd.DataFrame:
    """The summaries with ``tied_best`` (the best, or not apart from it) and the relation to
    the best and to Random (empty where there is no test)."""
    out = summaries.reset_index(drop=True).copy()
    key = [*KEYS, "method"]
    for versus in ("best", "random"):
        rel = decided[decided["versus"] == versus][[*key, "relation"]]
        out = out.merge(rel.rename(columns={"relation": f"vs_{versus}"}), on=key, how="left")
        out[f"vs_{versus}"] = out[f"vs_{versus}"].fillna("")
    out["tied_best"] = (out["rank"] == 1) | ((out["vs_best"] == "not apart")
                                             & out["rank"].notna())
    return out


def lookup(decided: pd.DataFrame) -> dict[tuple, pd.Series]:
    """The decided tests by (:data:`KEYS`..., method, versus): where a table reads its marks."""
    return {(*(line[k] for k in KEYS), line["method"], line["versus"]): line
            for _, line in decided.iterrows()}


def compare_runs(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Two runs' comparisons tables merged test by test (by setting, metric, method and
    whom it is compared with by name): ``relation_a``, ``relation_b`` and ``agrees``, one line
    per test (:func:`pair_ids`). A test only one run made is left out."""
    key = [*KEYS, "method", "versus", "other"]
    merged = a[[*key, "relation"]].merge(b[[*key, "relation"]], on=key,
                                         suffixes=("_a", "_b"))
    merged["agrees"] = merged["relation_a"] == merged["relation_b"]
    # one line per test: a line that disagrees where the pair's two lines differ
    pair = pair_ids(merged)
    keep = merged.assign(_pair=pair).sort_values("agrees", kind="stable").drop_duplicates(
        "_pair").sort_index()
    return keep.drop(columns="_pair").reset_index(drop=True)
