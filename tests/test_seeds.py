"""Verdicts across seeds (embtransfer.report.seeds): the consensus of several seeds' decided
tables is the primary's table where a verdict stands only if it holds in every seed that made
its test, recounted here test by test apart from the module; a test near its Holm threshold
is borderline by a rule recomputed here from scipy's normal quantiles; the findings' seed line
counts what the table holds; and one seed changes nothing a reader sees."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from embtransfer.report.comparisons import (
    KEYS,
    SUMMARY_COLUMNS,
    TEST_COLUMNS,
    compare_setting,
    decide,
    frame_of,
    lookup,
)
from embtransfer.report.findings import (
    REFERENCE_DIR,
    RUN_JSON,
    findings_markdown,
    read_conditioning,
    read_run,
    read_run_table,
    reference_text,
    seed_line,
)
from embtransfer.report.seeds import borderline, combine, fraction
from embtransfer.report.setting_tables import MARKS, setting_table

REPO = Path(__file__).resolve().parents[1]
ALPHA = 0.001
POOL = ("salt", "omp", "random", "focus", "clp", "lstsq")
FLIP = {"better": "worse", "worse": "better", "not apart": "not apart"}

# -- generated runs: one set of tests, each seed its own p and sign --------------------------------


def drawn_tests(rng: np.random.Generator) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(tests without p, summaries) of a few families and settings: each method against the
    setting's best, Random and SALT, so some pairs sit on two lines (SALT against the best and
    the best against SALT)."""
    tests, summaries = [], []
    for family, metric in (("alignment", "p_at_10"), ("zeroshot", "bits_per_byte"),
                           ("table1", "Facts acc")):
        for lang in ("aa", "bb", "cc")[: int(rng.integers(1, 4))]:
            methods = sorted(rng.choice(POOL, int(rng.integers(2, len(POOL) + 1)),
                                        replace=False))
            value = {m: float(rng.normal()) for m in methods}
            best = methods[int(rng.integers(len(methods)))]
            key = {k: "" for k in KEYS} | {"family": family, "stage": "transfer", "lang": lang,
                                           "source": "src", "target": f"plm_{lang}",
                                           "metric": metric}
            summaries += [key | {"method": m, "role": "method", "n": 50, "value": value[m],
                                 "se": 0.1, "rank": np.nan, "chance": np.nan, "flags": ""}
                          for m in methods]
            for m in methods:
                for versus, other in (("best", best), ("random", "random"), ("salt", "salt")):
                    if other != m and other in methods:
                        tests.append(key | {"method": m, "versus": versus, "other": other,
                                            "n": 50, "diff": value[m] - value[other],
                                            "se": 0.1, "p": np.nan, "test": "mcnemar"})
    return frame_of(tests, TEST_COLUMNS), frame_of(summaries, SUMMARY_COLUMNS)


def pairs_of(frame: pd.DataFrame) -> list[tuple]:
    """Each line's test, written apart from the module: its setting and its two methods."""
    return [(*line[KEYS], frozenset((line["method"], line["other"])))
            for _, line in frame.iterrows()]


def seed_run(tests: pd.DataFrame, summaries: pd.DataFrame, rng: np.random.Generator,
             flip: float = 0.1, drop: float = 0.05) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One seed's decided table and summaries: each test's p of the run drawn again about
    it (a few exactly 0 or tied), some tests' signs flipped and some tests not made."""
    tests = tests.copy()
    pairs = pairs_of(tests)
    unique = list(dict.fromkeys(pairs))
    base = dict(zip(pairs, tests["p"], strict=False))
    p = np.array([min(1.0, base[pair] * float(np.exp(rng.normal(0, 1.5)))) for pair in unique])
    p[rng.random(len(unique)) < 0.03] = 0.0
    p[rng.random(len(unique)) < 0.05] = 1e-6  # ties
    sign = np.where(rng.random(len(unique)) < flip, -1.0, 1.0)
    gone = {pair for pair in unique if rng.random() < drop}
    by_pair = dict(zip(unique, zip(p, sign, strict=True), strict=True))
    tests["p"] = [by_pair[pair][0] for pair in pairs]
    tests["diff"] = [d * by_pair[pair][1] for d, pair in zip(tests["diff"], pairs, strict=True)]
    tests = tests[[pair not in gone for pair in pairs]]
    decided = decide(tests, ALPHA)
    decided.attrs["alpha"] = ALPHA
    summaries = summaries.assign(value=summaries["value"] + rng.normal(0, 0.1, len(summaries)))
    return decided, summaries


def generated(seed: int, seeds: int = 3) -> list[tuple[int, pd.DataFrame, pd.DataFrame]]:
    """The seeds' tables of one drawn run: each test's p about one of the run's (far below
    any Holm step, near the steps, or anything), so that some tests clear in every seed,
    some in some and some in none."""
    rng = np.random.default_rng(seed)
    tests, summaries = drawn_tests(rng)
    pairs = pairs_of(tests)
    unique = list(dict.fromkeys(pairs))
    kind = rng.integers(0, 3, len(unique))
    p = np.where(kind == 0, 10 ** rng.uniform(-12, -8, len(unique)),
                 np.where(kind == 1, 10 ** rng.uniform(-6, -4, len(unique)),
                          rng.uniform(size=len(unique))))
    base = dict(zip(unique, p, strict=True))
    tests["p"] = [base[pair] for pair in pairs]
    return [(10 + s, *seed_run(tests, summaries, rng, drop=0.0 if s == 0 else 0.05))
            for s in range(seeds)]


# -- the rules, written apart ----------------------------------------------------------------------


def borderline_apart(decided: pd.DataFrame) -> list[bool]:
    """Per line: its pair's place among its family's tested pairs (sorted by p, ties in table
    order), the Holm step alpha / (m - i), and |z - z*| < 1 for the normal quantiles of p and
    of the step."""
    alpha = decided.attrs.get("alpha", ALPHA)
    pairs = pairs_of(decided)
    step: dict[tuple, float] = {}
    for family in dict.fromkeys(decided["family"]):
        seen: dict[tuple, float] = {}
        for pair, fam, p in zip(pairs, decided["family"], decided["p"], strict=True):
            if fam == family and pair not in seen:
                seen[pair] = p
        tested = [(p, order, pair) for order, (pair, p) in enumerate(seen.items())
                  if not np.isnan(p)]
        for i, (_, _, pair) in enumerate(sorted(tested)):
            step[pair] = alpha / (len(tested) - i)
    out = []
    for pair, p in zip(pairs, decided["p"], strict=True):
        if pair not in step:
            out.append(False)
            continue
        z = np.inf if p == 0 else norm.isf(p / 2)
        out.append(bool(abs(z - norm.isf(step[pair] / 2)) < 1))
    return out


def consensus_apart(per_seed) -> pd.DataFrame:
    """seeds, held, borderline, clears, relation and in_seeds of each primary line, by looking
    up its pair in every seed's table line by line."""
    primary = per_seed[0][1]
    tables = []
    for _, decided, _ in per_seed:
        near = borderline_apart(decided)
        table: dict[tuple, list] = {}
        for (_, line), pair, close in zip(decided.iterrows(), pairs_of(decided), near,
                                          strict=True):
            table.setdefault(pair, []).append((line["method"], line["relation"], close))
        tables.append(table)
    rows = []
    for (_, line), pair in zip(primary.iterrows(), pairs_of(primary), strict=True):
        made = held = 0
        near = False
        for table in tables:
            if pair not in table:
                continue
            made += 1
            method, relation, close = table[pair][0]
            mine = relation if method == line["method"] else FLIP[relation]
            held += line["relation"] != "not apart" and mine == line["relation"]
            near |= close
        clears = line["relation"] != "not apart" and held == made
        rows.append({"seeds": made, "held": held, "borderline": near, "clears": clears,
                     "relation": line["relation"] if clears else "not apart",
                     "in_seeds": f"{held} of {made}" if 0 < held < made else ""})
    return pd.DataFrame(rows, index=primary.index)


# -- the consensus -------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_the_consensus_is_the_rule_applied_test_by_test(seed):
    per_seed = generated(seed)
    consensus, _, _ = combine(per_seed)
    want = consensus_apart(per_seed)
    for column in want:
        assert consensus[column].tolist() == want[column].tolist(), column
    # the primary's numbers, line for line
    primary = per_seed[0][1]
    rest = [c for c in primary.columns if c not in ("clears", "relation")]
    pd.testing.assert_frame_equal(consensus[rest], primary[rest])
    assert consensus.attrs["alpha"] == ALPHA
    assert consensus["seeds"].dtype == np.int64 and consensus["held"].dtype == np.int64
    assert consensus["borderline"].dtype == bool


@pytest.mark.parametrize("seed", range(8))
def test_the_borderline_rule_is_the_holm_step_recomputed(seed):
    for _, decided, _ in generated(seed):
        assert borderline(decided).tolist() == borderline_apart(decided)


def test_borderline_is_one_standard_error_either_side_of_the_step():
    key = {k: "" for k in KEYS} | {"family": "f", "metric": "p_at_10"}
    z_star = norm.isf(ALPHA / 2)  # a family of one test: the step is alpha
    lines = [key | {"method": f"m{i}", "versus": "random", "other": "random", "n": 9,
                    "diff": 1.0, "se": 0.1, "p": float(2 * norm.sf(z)), "test": "mcnemar"}
             for i, z in enumerate((z_star - 1.5, z_star - 0.5, z_star + 0.5, z_star + 1.5))]
    near = [bool(borderline(decide(frame_of([line], TEST_COLUMNS), ALPHA)).iloc[0])
            for line in lines]
    assert near == [False, True, True, False]


@pytest.mark.parametrize("seed", range(6))
def test_the_consensus_does_not_depend_on_the_order_of_the_other_seeds(seed):
    per_seed = generated(seed, seeds=4)
    rng = np.random.default_rng(seed)
    shuffled = [per_seed[0], *(per_seed[1:][i] for i in rng.permutation(3))]
    for a, b in zip(combine(per_seed)[:2], combine(shuffled)[:2], strict=True):
        pd.testing.assert_frame_equal(a, b)


@pytest.mark.parametrize("seed", range(6))
def test_a_test_that_clears_alike_in_every_seed_stays_cleared(seed):
    rng = np.random.default_rng(seed)
    tests, summaries = drawn_tests(rng)
    tests["p"] = 0.0  # every test clears in every seed, with the primary's sign
    decided = decide(tests, ALPHA)
    per_seed = [(s, decided.copy(), summaries) for s in range(3)]
    consensus, _, _ = combine(per_seed)
    cleared = decided["clears"]
    assert cleared.all()
    assert consensus["clears"].equals(cleared)
    assert consensus["relation"].equals(decided["relation"])
    assert (consensus["held"] == 3).all() and (consensus["in_seeds"] == "").all()


@pytest.mark.parametrize("seed", range(6))
def test_flipping_one_seeds_relation_on_one_test_changes_that_test_alone(seed):
    per_seed = generated(seed)
    before, _, _ = combine(per_seed)
    held = before[before["clears"] & (before["seeds"] == 3)]
    assert len(held), "the draw should hold a test that clears in every seed"
    chosen = pairs_of(held)[int(np.random.default_rng(seed).integers(len(held)))]
    seed_of, decided, summaries = per_seed[2]
    flipped = decided.copy()
    mine = np.array([pair == chosen for pair in pairs_of(decided)])
    flipped.loc[mine, "diff"] = -flipped.loc[mine, "diff"]
    flipped = decide(flipped[TEST_COLUMNS], ALPHA)
    flipped.attrs["alpha"] = ALPHA
    after, _, _ = combine([*per_seed[:2], (seed_of, flipped, summaries)])
    changed = (after != before).any(axis=1)
    assert changed.tolist() == [pair == chosen for pair in pairs_of(before)]
    assert (after.loc[changed, "in_seeds"] == "2 of 3").all()
    assert (after.loc[changed, "relation"] == "not apart").all()


@pytest.mark.parametrize("seed", range(4))
def test_one_seed_is_the_input_table_with_its_decisions(seed):
    (_, decided, summaries), = generated(seed, seeds=1)
    consensus, spread, long = combine([(7, decided, summaries)])
    pd.testing.assert_frame_equal(consensus[decided.columns], decided)
    assert consensus.attrs == decided.attrs
    assert consensus["seeds"].eq(1).all()
    assert consensus["held"].tolist() == decided["clears"].astype(int).tolist()
    assert consensus["in_seeds"].eq("").all()
    pd.testing.assert_frame_equal(spread[summaries.columns], summaries)
    assert spread["seeds"].eq(1).all()
    assert spread["value_min"].tolist() == spread["value_max"].tolist() == summaries[
        "value"].tolist()
    assert long.columns[0] == "seed" and long["seed"].eq(7).all()
    pd.testing.assert_frame_equal(long.drop(columns="seed"), decided)


def test_the_summaries_carry_each_values_range_and_the_long_table_every_seed():
    per_seed = generated(3)
    _, spread, long = combine(per_seed)
    values = np.stack([s["value"].to_numpy() for _, _, s in per_seed])
    assert np.allclose(spread["value_min"], values.min(axis=0))
    assert np.allclose(spread["value_max"], values.max(axis=0))
    assert spread["seeds"].eq(3).all()
    assert long["seed"].tolist() == [s for s, d, _ in per_seed for _ in range(len(d))]
    for s, decided, _ in per_seed:
        pd.testing.assert_frame_equal(
            long[long["seed"] == s].drop(columns="seed").reset_index(drop=True), decided)


# -- what a reader sees --------------------------------------------------------------------------


def numbers(line: str) -> list[int]:
    return [int(n) for n in re.findall(r"(?<![\w`])\d+(?![\w`])", line)]


@pytest.mark.parametrize("seed", range(6))
def test_the_seed_line_counts_the_consensus_once_per_test(seed):
    per_seed = generated(seed)
    consensus, _, _ = combine(per_seed)
    run = {"seeds": [s for s, _, _ in per_seed]}
    line = seed_line(run, consensus)
    want = consensus_apart(per_seed).assign(pair=pairs_of(consensus)).drop_duplicates("pair")
    clear = int((want["held"] > 0).sum())
    every = int(((want["held"] > 0) & (want["held"] == want["seeds"])).sum())
    some = int(((want["held"] > 0) & (want["held"] < want["seeds"])).sum())
    near = int(want["borderline"].sum())
    assert line.startswith("**3 seeds** (10, 11, 12; 10 the primary): ")
    assert numbers(line) == [3, 10, 11, 12, 10, len(want), clear, every, clear, some, near,
                             len(want)], line
    assert "holds in every seed" in line


def test_one_seed_says_what_it_always_said():
    (_, decided, summaries), = generated(1, seeds=1)
    consensus = combine([(5, decided, summaries)])[0]
    for run in ({"seed": 5}, {"seeds": [5]}, None):
        assert seed_line(run, consensus) == seed_line(run)
    assert seed_line({"seed": 5}, consensus).startswith("**One seed** (`seed` 5): ")


def test_a_reference_reads_the_same_through_a_one_seed_consensus():
    reference = REPO / REFERENCE_DIR
    decided, summaries = read_run(reference)
    consensus, spread, _ = combine([(0, decided, summaries)])
    run = json.loads((reference / RUN_JSON).read_text())
    assert findings_markdown(consensus, spread, run, conditioning=read_conditioning(reference),
                             movement=read_run_table(reference)) == reference_text(reference)


def setting(seeds_held: tuple[int, ...]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One alignment setting of three seeds where OMP is apart from SALT (the best) in the
    seeds of ``seeds_held`` only: a consensus and its summaries."""
    key = {"family": "alignment", "stage": "transfer", "lang": "de", "source": "src",
           "target": "gpt2_de", "side": "input", "split": "held_out", "metric": "p_at_10"}
    hits = {m: np.r_[np.ones(k), np.zeros(400 - k)] for m, k in
            (("salt", 200), ("omp", 100), ("random", 0))}
    per_seed = []
    for s in range(3):
        summaries, tests = compare_setting(key, hits, 0)
        tests = frame_of(tests, TEST_COLUMNS)
        if s not in seeds_held:
            tests.loc[(tests["method"] == "omp") & (tests["other"] == "salt"), "p"] = 0.5
        per_seed.append((s, decide(tests, ALPHA), frame_of(summaries, SUMMARY_COLUMNS)))
    consensus, spread, _ = combine(per_seed)
    return consensus, spread


def test_the_tables_mark_a_verdict_of_some_seeds_and_a_test_near_its_threshold():
    consensus, spread = setting((0, 2))
    omp = setting_table(spread, lookup(consensus), details=True).split("\n")[3]
    assert omp.startswith("| omp |")
    assert f"{MARKS['vs_best']}{fraction(2, 3)}" in omp and fraction(2, 3) == "²⁄₃"
    held, _ = setting((0, 1, 2))
    assert f"(2) {MARKS['vs_best']}{MARKS['better_random']} |" in setting_table(
        spread, lookup(held)).split("\n")[3]
    near = consensus.assign(borderline=True)
    assert "~" in setting_table(spread, lookup(near))
    # one seed: a borderline test changes no cell
    alone = combine([(0, *(consensus[consensus.columns[:19]], spread[SUMMARY_COLUMNS]))])[0]
    one = setting_table(spread, lookup(alone.assign(borderline=True)), details=True)
    assert one == setting_table(spread, lookup(consensus[consensus.columns[:19]]), details=True)
    assert "~" not in one and "⁄" not in one


def test_the_real_runs_limits_and_the_run_line_state_what_the_run_did():
    """The closing sentences are conditions, not fixed text: a several-seed real run does not
    say it rests on one seed, and a live run (no commit in its run.json) names no empty
    commit."""
    decided, summaries = read_run(REPO / REFERENCE_DIR)
    three = decided.assign(seeds=3, held=decided["clears"].astype(int) * 3, borderline=False,
                           in_seeds="")
    text = findings_markdown(three, summaries, {"seed": 1, "seeds": [1, 2, 3], "omp_k": 64},
                             real=True)
    assert "one seed" not in text and "3 seeds, one small source pretrained here" in text
    one = findings_markdown(decided, summaries, {"seed": 1, "seeds": [1], "omp_k": 64}, real=True)
    assert "(one seed, one small source pretrained here" in one
    assert "commit  (" not in text and "of the run of commit" not in text
    dated = findings_markdown(decided, summaries, {"commit": "abc1234", "date": "2026-12-07"})
    assert "of the run of commit abc1234 (2026-12-07)" in dated


def test_a_tie_for_best_that_stands_for_want_of_agreement_is_said_so():
    """A method worse than the best in the primary seed and one other, but not in the third,
    is not apart in the consensus, so tied for best; the leader line says that tie stands
    only because the seeds disagree."""
    from test_findings import alignment, hits, run

    decided, summaries = run(alignment("xx", {"salt": hits(120), "focus": hits(60),
                                               "random": hits(0)}))
    best = (decided["versus"] == "best") & (decided["method"] == "focus")
    assert decided.loc[best, "relation"].eq("worse").any()
    agree = decided.assign(seeds=1, held=decided["clears"].astype(int), borderline=False,
                           in_seeds="")
    line = findings_markdown(agree, summaries)
    assert "worse than the best in some seeds" not in line
    split = agree.copy()
    split.loc[best, ["seeds", "held", "in_seeds"]] = [3, 2, "2 of 3"]
    split.loc[best, ["clears", "relation"]] = [False, "not apart"]
    text = findings_markdown(split, summaries)
    assert "(of these ties, worse than the best in some seeds but not all: focus in 1)" in text


@pytest.mark.parametrize("seed", range(6))
def test_every_number_of_a_several_seed_headline_is_a_count_of_its_tables(seed):
    """The headline of a consensus over three seeds, checked line by line against the
    recount written apart from findings.py (tests/test_findings.py), the seed line with it."""
    from test_findings import check_headline, lines_of

    consensus, summaries, _ = combine(generated(seed))
    check_headline(lines_of(consensus, summaries), consensus, summaries)
