"""The fastText BLI table: do the aligned fastText spaces WECHSEL and OFA search carry
translations at all?

Reads the records of rule fasttext_bli (:data:`embtransfer.core.paths.FASTTEXT_BLI`,
:mod:`embtransfer.transfer.fasttext_bli`, one per language) and writes
``fasttext_bli.csv`` (one line per language: :data:`COLUMNS`) and ``fasttext_bli.md``.
``above_chance``: the one-sided binomial test of P@10 against its chance (:func:`bli_tests`)
clears the report's one rule in the decided comparisons table.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from embtransfer.core import paths
from embtransfer.core.atomic import read_json, write_table
from embtransfer.core.paired import CORRECTION, FAMILY_ALPHA
from embtransfer.report.comparisons import given_test
from embtransfer.report.tables import format_p, markdown
from embtransfer.report.texts import prose

#: The record's fields, in the table's order, then the decision.
RECORD = [
    "lang", "source_language", "queries", "candidates",
    "p_at_1", "chance_at_1", "hits_1", "p_value_1",
    "p_at_10", "chance_at_10", "hits_10", "p_value_10",
    "scored_pairs", "held_out_pairs", "dropped_seen_by_fit",
    "left_out_no_target_vector", "left_out_no_source_word",
    "fit_pairs_used", "fit_precision_at_1", "fit_p1_candidates",
]  # fmt: skip
COLUMNS = [*RECORD, "above_chance"]


def bli_frame(files: list[str]) -> pd.DataFrame:
    """One line per record in ``files`` (:data:`paths.FASTTEXT_BLI`), in their order, with
    ``above_chance`` decided over all of them."""
    lines = []
    for path in files:
        ident = paths.FASTTEXT_BLI.parse(path)
        if ident is None:
            raise ValueError(f"{path} is not a fastText BLI record ({paths.FASTTEXT_BLI})")
        record = read_json(path)
        if record.get("lang") != ident["lang"]:
            raise ValueError(f"{path} holds the record of {record.get('lang')!r}")
        lines.append({key: record.get(key) for key in RECORD})
    return pd.DataFrame(lines, columns=RECORD)


def bli_tests(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Each language's P@10 against its chance (the record's one-sided binomial p-value) as a
    test of family ``fasttext_bli``, for the spine to decide."""
    return [given_test({"family": "fasttext_bli", "lang": line["lang"],
                        "source": line["source_language"], "metric": "bli_p_at_10"},
                       "fasttext", float(line["p_at_10"] - line["chance_at_10"]), math.nan,
                       float(line["p_value_10"]), "binomial")
            for line in frame.to_dict("records") if line["queries"]]


def _percent(value: Any, digits: int = 1) -> str:
    return "—" if pd.isna(value) else f"{value:.{digits}f} %"


def bli_markdown(frame: pd.DataFrame, alpha: float = FAMILY_ALPHA) -> str:
    parts = [prose("bli.title"), prose("bli.intro", correction=CORRECTION, alpha=alpha)]
    if frame.empty:
        return "\n\n".join([*parts, prose("bli.empty")]) + "\n"
    table = pd.DataFrame({
        "language": frame["lang"], "n": frame["queries"], "candidates": frame["candidates"],
        "P@1": frame["p_at_1"].map(_percent),
        "chance P@1": frame["chance_at_1"].map(lambda v: _percent(v, 3)),
        "P@10": frame["p_at_10"].map(_percent),
        "chance P@10": frame["chance_at_10"].map(lambda v: _percent(v, 3)),
        "p (P@10)": frame["p_value_10"].map(lambda v: "—" if pd.isna(v) else format_p(v)),
        "above chance": frame["above_chance"].map(lambda v: "yes" if v else "no"),
        "held-out pairs scored": frame["scored_pairs"],
        "left out (no vector / no source word)": [
            f"{a} / {b}" for a, b in zip(frame["left_out_no_target_vector"],
                                         frame["left_out_no_source_word"], strict=True)],
        "fit P@1 (own pairs)": frame["fit_precision_at_1"].map(_percent),
    })  # fmt: skip
    return "\n\n".join([*parts, markdown(table)]) + "\n"


def write_fasttext_bli(frame: pd.DataFrame, decided: pd.DataFrame, csv_path: str | Path,
                       md_path: str | Path) -> pd.DataFrame:
    """``frame`` with ``above_chance`` (its P@10 better than chance in the decided
    comparisons), written as the table's csv and Markdown."""
    better = decided[(decided["family"] == "fasttext_bli") & (decided["relation"] == "better")]
    frame = frame.assign(above_chance=frame["lang"].isin(set(better["lang"])))
    write_table(frame, bli_markdown(frame, decided.attrs.get("alpha", FAMILY_ALPHA)), csv_path,
                md_path)
    return frame
