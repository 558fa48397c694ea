"""The fastText BLI table: do the aligned fastText spaces WECHSEL and OFA search carry
translations at all?

Reads the records of rule fasttext_bli (:data:`embtransfer.core.paths.FASTTEXT_BLI`,
:mod:`embtransfer.transfer.fasttext_bli`, one per language) and writes
``fasttext_bli.csv`` (one line per language: :data:`COLUMNS`) and ``fasttext_bli.md``.
``above_chance``: the one-sided binomial p-value of P@10 against its chance clears the
report's one rule (:func:`embtransfer.core.paired.holm` over the table's languages);
:func:`bli_sentence` states it in words for the findings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from embtransfer.core import paths
from embtransfer.core.atomic import read_json, write_table
from embtransfer.core.paired import CORRECTION, FAMILY_ALPHA, holm
from embtransfer.report.tables import format_p, markdown

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
    frame = pd.DataFrame(lines, columns=RECORD)
    p = pd.to_numeric(frame["p_value_10"], errors="coerce").to_numpy(float)
    frame["above_chance"] = holm(p) if len(frame) else pd.Series(dtype=bool)
    return frame


def _percent(value: Any, digits: int = 1) -> str:
    return "—" if value is None or pd.isna(value) else f"{value:.{digits}f} %"


def bli_markdown(frame: pd.DataFrame) -> str:
    parts = [
        "# Do the aligned fastText spaces carry translations?",
        "",
        "WECHSEL and OFA map the source language's fastText word vectors onto the target "
        "language's with an orthogonal map fitted on a bilingual dictionary and take each "
        "target token's neighbours there: if that space retrieves no translation, no method "
        "built on it can. Per language, bilingual lexicon induction with the methods' own map "
        "(`results/aligned/`) on the dictionary's held-out half, which the fit never saw: each "
        "held-out target word's vector against every word of the source fastText model, "
        "mapped; a hit at k when one of its translations is among the k nearest by cosine. "
        "Chance: a random ranking's (k / candidates for one translation). p: one-sided "
        f"binomial test of the hits at chance; above chance: it clears {CORRECTION} at "
        f"family-wise α = {FAMILY_ALPHA} over the table's languages. The fit's P@1: its own "
        "training pairs, among its own target words (not held out).",
    ]
    if frame.empty:
        return "\n".join([*parts, "", "(no language with WECHSEL or OFA and a held-out "
                          "dictionary half)"]) + "\n"
    table = pd.DataFrame({
        "language": frame["lang"],
        "n": frame["queries"],
        "candidates": frame["candidates"],
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
    return "\n".join([*parts, "", markdown(table)]) + "\n"


def bli_sentence(frame: pd.DataFrame) -> str:
    """The table in one line, as the findings state it; empty for an empty table."""
    if frame.empty:
        return ""
    clauses = []
    for line in frame.itertuples():
        if not line.queries:
            clauses.append(f"in {line.lang} it is not measured (no held-out word has a vector "
                           "on both sides)")
            continue
        figures = (f"P@10 = {line.p_at_10:.1f} %", f"chance {line.chance_at_10:.2f} %",
                   f"n = {line.queries}")
        clauses.append(f"at {figures[0]} ({figures[1]}, {figures[2]}) in {line.lang}"
                       if line.above_chance else
                       f"in {line.lang} at no rate above chance ({', '.join(figures)}): "
                       "no method built on them can")
    return ("The aligned fastText spaces WECHSEL and OFA search retrieve a held-out word's "
            "translation " + "; ".join(clauses) + " (`results/report/fasttext_bli.md`).")


def bli_section(frame: pd.DataFrame) -> list[str]:
    """The findings' section on the aligned fastText spaces; none for an empty table."""
    if frame.empty:
        return []
    return ["", "### The aligned fastText spaces WECHSEL and OFA search", "",
            bli_sentence(frame)]


def write_fasttext_bli(files: list[str], csv_path: str | Path, md_path: str | Path
                       ) -> pd.DataFrame:
    frame = bli_frame(files)
    write_table(frame, bli_markdown(frame), csv_path, md_path)
    return frame
