"""The zero-shot comparison: every transferred checkpoint's held-out loss and bits per byte
before any training.

* :func:`write_zeroshot_table`: the raw table (``results/tables/zeroshot.{csv,md}``, rule
  zeroshot_table), methods ranked by bits per byte in each (language, source, target PLM)
  setting.
* :func:`write_zeroshot_comparison`: the report's (``results/report/zeroshot.{csv,md}``),
  from the records' per-document losses (:mod:`embtransfer.evaluation.intrinsic`): each
  method's bits per byte with its delta-method standard error over the documents, and a
  paired comparison over the same documents with the setting's best method and with Random
  (:func:`embtransfer.core.paired.paired_ratio`: delta-method standard error, p-value of a
  paired bootstrap seeded from the run's seed).

A transferred checkpoint's record carries the check of its new rows
(:mod:`embtransfer.transfer.row_check`): ``rows_flagged`` counts the rows it flags (blown up
or zero, input and output together; empty for a record without the check), the Markdown
marks them beside the checkpoint's rank, and :func:`row_check_statement` is the findings'
one line about them.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import pandas as pd

from embtransfer.core.atomic import write_table
from embtransfer.core.paired import (
    CORRECTION,
    FAMILY_ALPHA,
    derived_seed,
    family_clears,
    paired_ratio,
    ratio_se,
)
from embtransfer.report.records import ZEROSHOT_KEYS, MalformedResultError, read_records
from embtransfer.report.tables import ORACLE, RANDOM, format_p, markdown

#: Rows shown in the table but never ranked: the reference and the world's oracle.
NOT_COMPETING = ("source_model", ORACLE)
#: The source model's setting has no target PLM: it reads the text with its own tokenizer.
OWN_TOKENIZER = "(source tokenizer)"
SETTING = ["lang", "source", "target"]
#: The per-document lists every zero-shot record carries (in document order).
DOCUMENT_KEYS = ("document_nll_nats", "document_bytes")
COMPARISON_COLUMNS = [
    *SETTING,
    "method",
    "documents",
    "bytes",
    "bits_per_byte",
    "bits_per_byte_se",
    "rank",
    "best",
    "vs_best",
    "vs_best_se",
    "vs_best_p",
    "vs_random",
    "vs_random_se",
    "vs_random_p",
    "rows_flagged",
]


def zeroshot_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(records)
    if "target" not in frame:
        frame["target"] = None
    frame["target"] = frame["target"].fillna(OWN_TOKENIZER)
    frame["rows_flagged"] = [rows_flagged(record) for record in records]
    columns = ["lang", "source", "target", "method", "loss", "perplexity", "bits_per_byte"]
    extra = [c for c in ("tokens_per_byte",) if c in frame] + ["rows_flagged"]
    frame = frame[columns + extra].sort_values(["lang", "source", "target", "bits_per_byte"])
    competing = ~frame["method"].isin(NOT_COMPETING)
    setting = ["lang", "source", "target"]
    # A setting ranks its methods only where two or more compete: a lone method is shown,
    # not credited with a win.
    rivals = frame[competing].groupby(setting)["method"].transform("size")
    ranked = competing & (rivals.reindex(frame.index).fillna(0) >= 2)
    frame["rank"] = float("nan")
    frame.loc[ranked, "rank"] = (
        frame[ranked].groupby(setting)["bits_per_byte"].rank(method="min")
    )
    return frame.reset_index(drop=True)


def zeroshot_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per competing method: mean rank by bits per byte and wins over the settings where it
    meets another method, how many those are, how many it ran alone (shown, not ranked),
    and its mean bits per byte over the ranked settings."""
    competing = frame[~frame["method"].isin(NOT_COMPETING)]
    ranked = competing[competing["rank"].notna()]
    summary = ranked.groupby("method").agg(
        mean_rank=("rank", "mean"),
        wins=("rank", lambda r: int((r == 1).sum())),
        ranked_settings=("rank", "size"),
        mean_bits_per_byte=("bits_per_byte", "mean"),
    )
    alone = competing[competing["rank"].isna()].groupby("method").size()
    summary["unranked_settings"] = alone.reindex(summary.index).fillna(0).astype(int)
    return summary.sort_values(["mean_rank", "mean_bits_per_byte"]).reset_index()


def write_zeroshot_table(records: list[dict[str, Any]], csv_path: str | os.PathLike,
                         md_path: str | os.PathLike) -> pd.DataFrame:
    frame = zeroshot_frame(records)
    summary = zeroshot_summary(frame)
    parts = [
        "# Zero-shot comparison (before any training)",
        "",
        "Held-out loss of every transferred checkpoint on each target language's valid "
        "split. Bits per byte (total negative log-likelihood in bits over the UTF-8 bytes of "
        "the text) is comparable across tokenizers; loss and perplexity are per token of each "
        "model's own tokenizer. `source_model` is the untouched source LLM with its own "
        "tokenizer on the same text: a reference point, not a baseline (it saw the target "
        "language only as a small share of its pretraining mix, so a transferred model can "
        "beat it before any training). `world_oracle` is the miniature world's oracle: the "
        "translation's rows where the world knows a token's meaning, Mean's row elsewhere. "
        "Lower is better. Ranks are taken only where two or more methods compete in a "
        "(language, source, target PLM) setting; a method run alone there is shown, not "
        "ranked (`unranked_settings`), and the oracle and the source model are never ranked.",
        "",
        "## Methods ranked over the settings where they compete",
        "",
        markdown(summary),
    ]
    for (lang, source), group in frame.groupby(["lang", "source"], sort=True):
        parts += ["", f"## {lang}, source {source}: bits per byte", ""]
        reference = group[group["method"] == "source_model"]
        if len(reference):
            parts += [
                f"The source model with its own tokenizer: "
                f"{reference['bits_per_byte'].iloc[0]:.4f} bits per byte.",
                "",
            ]
        transferred = group[group["method"] != "source_model"]
        if len(transferred):
            pivot = transferred.pivot_table(
                index="method", columns="target", values="bits_per_byte", dropna=False
            )
            pivot = pivot.sort_values(list(pivot.columns)[0]).reset_index()
            parts.append(markdown(pivot))
            flagged = transferred[_flagged(transferred)]
            if len(flagged):
                parts += ["", "Rows the row check flags (blown up or zero; such a "
                          "checkpoint's bits per byte is what those rows did): "
                          + ", ".join(f"{line.method} with {line.target} "
                                      f"({int(line.rows_flagged)})"
                                      for line in flagged.itertuples()) + "."]
    write_table(frame, "\n".join(parts) + "\n", csv_path, md_path)
    return frame


def document_bits(record: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(per-document NLL in bits, per-document UTF-8 bytes) of one zero-shot record."""
    nll = np.asarray(record["document_nll_nats"], np.float64) / math.log(2)
    n_bytes = np.asarray(record["document_bytes"], np.float64)
    if nll.shape != n_bytes.shape or nll.ndim != 1 or nll.size < 2:
        raise MalformedResultError(
            f"results file {record.get('_path')}: document_nll_nats and document_bytes must "
            f"be two lists of one length (two documents or more), got {nll.shape} and "
            f"{n_bytes.shape}"
        )
    return nll, n_bytes


def _versus(nll: np.ndarray, other: np.ndarray, n_bytes: np.ndarray, seed: int,
            prefix: str) -> dict[str, float]:
    test = paired_ratio(nll, other, n_bytes, seed)
    return {prefix: test.diff, f"{prefix}_se": test.se, f"{prefix}_p": test.p}


def rows_flagged(record: dict[str, Any]) -> float:
    """How many new rows the row check flags in the record's checkpoint; NaN where the
    record has no check (the source model, a LAPT checkpoint)."""
    check = record.get("row_check")
    return float(check["flagged_rows"]) if isinstance(check, dict) else math.nan


def _setting_lines(setting: tuple, records: dict[str, dict[str, Any]], seed: int
                   ) -> list[dict[str, Any]]:
    """The lines of one setting: every method's bits per byte ± SE, rank and comparisons."""
    losses = {method: document_bits(record) for method, record in records.items()}
    n_bytes = next(iter(losses.values()))[1]
    for method, (_, own) in losses.items():
        if not np.array_equal(own, n_bytes):
            raise MalformedResultError(
                f"zero-shot {setting}: {method} was scored on other documents than "
                f"{next(iter(losses))} ({records[method].get('_path')})"
            )
    bpb = {method: nll.sum() / n_bytes.sum() for method, (nll, _) in losses.items()}
    competing = sorted((m for m in losses if m not in NOT_COMPETING), key=lambda m: (bpb[m], m))
    best = competing[0] if len(competing) >= 2 else None
    lines = []
    for method, (nll, _) in losses.items():
        line = dict(zip(SETTING, setting, strict=True)) | {
            "method": method,
            "documents": nll.size,
            "bytes": int(n_bytes.sum()),
            "bits_per_byte": records[method]["bits_per_byte"],
            "bits_per_byte_se": ratio_se(nll, n_bytes),
            "rank": competing.index(method) + 1 if best and method in competing else math.nan,
            "best": best or "",
            "rows_flagged": rows_flagged(records[method]),
        }
        for prefix, other in (("vs_best", best), ("vs_random", RANDOM)):
            if other in losses and other != method:
                key = derived_seed(setting, method, other, seed)
                line |= _versus(nll, losses[other][0], n_bytes, key, prefix)
        lines.append(line)
    return lines


def zeroshot_comparison(records: list[dict[str, Any]], seed: int) -> pd.DataFrame:
    """One line per (setting, method) of :data:`COMPARISON_COLUMNS`, by setting, then the
    competing methods by rank, then the oracle and the source model."""
    settings: dict[tuple, dict[str, dict[str, Any]]] = {}
    for record in records:
        setting = (record["lang"], record["source"], record.get("target") or OWN_TOKENIZER)
        settings.setdefault(setting, {})[record["method"]] = record
    lines: list[dict[str, Any]] = []
    for setting in sorted(settings):
        lines += _setting_lines(setting, settings[setting], seed)
    frame = pd.DataFrame(lines, columns=COMPARISON_COLUMNS)
    frame["_last"] = frame["method"].isin(NOT_COMPETING)
    frame = frame.sort_values([*SETTING, "_last", "rank", "method"], kind="stable")
    return frame.drop(columns="_last").reset_index(drop=True)


#: The p-value columns: one family of tests (:func:`zeroshot_clears`).
P_COLUMNS = ["vs_best_p", "vs_random_p"]


def zeroshot_clears(frame: pd.DataFrame) -> pd.DataFrame:
    """Which of the table's paired tests clear the report's correction: the family is every
    p-value of :data:`P_COLUMNS` in ``frame`` (the whole zero-shot table)."""
    return family_clears(frame, P_COLUMNS)


def _versus_cell(diff: float, se: float, p: float, clears: bool) -> str:
    if math.isnan(diff):
        return ""
    return f"{diff:+.4f} ± {se:.4f} ({format_p(p)}){' *' if clears else ''}"


def _versus_column(group: pd.DataFrame, clears: pd.DataFrame, prefix: str) -> list[str]:
    columns = zip(group[prefix], group[f"{prefix}_se"], group[f"{prefix}_p"],
                  clears.loc[group.index, f"{prefix}_p"], strict=True)
    return [_versus_cell(*values) for values in columns]


def _setting_table(group: pd.DataFrame, clears: pd.DataFrame) -> pd.DataFrame:
    errors = zip(group["bits_per_byte"], group["bits_per_byte_se"], strict=True)
    table = pd.DataFrame(
        {
            "method": group["method"],
            "rank": group["rank"].map(lambda r: "" if math.isnan(r) else str(int(r))),
            "bits per byte": [f"{v:.4f} ± {se:.4f}" for v, se in errors],
            "vs best": _versus_column(group, clears, "vs_best"),
            "vs Random": _versus_column(group, clears, "vs_random"),
        }
    )
    if _flagged(group).any():  # a setting without flagged rows keeps its columns
        table.insert(2, "row check", [f"{int(n)} rows flagged" if n > 0 else ""
                                      for n in group["rows_flagged"]])
    return table


def _flagged(frame: pd.DataFrame) -> pd.Series:
    """Which lines' checkpoints have rows the row check flags (False without the column)."""
    if "rows_flagged" not in frame:
        return pd.Series(False, index=frame.index)
    return frame["rows_flagged"].fillna(0) > 0


def row_check_statement(frame: pd.DataFrame) -> str:
    """The findings' line about the checkpoints whose new rows the row check flags (blown
    up or zero), naming each; empty where there are none."""
    flagged = frame[_flagged(frame)]
    if flagged.empty:
        return ""
    named = ", ".join(f"{line.lang}/{line.source}/{line.target} {line.method} "
                      f"({int(line.rows_flagged)} rows)" for line in flagged.itertuples())
    return (f"{len(flagged)} checkpoint{'s have' if len(flagged) > 1 else ' has'} blown-up or "
            f"zero rows (row check): {named}; their bits per byte and ranks say what those "
            "rows did, not what the method does (transfer.json's row_check says what to "
            "change).")


#: The Markdown's note where a checkpoint's rows are flagged.
ROW_CHECK_NOTE = (
    "`row check`: the checkpoint's new rows the row check flags (norm over ten times "
    "the source's longest row, or zero; `transfer.json`'s `row_check` names them and says what to "
    "change): its bits per byte and rank are what those rows did, not what the method does."
)


COMPARISON_INTRO = (
    "Bits per byte of every checkpoint on its language's held-out text before any training "
    "(lower is better), `±` one standard error over the documents (the lines of the valid "
    "split): the delta-method standard error of the ratio estimator, summed negative "
    "log-likelihood in bits over summed UTF-8 bytes. Ranks are over the competing methods "
    "of a setting, where two or more compete; `world_oracle` (the world's oracle: the "
    "translation's rows where the world knows a token's meaning, Mean's row elsewhere) and "
    "`source_model` (the source LLM with its own tokenizer, a reference) are never ranked. "
    "`vs best` and `vs Random`: the difference in bits per byte from the setting's best "
    "method and from Random over the same documents, ± its paired delta-method standard "
    "error, and the p-value of a paired bootstrap over the documents (seeded from the run's "
    f"seed); `*` marks a difference that clears the {CORRECTION} correction at family-wise "
    f"α = {FAMILY_ALPHA} over every test of this table."
)


#: The same comparison of the final LAPT checkpoints (rule intrinsic_lapt's records).
LAPT_TITLE = "After LAPT: the final checkpoints with standard errors and paired tests"
LAPT_INTRO = (
    "The final checkpoint of every LAPT run, scored as the transferred ones are "
    "(`results/intrinsic/lapt/`), with the same tests: a setting's best is its best LAPT run, "
    "Random the LAPT run of Random's checkpoint. "
    + COMPARISON_INTRO.replace(" before any training", "")
)


def comparison_markdown(frame: pd.DataFrame,
                        title: str = "Zero-shot comparison with standard errors and paired tests",
                        intro: str = COMPARISON_INTRO) -> str:
    clears = zeroshot_clears(frame)
    parts = [f"# {title}", "", intro]
    if _flagged(frame).any():
        parts += ["", ROW_CHECK_NOTE]
    for (lang, source, target), group in frame.groupby(SETTING, sort=False):
        parts += ["", f"## {lang}, source {source}, target {target} "
                      f"({int(group['documents'].iloc[0])} documents, "
                      f"{int(group['bytes'].iloc[0])} bytes)", "",
                  markdown(_setting_table(group, clears))]
    if frame.empty:
        parts += ["", "(no zero-shot records in this run)"]
    return "\n".join(parts) + "\n"


def write_zeroshot_comparison(files: list[str], csv_path: str | os.PathLike,
                              md_path: str | os.PathLike, seed: int, lapt: bool = False
                              ) -> pd.DataFrame:
    """The comparison of ``files``' checkpoints; ``lapt``: they are final LAPT checkpoints
    (the title and introduction say so)."""
    records = read_records(files, required=(*ZEROSHOT_KEYS, *DOCUMENT_KEYS))
    frame = zeroshot_comparison(records, seed)
    text = (comparison_markdown(frame, LAPT_TITLE, LAPT_INTRO) if lapt
            else comparison_markdown(frame))
    write_table(frame, text, csv_path, md_path)
    return frame
