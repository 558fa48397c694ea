"""The report's spine (embtransfer.report.comparisons) against slow, obviously correct
references on random inputs: the Holm correction, each setting's values, ranks and paired
tests, the decisions per family, the power of the McNemar tests, two runs merged, and the
marks of the per-setting tables (embtransfer.report.setting_tables)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from embtransfer.core.paired import (
    binomial_two_sided,
    derived_seed,
    mcnemar,
    paired_bootstrap,
    paired_ratio,
    ratio_se,
)
from embtransfer.report.comparisons import (
    KEYS,
    SUMMARY_COLUMNS,
    TEST_COLUMNS,
    compare_runs,
    compare_setting,
    decide,
    detectable_discordant,
    frame_of,
    holm,
    lookup,
    metric_spec,
    pair_ids,
    power,
    setting_key,
    with_decisions,
)
from embtransfer.report.setting_tables import MARKS, setting_table
from embtransfer.transfer.method_catalog import COMPETING_ROLES, role

SEED = 5


# --- Holm ------------------------------------------------------------------------------------


def _holm_brute_force(p: np.ndarray, alpha: float) -> np.ndarray:
    """Holm's adjusted p-values, max over j <= i of (m - j) p_(j), then below alpha."""
    tested = np.flatnonzero(~np.isnan(p))
    order = tested[np.argsort(p[tested], kind="stable")]
    m, running, clears = order.size, 0.0, np.zeros(p.size, bool)
    for j, i in enumerate(order):
        running = max(running, min(1.0, (m - j) * p[i]))
        clears[i] = running < alpha
    return clears


def test_holm_equals_the_adjusted_p_values_brute_force():
    rng = np.random.default_rng(11)
    for trial in range(300):
        p = rng.random(rng.integers(1, 30)) ** rng.uniform(1, 12)
        p[rng.random(p.size) < 0.2] = np.nan
        alpha = float(rng.choice([0.001, 0.01, 0.05]))
        assert (holm(p, alpha) == _holm_brute_force(p, alpha)).all(), trial
    # m = 2: the smaller p-value needs 0.001 / 2; a NaN is no test (m stays 2)
    assert holm([4e-4, 0.5]).tolist() == [True, False]
    assert holm([6e-4, 0.5]).tolist() == [False, False]
    assert holm([4e-4, np.nan, 0.5]).tolist() == [True, False, False]
    assert holm([]).tolist() == []


# --- one setting: values, ranks, tests ------------------------------------------------------


def _scores(rng: np.random.Generator, metric: str, methods: list[str], n: int
            ) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    """Per-item scores of ``methods`` for ``metric``, each method its own strength."""
    if metric == "bits_per_byte":
        n_bytes = rng.integers(20, 300, n).astype(float)
        base = n_bytes * rng.gamma(5.0, 0.3, n)
        return {m: base * rng.uniform(0.8, 1.6) + rng.normal(0, 2, n) for m in methods}, n_bytes
    if metric.startswith("p_at_") or metric == "Words acc":
        return {m: (rng.random(n) < rng.uniform(0.05, 0.7)).astype(float) for m in methods}, None
    return {m: rng.normal(rng.uniform(0, 0.4), 0.2, n) for m in methods}, None


def _expected_value(metric: str, s: np.ndarray, n_bytes: np.ndarray | None) -> tuple[float, float]:
    if metric == "bits_per_byte":
        return s.sum() / n_bytes.sum(), ratio_se(s, n_bytes)
    scale = 100.0 if metric.startswith("p_at_") or metric == "Words acc" else 1.0
    return scale * s.mean(), scale * s.std(ddof=1) / math.sqrt(s.size)


def _expected_test(metric: str, key: dict, method: str, other: str, a: np.ndarray,
                   b: np.ndarray, n_bytes: np.ndarray | None):
    seed = derived_seed(tuple(key.values()), *sorted((method, other)), SEED)
    if metric == "bits_per_byte":
        return paired_ratio(a, b, n_bytes, seed), 1.0
    if metric.startswith("p_at_"):
        return mcnemar(a, b), 100.0
    if metric == "Words acc":  # an lm-eval score of 0/1 per question: McNemar, in percent
        return mcnemar(a, b), 100.0
    return paired_bootstrap(a, b, seed), 1.0


METHOD_POOL = ["salt", "random", "omp", "omp_salt_k", "focus", "clp", "world_oracle",
               "source_model"]


@pytest.mark.parametrize("metric", ["bits_per_byte", "p_at_1", "p_at_10", "cos_oracle",
                                    "cos_centred", "Words acc"])
def test_a_settings_values_ranks_and_tests_equal_a_slow_reference(metric):
    rng = np.random.default_rng(len(metric))
    for trial in range(12):
        methods = [str(m) for m in rng.choice(METHOD_POOL, rng.integers(1, len(METHOD_POOL) + 1),
                                              replace=False)]
        n = int(rng.integers(5, 60))
        scores, n_bytes = _scores(rng, metric, methods, n)
        setting = {"family": "f", "stage": "transfer", "lang": "xx", "source": "src",
                   "target": f"t{trial}", "metric": metric}
        key = setting_key(setting)
        summaries, tests = compare_setting(setting, scores, SEED, n_bytes)
        spec = metric_spec(metric)
        sign = 1 if spec.higher_is_better else -1
        # values and standard errors, in the order of the scores
        assert [s["method"] for s in summaries] == methods
        values = {}
        for line in summaries:
            value, se = _expected_value(metric, scores[line["method"]], n_bytes)
            assert line["value"] == pytest.approx(value, rel=1e-12)
            assert line["se"] == pytest.approx(se, rel=1e-9)
            assert line["n"] == n and line["role"] == role(line["method"])
            assert {k: line[k] for k in KEYS} == key
            values[line["method"]] = line["value"]
        competing = [m for m in methods if role(m) in COMPETING_ROLES]
        ranked = len(competing) >= 2
        # ranks: one plus the competing methods strictly better; none for a lone method,
        # the oracle or the source model
        for line in summaries:
            m = line["method"]
            if ranked and m in competing:
                better = sum(sign * (values[o] - values[m]) > 0 for o in competing)
                assert line["rank"] == 1 + better
            else:
                assert math.isnan(line["rank"])
        # the best: the first by name of the rank-1 methods
        best = min((m for m in competing if sign * values[m] >= max(
            sign * values[o] for o in competing)), default=None) if ranked else None
        expected = []
        for m in competing if ranked else []:
            for versus, other in (("best", best), ("random", "random"), ("salt", "salt")):
                if other != m and other in scores:
                    expected.append((m, versus, other))
        made = [(t["method"], t["versus"], t["other"]) for t in tests]
        assert sorted(made) == sorted(expected) and len(set(made)) == len(made)
        for t in tests:
            a, b = scores[t["method"]], scores[t["other"]]
            direct, scale = _expected_test(metric, key, t["method"], t["other"], a, b, n_bytes)
            assert t["diff"] == pytest.approx(scale * direct.diff, rel=1e-12, abs=1e-15)
            assert t["se"] == pytest.approx(scale * direct.se, rel=1e-12, abs=1e-15)
            assert t["p"] == direct.p and t["test"] == direct.test and t["n"] == n
            assert {k: t[k] for k in KEYS} == key
        # the same seed, the same lines
        assert compare_setting(setting, scores, SEED, n_bytes) == (summaries, tests)


def test_tied_methods_share_a_rank_and_the_first_by_name_is_the_best():
    hits = np.r_[np.ones(20), np.zeros(20)]
    scores = {"omp": hits, "focus": hits[::-1].copy(), "clp": np.roll(hits, 3),
              "random": np.zeros(40), "world_oracle": np.ones(40),
              "source_model": np.ones(40)}
    summaries, tests = compare_setting({"family": "f", "metric": "p_at_1"}, scores, 0)
    rank = {s["method"]: s["rank"] for s in summaries}
    assert rank["omp"] == rank["focus"] == rank["clp"] == 1 and rank["random"] == 4
    assert math.isnan(rank["world_oracle"]) and math.isnan(rank["source_model"])
    best = {t["method"]: t["other"] for t in tests if t["versus"] == "best"}
    assert best == {"focus": "clp", "omp": "clp", "random": "clp"}
    tested = {t["method"] for t in tests} | {t["other"] for t in tests}
    assert not tested & {"world_oracle", "source_model"}
    # lower is better: every method at the same bits per byte is first
    n_bytes = np.full(10, 100.0)
    same = {m: np.full(10, 80.0) for m in ("salt", "omp", "random")}
    summaries, _ = compare_setting({"metric": "bits_per_byte"}, same, 0, n_bytes)
    assert [s["rank"] for s in summaries] == [1, 1, 1]


def test_a_lone_competing_method_is_shown_not_ranked_and_not_tested():
    scores = {"salt": np.r_[np.ones(5), np.zeros(5)], "world_oracle": np.ones(10),
              "source_model": np.ones(10)}
    summaries, tests = compare_setting({"metric": "p_at_10"}, scores, 0, chance=1.5,
                                       flags={"salt": "3 rows flagged"})
    assert tests == [] and all(math.isnan(s["rank"]) for s in summaries)
    salt = summaries[0]
    assert salt["value"] == 50.0 and salt["chance"] == 1.5 and salt["flags"] == "3 rows flagged"
    assert [s["flags"] for s in summaries[1:]] == ["", ""]


@pytest.mark.parametrize("metric", ["bits_per_byte", "cos_oracle", "p_at_10"])
def test_a_pair_tested_twice_in_a_setting_has_one_p(metric):
    """Focus is the best, so SALT against the best and the best against SALT are one pair,
    as are Random against the best and the best against Random, and SALT against Random
    and Random against SALT are one in every setting: each pair's two lines carry
    one p and one standard error, the difference with its sign flipped, whatever the order
    the methods come in."""
    rng = np.random.default_rng(23)
    scores, n_bytes = _scores(rng, metric, ["salt", "random", "omp", "focus"], 200)
    better = np.ones(200) if metric == "p_at_10" else None
    if better is not None:  # P@10: focus retrieves every token, the others some
        scores["focus"] = better
    else:  # lower bits per byte and higher cosines: focus far ahead of every other method
        scores["focus"] = (scores["random"] * 0.5 if metric == "bits_per_byte"
                           else scores["random"] + 1.0)
    setting = {"family": "f", "stage": "transfer", "lang": "xx", "source": "src",
               "target": "t", "metric": metric}
    for order in (["salt", "random", "omp", "focus"], ["focus", "omp", "random", "salt"]):
        _, tests = compare_setting(setting, {m: scores[m] for m in order}, SEED, n_bytes)
        lines = {(t["method"], t["other"]): t for t in tests}
        twice = [(m, o) for m, o in lines if m < o and (o, m) in lines]
        assert sorted(twice) == [("focus", "random"), ("focus", "salt"), ("random", "salt")]
        for m, o in twice:
            one, other = lines[(m, o)], lines[(o, m)]
            assert (one["p"], one["se"], one["diff"]) == (other["p"], other["se"], -other["diff"])
        if order[0] == "salt":
            first = tests
    assert sorted(map(str, first)) == sorted(map(str, tests))


def test_a_flagged_method_is_shown_but_neither_ranked_nor_compared():
    """SALT retrieves the most but the row check flags its checkpoint (rows blown up or
    zero): it keeps its value and its flag, takes no rank, is not the best and no method is
    tested against it; OMP, the best of the rest, is the one the others are compared with."""
    n = 200
    hits = {"salt": np.ones(n), "omp": np.r_[np.ones(150), np.zeros(50)],
            "focus": np.r_[np.ones(100), np.zeros(100)], "random": np.zeros(n),
            "world_oracle": np.ones(n)}
    setting = {"family": "alignment", "metric": "p_at_10"}
    summaries, tests = compare_setting(setting, hits, 0, flags={"salt": "12 rows flagged"})
    line = {s["method"]: s for s in summaries}
    assert line["salt"]["value"] == 100.0 and line["salt"]["flags"] == "12 rows flagged"
    assert math.isnan(line["salt"]["rank"]) and math.isnan(line["world_oracle"]["rank"])
    assert {m: line[m]["rank"] for m in ("omp", "focus", "random")} == {
        "omp": 1, "focus": 2, "random": 3}
    assert not [t for t in tests if "salt" in (t["method"], t["other"])]
    assert {(t["method"], t["versus"], t["other"]) for t in tests} == {
        ("focus", "best", "omp"), ("random", "best", "omp"), ("omp", "random", "random"),
        ("focus", "random", "random")}
    decided = decide(frame_of(tests, TEST_COLUMNS))
    marked = with_decisions(frame_of(summaries, SUMMARY_COLUMNS), decided).set_index("method")
    assert not marked.loc["salt", "tied_best"] and marked.loc["omp", "tied_best"]
    assert marked.loc["salt", "vs_best"] == marked.loc["salt", "vs_random"] == ""
    # one method left unflagged: nothing competes, nothing is ranked or tested
    alone = {m: hits[m] for m in ("salt", "omp", "world_oracle")}
    summaries, tests = compare_setting(setting, alone, 0, flags={"salt": "12 rows flagged"})
    assert tests == [] and all(math.isnan(s["rank"]) for s in summaries)


def test_a_flagged_method_is_listed_after_the_ranked_ones():
    """The per-setting tables show the oracle first, then the ranked methods, then the
    flagged checkpoints, each with its flag."""
    n = 100
    hits = {"salt": np.ones(n), "omp": np.r_[np.ones(60), np.zeros(40)],
            "random": np.zeros(n), "world_oracle": np.ones(n)}
    summaries, tests = compare_setting({"family": "alignment", "metric": "p_at_10"}, hits, 0,
                                       flags={"salt": "12 rows flagged"})
    table = setting_table(frame_of(summaries, SUMMARY_COLUMNS),
                          lookup(decide(frame_of(tests, TEST_COLUMNS))))
    rows = [line.split("|")[1].strip() for line in table.splitlines()[2:]]
    assert rows == ["world_oracle", "omp", "random", "salt"]
    salt = table.splitlines()[-1]
    assert "100.0 ± 0.0 |" in salt and salt.rstrip(" |").endswith("12 rows flagged")


def test_methods_scored_on_different_items_are_refused():
    with pytest.raises(ValueError, match="different items"):
        compare_setting({"metric": "p_at_1"}, {"salt": np.ones(4), "omp": np.ones(5)}, 0)


# --- decisions -------------------------------------------------------------------------------


_SETTINGS = itertools.count()


def _line(family: str, p: float, diff: float = 1.0, metric: str = "p_at_1",
          method: str = "omp", versus: str = "best", other: str = "salt", **keys) -> dict:
    """A test line; each in a setting of its own unless ``keys`` name one (a pair tested
    twice in one setting is one test: :func:`decide`)."""
    keys.setdefault("target", f"t{next(_SETTINGS)}")
    return setting_key({"family": family, "metric": metric, **keys}) | {
        "method": method, "versus": versus, "other": other, "n": 10, "diff": diff,
        "se": 0.1, "p": p, "test": "mcnemar"}


def test_each_family_is_corrected_on_its_own():
    """4e-4 clears Holm in a family of two (0.001 / 2) whatever another family holds; in one
    family with 10000 more tests it needs 0.001 / 10001 and does not."""
    small = [_line("a", 4e-4), _line("a", 0.5)]
    big = [_line("b", 0.5, target=str(i)) for i in range(10000)]
    decided = decide(frame_of(small + big, TEST_COLUMNS))
    assert decided["clears"].tolist()[:2] == [True, False]
    assert not decided["clears"].iloc[2:].any()
    pooled = decide(frame_of(small + [line | {"family": "a"} for line in big], TEST_COLUMNS))
    assert not pooled["clears"].any()
    # on random families: decide is holm over each family alone
    rng = np.random.default_rng(3)
    lines = [_line(str(rng.integers(0, 6)), float(rng.random() ** 8)) for _ in range(400)]
    frame = frame_of(lines, TEST_COLUMNS)
    decided = decide(frame, 0.01)
    for _, part in frame.groupby("family"):
        assert (decided.loc[part.index, "clears"].to_numpy()
                == holm(part["p"].to_numpy(), 0.01)).all()


def test_the_relation_follows_the_metrics_direction():
    lines = [_line("f", 1e-9, -0.1, "bits_per_byte"), _line("f", 1e-9, 0.1, "bits_per_byte"),
             _line("f", 1e-9, 5.0, "p_at_1"), _line("f", 1e-9, -5.0, "p_at_10"),
             _line("f", 1e-9, 0.2, "Words acc"), _line("f", 1e-9, -0.2, "cos_centred"),
             _line("f", 0.5, -0.1, "bits_per_byte"), _line("f", math.nan, 5.0, "p_at_1")]
    decided = decide(frame_of(lines, TEST_COLUMNS))
    assert decided["relation"].tolist() == ["better", "worse", "better", "worse", "better",
                                            "worse", "not apart", "not apart"]
    assert decided["clears"].dtype == bool
    assert list(decided.columns) == [*TEST_COLUMNS, "clears", "relation"]


def test_raising_alpha_never_unclears_a_test_and_moves_every_family_together():
    rng = np.random.default_rng(9)
    lines = [_line(str(rng.integers(0, 8)), float(rng.random() ** 6),
                   float(rng.normal()), target=str(i)) for i in range(500)]
    frame = frame_of(lines, TEST_COLUMNS)
    before = decide(frame, 1e-5)["clears"].to_numpy()
    for alpha in (1e-4, 1e-3, 1e-2, 0.05, 0.2):
        now = decide(frame, alpha)["clears"].to_numpy()
        assert (now >= before).all() and now.sum() >= before.sum()
        before = now
    # each family holds one p between 0.001 / 2 and 0.05 / 2: at 0.001 no mark, at 0.05 a
    # mark in every family (one level for all of them)
    tests, summaries = [], []
    for family in ("zeroshot", "alignment", "table1"):
        setting = {"family": family, "lang": "xx", "metric": "p_at_1"}
        tests += [_line(family, 0.01, 5.0, lang="xx", target="", versus="random",
                        other="random"),
                  _line(family, 0.9, -5.0, lang="xx", target="", method="random", other="omp")]
        summaries += [setting_key(setting) | {"method": m, "role": role(m), "n": 10,
                                              "value": v, "se": 1.0, "rank": r,
                                              "chance": math.nan, "flags": ""}
                      for m, v, r in (("omp", 50.0, 1), ("random", 45.0, 2))]
    frame = frame_of(tests, TEST_COLUMNS)
    summary = frame_of(summaries, SUMMARY_COLUMNS)
    strict, loose = decide(frame, 0.001), decide(frame, 0.05)
    for family, part in summary.groupby("family"):
        strict_mark = setting_table(part, lookup(strict)).split("\n")[2]
        loose_mark = setting_table(part, lookup(loose)).split("\n")[2]
        assert MARKS["better_random"] not in strict_mark, family
        assert MARKS["better_random"] in loose_mark, family


# --- what a McNemar test could detect ------------------------------------------------------


@pytest.mark.parametrize("alpha, m", [(0.001, 1), (0.001, 1000), (0.05, 30), (0.001, 4096),
                                      (0.5, 1)])
def test_the_detectable_difference_equals_a_search_with_scipys_binomial_test(alpha, m):
    from scipy.stats import binomtest

    threshold = alpha / m
    # d discordant items all one method's: the smallest d that clears
    d = next(d for d in range(1, 100) if binomtest(d, d, 0.5).pvalue < threshold)
    assert detectable_discordant(threshold) == d
    if (alpha, m) == (0.001, 1000):
        assert d == 21
    if m == 30:  # fewer net items never clear, however many are discordant both ways
        for net in range(d):
            assert all(binomial_two_sided(net + c, net + 2 * c) >= threshold
                       for c in range(100))
    with pytest.raises(ValueError, match="threshold"):
        detectable_discordant(0.0)


def test_power_equals_a_brute_force_over_each_settings_hits():
    from scipy.stats import binomtest

    rng = np.random.default_rng(21)
    tests, hits = [], {}
    for family in ("alignment", "table1"):
        for target in range(int(rng.integers(2, 6))):
            n = int(rng.integers(10, 300))
            methods = ["salt", "random", *rng.choice(["omp", "focus", "clp"], 2, replace=False)]
            scores = {m: (rng.random(n) < rng.uniform(0, 0.4)).astype(float) for m in methods}
            for metric in ("p_at_1", "cos_centred"):
                setting = {"family": family, "target": str(target), "split": "held_out",
                           "metric": metric}
                made = compare_setting(setting, scores, 0)[1]
                tests += made
                hits[tuple(setting_key(setting).values())] = (scores, made)
    decided = decide(frame_of(tests, TEST_COLUMNS))
    got = power(decided).set_index(KEYS)
    sizes = decided.groupby("family")["p"].count()
    expected = {}
    for key, (scores, made) in hits.items():
        if key[-1] != "p_at_1":
            continue
        threshold = 0.001 / sizes[key[0]]
        d = next(d for d in range(1, 200) if binomtest(d, d, 0.5).pvalue < threshold)
        largest = max(abs(scores[t["method"]].sum() - scores[t["other"]].sum()) for t in made)
        expected[key] = (d, largest, largest < d)
    assert set(got.index) == set(expected)
    for key, (d, largest, powerless) in expected.items():
        line = got.loc[key]
        assert (line["detectable"], line["largest"], line["powerless"]) == (d, largest, powerless)
    assert {v[2] for v in expected.values()} == {True, False}  # both kinds in the example
    assert power(decided[decided["test"] != "mcnemar"]).empty


# --- two runs --------------------------------------------------------------------------------


def _random_run(seed: int, best: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(summaries, decided) of four alignment settings of random hits; ``best``: the method
    that retrieves most in each."""
    rng = np.random.default_rng(seed)
    summaries, tests = [], []
    for target in range(4):
        scores = {m: (rng.random(80) < (0.95 if m == best else rng.uniform(0, 0.7))
                      ).astype(float) for m in ("salt", "random", "omp", "focus", "world_oracle")}
        lines, made = compare_setting({"family": "alignment", "target": str(target),
                                       "metric": "p_at_10"}, scores, 0)
        summaries += lines
        tests += made
    return frame_of(summaries, SUMMARY_COLUMNS), decide(frame_of(tests, TEST_COLUMNS))


def test_compare_runs_agrees_with_itself_and_flags_a_flipped_relation():
    a = _random_run(4, best="omp")[1]
    same = compare_runs(a, a.copy())
    assert len(same) == pair_ids(a).nunique() and same["agrees"].all()
    b = a.copy()
    flip = int(np.flatnonzero(b["relation"] != "not apart")[0])
    b.loc[flip, "relation"] = {"better": "worse", "worse": "better"}[b.loc[flip, "relation"]]
    b = b.drop(index=len(b) - 1)  # a test only run A made: left out
    merged = compare_runs(a, b)
    assert len(merged) == len(set(pair_ids(a)) & set(pair_ids(b)))
    differ = merged[~merged["agrees"]]
    assert len(differ) == 1
    assert (differ.iloc[0]["method"], differ.iloc[0]["other"]) == (
        a.loc[flip, "method"], a.loc[flip, "other"])
    assert differ.iloc[0]["relation_a"] == a.loc[flip, "relation"]


# --- the per-setting tables' marks -----------------------------------------------------------


def _parse_marks(cell: str) -> str:
    """The marks at a cell's end (after the value, its error and rank)."""
    marks = ""
    for char in reversed(cell):
        if char not in MARKS.values():
            break
        marks = char + marks
    return marks


def test_the_setting_tables_marks_are_the_decided_rows():
    rng = np.random.default_rng(17)
    summaries, tests = [], []
    for target in range(5):
        n = 120
        methods = ["salt", "random", "omp", "focus", "clp", "world_oracle"]
        strength = {m: rng.uniform(0.02, 0.6) for m in methods}
        strength["random"] = rng.choice([0.0, 0.3, 0.9])  # sometimes better than a method
        hits = {m: (rng.random(n) < s).astype(float) for m, s in strength.items()}
        n_bytes = rng.integers(50, 300, n).astype(float)
        bits = {m: n_bytes * (1 + 2 * (0.6 - strength[m])) + rng.normal(0, 20, n)
                for m in methods}
        for metric, scores, denominator in (("p_at_10", hits, None),
                                            ("bits_per_byte", bits, n_bytes)):
            setting = {"family": "alignment", "stage": "transfer", "lang": "xx",
                       "source": "src", "target": f"t{target}", "metric": metric}
            lines, made = compare_setting(setting, scores, 0, denominator)
            summaries += lines
            tests += made
    decided = decide(frame_of(tests, TEST_COLUMNS))
    summary = frame_of(summaries, SUMMARY_COLUMNS)
    relation = {(t.target, t.metric, t.method, t.versus): t.relation
                for t in decided.itertuples()}
    clears = {(t.target, t.metric, t.method, t.versus): t.clears for t in decided.itertuples()}
    seen = set()
    for target, group in summary.groupby("target"):
        text = setting_table(group, lookup(decided), details=True)
        header, _, *rows = text.split("\n")
        columns = [c.strip() for c in header.strip("|").split("|")]
        for row in rows:
            cells = dict(zip(columns, (c.strip() for c in row.strip("|").split("|")),
                             strict=True))
            method = cells["method"]
            for metric in ("p_at_10", "bits_per_byte"):
                label = metric_spec(metric).label
                line = group[(group["method"] == method) & (group["metric"] == metric)].iloc[0]
                want = MARKS["best"] if line["rank"] == 1 else ""
                vs_best = relation.get((target, metric, method, "best"))
                vs_random = relation.get((target, metric, method, "random"))
                want += MARKS["vs_best"] if vs_best == "worse" else ""
                want += {"better": MARKS["better_random"], "worse": MARKS["worse_random"]
                         }.get(vs_random, "")
                assert _parse_marks(cells[label]) == want, (target, method, metric)
                seen.update(want)
                for versus in ("best", "random", "salt"):
                    cell = cells.get(f"{label} vs {versus}", "")
                    if (target, metric, method, versus) in clears:
                        assert cell.endswith(" *") == clears[(target, metric, method, versus)]
                    else:
                        assert cell == ""
    # the example has every kind of mark
    assert seen == set(MARKS.values())


def test_with_decisions_marks_the_best_and_those_not_apart_from_it():
    summaries, decided = _random_run(6)
    merged = with_decisions(summaries, decided)
    rel = {(t.target, t.method, t.versus): t.relation for t in decided.itertuples()}
    for line in merged.itertuples():
        vs_best = rel.get((line.target, line.method, "best"), "")
        assert line.vs_best == vs_best and line.vs_random == rel.get(
            (line.target, line.method, "random"), "")
        assert line.tied_best == (line.rank == 1 or (vs_best == "not apart"
                                                     and not math.isnan(line.rank)))


# --- a pair tested twice where the best is SALT or Random -----------------------------------


def test_a_pair_held_twice_is_one_test_of_its_family():
    """Where a setting's best is SALT, a method's test against the best and its test against
    SALT are one pair: both lines stay (each table looks up its own), the family counts the
    pair once in Holm's m, and both lines are decided alike."""
    hits = np.r_[np.ones(30), np.zeros(10)]
    scores = {"salt": hits, "omp": np.roll(hits, 5) * (np.arange(40) % 3 > 0), "random":
              np.zeros(40)}
    _, tests = compare_setting({"family": "f", "metric": "p_at_1"}, scores, 0)
    decided = decide(frame_of(tests, TEST_COLUMNS), 0.05)
    pairs = [frozenset((t["method"], t["other"])) for t in tests]
    assert len(pairs) > len(set(pairs))  # SALT is best: omp's two lines name one pair
    unique = {pair: p for pair, p in zip(pairs, decided["p"], strict=True)}
    expected = dict(zip(unique, holm(list(unique.values()), 0.05), strict=True))
    assert decided["clears"].tolist() == [expected[pair] for pair in pairs]


def test_compare_runs_merges_each_test_with_itself_once():
    """A run compared with itself: one merged line per test, whoever is best."""
    a = _random_run(4, best="salt")[1]
    assert len(compare_runs(a, a.copy())) == pair_ids(a).nunique() < len(a)
