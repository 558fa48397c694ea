"""The paper tables' helpers: Markdown text, malformed files named, and the paired tests of
each table's blocks (embtransfer.report.tables.table_tests) with the marks the decided
comparisons give them (apply_marks)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from embtransfer.core.paired import mcnemar
from embtransfer.report.comparisons import SUMMARY_COLUMNS, TEST_COLUMNS, decide, frame_of
from embtransfer.report.records import MalformedResultError, read_records
from embtransfer.report.tables import (
    SOURCE_MODEL_LABEL,
    Row,
    Table,
    apply_marks,
    format_score,
    markdown,
    table_tests,
)

METRIC = "Words acc"


def test_markdown_renders_numbers_and_dashes():
    frame = pd.DataFrame({"m": ["a", "b"], "v": [0.5, float("nan")]})
    assert markdown(frame) == "| m | v |\n|---|---|\n| a | 0.5000 |\n| b | — |"


def row(method: str, docs: list[float], stage: str = "transfer", target: str = "t",
        variant: str = "target") -> Row:
    return Row(keys={"stage": stage, "lang": "x", "source": "s", "target": target,
                     "method": method, "eval language": variant},
               values={METRIC: 100 * float(np.mean(docs))}, per_document={METRIC: docs})


@pytest.fixture
def rows() -> list[Row]:
    """Per-question scores of a Table 1: focus answers 70 %, omp 30 %, clp as focus but two
    questions; the oracle and the source control all; salt alone after LAPT; in English omp
    leads focus."""
    rng = np.random.default_rng(0)
    good = (rng.random(150) < 0.7).astype(float).tolist()
    bad = (rng.random(150) < 0.3).astype(float).tolist()
    near = list(good)
    near[:2] = [1 - v for v in near[:2]]
    return [row("focus", good), row("omp", bad), row("clp", near),
            row("world_oracle", [1.0] * 150),
            row(SOURCE_MODEL_LABEL, [1.0] * 150, stage="source", target="—"),
            row("salt", bad, stage="lapt"),
            row("focus", bad, variant="english"), row("omp", good, variant="english")]


def test_each_block_ranks_its_methods_and_tests_them_on_the_same_questions(rows):
    summaries, tests = table_tests(1, rows, [METRIC], seed=0)
    summary = frame_of(summaries, SUMMARY_COLUMNS)
    assert set(summary["family"]) == {"table1"} and set(summary["metric"]) == {METRIC}
    # the source control is in no block; the lone LAPT method is in none either (a block
    # needs two scored methods)
    assert set(summary["method"]) == {"focus", "omp", "clp", "world_oracle"}
    rank = summary.set_index(["variant", "method"])["rank"]
    assert rank[("target", "focus")] == 1 and rank[("target", "clp")] == 2
    assert rank[("target", "omp")] == 3 and math.isnan(rank[("target", "world_oracle")])
    assert rank[("english", "omp")] == 1 and rank[("english", "focus")] == 2  # a block each
    # McNemar's test on the per-question scores; the oracle is never tested
    test = frame_of(tests, TEST_COLUMNS).set_index(["variant", "method", "versus"])
    assert set(test.index) == {("target", "omp", "best"), ("target", "clp", "best"),
                               ("english", "focus", "best")}
    scores = {r.keys["method"]: np.asarray(r.per_document[METRIC]) for r in rows[:3]}
    assert test.loc[("target", "omp", "best"), "p"] == mcnemar(scores["omp"],
                                                                scores["focus"]).p
    assert test.loc[("target", "omp", "best"), "diff"] == pytest.approx(  # in points
        100 * (scores["omp"].mean() - scores["focus"].mean()))


def test_the_tables_marks_are_the_decided_comparisons(rows):
    _, tests = table_tests(1, rows, [METRIC], seed=0)
    decided = decide(frame_of(tests, TEST_COLUMNS))
    table = Table(1, "knowledge", "", rows, [METRIC], {}, format_score)
    apply_marks(table, decided)
    marks = {(r.keys["method"], r.keys["stage"], r.keys["eval language"]):
             r.vs_best.get(METRIC) for r in rows}
    assert marks[("focus", "transfer", "target")] == "best"
    assert marks[("omp", "transfer", "english")] == "best"
    lines = decided.set_index(["variant", "method"])
    for (variant, method), line in lines.iterrows():
        assert marks[(method, "transfer", variant)] == line["p"]
    assert marks[("omp", "transfer", "target")] < 1e-6
    assert marks[("clp", "transfer", "target")] > 0.05
    assert marks[("world_oracle", "transfer", "target")] is None
    assert marks[(SOURCE_MODEL_LABEL, "source", "target")] is None
    assert marks[("salt", "lapt", "target")] is None  # alone in its block: not ranked
    clear = {(r.keys["method"], r.keys["eval language"]) for r in rows if METRIC in r.clears}
    assert clear == {(m, v) for (v, m), c in lines["clears"].items() if c}
    assert ("omp", "target") in clear and ("clp", "target") not in clear
    # the Markdown cell: (best) for the best, * for a difference that clears
    text = table.markdown()
    cells = {" ".join(c.strip() for c in line.split("|")[5:7]): line.split("|")[7].strip()
             for line in text.splitlines() if line.startswith("| ") and "method" not in line}
    assert cells["focus target"].endswith("(best)") and cells["omp target"].endswith(" *")
    assert not cells["clp target"].endswith((" *", "(best)"))


def test_malformed_or_incomplete_results_are_named(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(MalformedResultError, match="bad.json is malformed"):
        read_records([bad])
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"lang": "xx", "source": "s", "method": "salt"}))
    with pytest.raises(MalformedResultError, match=r"partial.json lacks the keys \['loss'"):
        read_records([partial])
