"""A method that refines another's rows (Token Distillation, from Subword-mean's) against
that start: its own line of the comparisons table (versus ``start``), the report's table of
how each method made its rows, and the findings' line, each checked with counts made apart
from the code that wrote them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from embtransfer.report.comparisons import TEST_COLUMNS, compare_setting, decide, frame_of
from embtransfer.report.diagnostics import new_rows_frame
from embtransfer.report.findings import start_lines
from embtransfer.transfer.method_catalog import start_of

SETTING = {"family": "zeroshot", "stage": "transfer", "lang": "de", "source": "llama",
           "target": "gpt2_de@extend", "side": "", "split": "", "variant": "",
           "metric": "bits_per_byte"}


def _scores(shift: float, seed: int = 0) -> tuple[dict[str, np.ndarray], np.ndarray]:
    rng = np.random.default_rng(seed)
    n_bytes = rng.integers(200, 400, 60).astype(float)
    base = n_bytes * rng.uniform(1.0, 1.2, 60)
    return {"subword_mean": base, "token_distillation": base * (1 - shift),
            "salt": base * 0.9, "random": base * 2}, n_bytes


def test_token_distillation_starts_from_subword_mean():
    assert start_of("token_distillation") == ("subword_mean", "distilled")
    assert start_of("salt") is None and start_of("not_a_method") is None


def test_a_refining_method_is_tested_against_its_start_and_no_other_is():
    scores, n_bytes = _scores(0.05)
    _, tests = compare_setting(SETTING, scores, 0, n_bytes)
    starts = [(t["method"], t["other"]) for t in tests if t["versus"] == "start"]
    assert starts == [("token_distillation", "subword_mean")]
    line = next(t for t in tests if t["versus"] == "start")
    # its difference is the byte-weighted difference of the two (bits per document over
    # bytes), computed here apart
    want = (scores["token_distillation"].sum() - scores["subword_mean"].sum()) / n_bytes.sum()
    assert abs(line["diff"] - want) < 1e-9


def test_the_start_line_counts_each_stage_and_the_refined_rows(tmp_path: Path):
    tests = []
    for shift, target in ((0.05, "gpt2_de@extend"), (0.0, "gpt2_ar@extend"),
                          (-0.05, "gpt2_vi@extend")):
        scores, n_bytes = _scores(shift, seed=len(tests))
        tests += compare_setting(SETTING | {"target": target}, scores, 0, n_bytes)[1]
    decided = decide(frame_of(tests, TEST_COLUMNS))
    records = []
    for target, distilled, kept in (("gpt2_de@extend", 150, 4712), ("gpt2_ar@extend", 150, 5001),
                                    ("gpt2_vi@extend", 120, 3880)):
        path = tmp_path / f"{target}.json"
        path.write_text(json.dumps({"lang": "de", "source": "llama", "target": target,
                                    "method": "token_distillation",
                                    "counts": {"distilled": distilled, "subword_mean": kept}}))
        records.append(str(path))
    rows = new_rows_frame(records)
    assert rows["rows"].sum() == 150 + 4712 + 150 + 5001 + 120 + 3880
    [line] = start_lines(decided, new_rows=rows)
    # counted apart: the start tests per relation, from the table itself
    start = decided[decided["versus"] == "start"]
    better, worse = (int((start["relation"] == r).sum()) for r in ("better", "worse"))
    apart = int((start["relation"] == "not apart").sum())
    assert (better, worse, apart) == (1, 1, 1)
    assert line.startswith("**`token_distillation` against `subword_mean`** (where its rows "
                           "start; distilled 120-150 of 4,000-5,151 new rows in each of its "
                           "3 settings): transfer stage, 3 paired tests: `token_distillation` "
                           "better in 1 (1 in bits per byte")
    assert ", worse in 1 (1 in bits per byte" in line and line.endswith("not apart in 1.")


def test_a_record_without_counts_adds_no_line(tmp_path: Path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"lang": "de", "source": "s", "target": "t", "method": "mean"}))
    assert new_rows_frame([str(path)]).empty
    assert start_lines(pd.DataFrame(columns=[*TEST_COLUMNS, "relation"])) == []
