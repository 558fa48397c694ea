"""SALT against OMP (``omp``, k = 64, and ``omp_salt_k``, SALT's median k), paired, per
setting: zero-shot bits per byte of the transferred checkpoints (per document,
:func:`embtransfer.core.paired.paired_ratio`) and, on the miniature world, the alignment of
the input rows with the world's truth on the held-out concepts, of the transferred and of the
LAPT checkpoints (per token: P@1 and P@10 by McNemar, the centred cosine by a paired
bootstrap). After LAPT the benchmarks compare them too (Table 1, with its own tests).

SALT and OMP both fit each new token by least squares on a support of shared tokens and
differ only in the support (docs/methods.md), so a difference here is the support's
doing; ``omp_salt_k`` beside ``omp`` separates its size from its choice.
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
    holm,
    mcnemar,
    paired_bootstrap,
    paired_ratio,
)
from embtransfer.report.alignment_table import read_alignment
from embtransfer.report.records import ZEROSHOT_KEYS, MalformedResultError, read_records
from embtransfer.report.zeroshot import DOCUMENT_KEYS, document_bits

SALT = "salt"
#: The methods set against SALT.
OMP_METHODS = ("omp", "omp_salt_k")
#: The alignment split compared (no method was fitted on it).
SPLIT = "held_out"
#: The embedding side compared (a file holds each token's input and output rows).
SIDE = "input"
COLUMNS = ["stage", "metric", "lang", "source", "target", "method", "items", "salt", "omp",
           "diff", "se", "p", "clears"]


def _line(stage: str, metric: str, setting: tuple, method: str, items: int, salt: float,
          other: float, test: Any) -> dict[str, Any]:
    lang, source, target = setting
    return {"stage": stage, "metric": metric, "lang": lang, "source": source, "target": target,
            "method": method, "items": items, "salt": salt, "omp": other, "diff": test.diff,
            "se": test.se, "p": test.p, "clears": False}


def zeroshot_lines(files: list[str], stage: str, seed: int) -> list[dict[str, Any]]:
    """Bits per byte, OMP minus SALT (negative: OMP better), per setting with both; records
    without per-document losses (older LAPT records) cannot be paired and are left out."""
    settings: dict[tuple, dict[str, dict[str, Any]]] = {}
    for record in read_records(files, required=ZEROSHOT_KEYS):
        if record["method"] not in (SALT, *OMP_METHODS) or not all(
                key in record for key in DOCUMENT_KEYS):
            continue
        setting = (record["lang"], record["source"], record.get("target"))
        settings.setdefault(setting, {})[record["method"]] = record
    lines = []
    for setting, records in sorted(settings.items(), key=lambda item: str(item[0])):
        if SALT not in records:
            continue
        salt_nll, n_bytes = document_bits(records[SALT])
        for method in OMP_METHODS:
            if method not in records:
                continue
            nll, own = document_bits(records[method])
            if not np.array_equal(own, n_bytes):
                raise MalformedResultError(
                    f"zero-shot {setting}: {method} was scored on other documents than salt")
            test = paired_ratio(nll, salt_nll, n_bytes, derived_seed(stage, setting, method, seed))
            lines.append(_line(stage, "bits_per_byte", setting, method, nll.size,
                               salt_nll.sum() / n_bytes.sum(), nll.sum() / n_bytes.sum(), test))
    return lines


def alignment_lines(files: list[str], seed: int) -> list[dict[str, Any]]:
    """P@1 (points) and the centred cosine on the held-out concepts, OMP minus SALT
    (positive: OMP better), per stage and setting with both."""
    scores = read_alignment(files)
    scores = scores[scores["method"].isin((SALT, *OMP_METHODS))]
    if "split" in scores.columns:
        scores = scores[scores["split"] == SPLIT]
    if "side" in scores.columns:  # the input rows, as the alignment headline
        scores = scores[scores["side"] == SIDE]
    lines = []
    for (stage, lang, source, target), group in scores.groupby(
            ["stage", "lang", "source", "target"], sort=True):
        by_method = {m: g.sort_values("target_id", kind="stable")
                     for m, g in group.groupby("method")}
        if SALT not in by_method:
            continue
        salt = by_method[SALT]
        for method in OMP_METHODS:
            other = by_method.get(method)
            if other is None or len(other) < 2:
                continue
            if not np.array_equal(other["target_id"].to_numpy(), salt["target_id"].to_numpy()):
                raise ValueError(f"alignment {stage} {lang} {target}: salt and {method} were "
                                 "scored on different tokens")
            setting = (lang, source, target)
            for column, metric in (("hit_1", "p_at_1"), ("hit_10", "p_at_10")):
                hit = mcnemar(other[column].to_numpy(), salt[column].to_numpy())
                hit = type(hit)(100 * hit.diff, 100 * hit.se, hit.p, hit.test)
                lines.append(_line(f"alignment/{stage}", metric, setting, method, len(salt),
                                   100 * salt[column].mean(), 100 * other[column].mean(), hit))
            cos = paired_bootstrap(other["cos_centred"].to_numpy(),
                                   salt["cos_centred"].to_numpy(),
                                   derived_seed(stage, setting, method, seed))
            lines.append(_line(f"alignment/{stage}", "cos_centred", setting, method, len(salt),
                               salt["cos_centred"].mean(), other["cos_centred"].mean(), cos))
    return lines


def salt_vs_omp(transfer_zeroshot: list[str], alignment: list[str],
                seed: int) -> pd.DataFrame:
    lines = (zeroshot_lines(transfer_zeroshot, "transfer", seed)
             + alignment_lines(alignment, seed))
    frame = pd.DataFrame(lines, columns=COLUMNS)
    # the table is one family of tests, decided by the report's one rule (core/paired.py)
    frame["clears"] = holm(frame["p"].to_numpy(np.float64)) if len(frame) else []
    return frame


def _number(value: float, digits: int) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else (
        f"{value:.{digits}f}")


def salt_omp_markdown(frame: pd.DataFrame) -> str:
    parts = ["# SALT against OMP, paired", "",
             "OMP minus SALT per setting: zero-shot bits per byte of the transferred and the "
             "LAPT checkpoints (lower is better; per document), and on the miniature world the "
             f"new rows' alignment on the held-out concepts (P@1 in points, the centred cosine; "
             f"higher is better; per token). `*`: the paired test clears {CORRECTION} at "
             f"family-wise {FAMILY_ALPHA} over this table. `omp`: "
             "k = 64; `omp_salt_k`: k = SALT's median support size.", ""]
    if frame.empty:
        return "\n".join([*parts, "(no setting has both SALT and OMP)"]) + "\n"
    parts += ["| stage | metric | lang | source | target | method | items | SALT | OMP | "
              "OMP − SALT ± SE | p |",
              "|---|---|---|---|---|---|---:|---:|---:|---:|---:|"]
    for row in frame.itertuples():
        digits = 2 if row.metric.startswith("p_at_") else 4
        mark = "*" if row.clears else ""
        parts.append(
            f"| {row.stage} | {row.metric} | {row.lang} | {row.source} | {row.target} | "
            f"{row.method} | {row.items} | {_number(row.salt, digits)} | "
            f"{_number(row.omp, digits)} | {row.diff:+.{digits}f} ± {row.se:.{digits}f}{mark} "
            f"| {row.p:.3g} |")
    return "\n".join(parts) + "\n"


def write_salt_vs_omp(transfer_zeroshot: list[str], alignment: list[str],
                      csv_path: str | os.PathLike, md_path: str | os.PathLike,
                      seed: int) -> pd.DataFrame:
    frame = salt_vs_omp(transfer_zeroshot, alignment, seed)
    write_table(frame, salt_omp_markdown(frame), csv_path, md_path)
    return frame
