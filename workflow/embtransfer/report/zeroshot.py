"""The zero-shot comparison: every checkpoint's bits per byte on its language's held-out
text, before any training (family ``zeroshot``) or after LAPT (``lapt_zeroshot``).

From the records' per-document losses (:mod:`embtransfer.evaluation.zeroshot`) each
setting (language, source, target PLM) goes to the spine
(:func:`embtransfer.report.comparisons.compare_setting`: bits per byte, its paired ratio
tests). A flagged checkpoint's summary line says how many new rows the check of its record
(:mod:`embtransfer.transfer.row_check`) flags.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from embtransfer.report.comparisons import compare_setting
from embtransfer.report.records import ZEROSHOT_KEYS, MalformedResultError, read_records

#: The source model's setting has no target PLM: it reads the text with its own tokenizer.
OWN_TOKENIZER = "(source tokenizer)"
#: The per-document lists every zero-shot record carries (in document order).
DOCUMENT_KEYS = ("document_nll_nats", "document_bytes")
#: The families of the two stages.
FAMILIES = {"transfer": "zeroshot", "lapt": "lapt_zeroshot"}


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


def zeroshot_lines(files: list[str], seed: int, stage: str = "transfer"
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(summary lines, test lines) of every setting of ``files``' records."""
    settings: dict[tuple, dict[str, dict[str, Any]]] = {}
    for record in read_records(files, required=(*ZEROSHOT_KEYS, *DOCUMENT_KEYS)):
        setting = (record["lang"], record["source"], record.get("target") or OWN_TOKENIZER)
        settings.setdefault(setting, {})[record["method"]] = record
    summaries: list[dict[str, Any]] = []
    tests: list[dict[str, Any]] = []
    for setting in sorted(settings):
        records = settings[setting]
        losses = {method: document_bits(record) for method, record in records.items()}
        n_bytes = next(iter(losses.values()))[1]
        for method, (_, own) in losses.items():
            if not np.array_equal(own, n_bytes):
                raise MalformedResultError(
                    f"zero-shot {setting}: {method} was scored on other documents than "
                    f"{next(iter(losses))} ({records[method].get('_path')})")
        # only a transferred checkpoint has a row check (not the source model, not LAPT's)
        checks = {m: r["row_check"] for m, r in records.items()
                  if isinstance(r.get("row_check"), dict)}
        flags = {m: f"{int(c['flagged_rows'])} rows flagged" for m, c in checks.items()
                 if int(c["flagged_rows"])}
        key = dict(zip(("lang", "source", "target"), setting, strict=True)) | {
            "family": FAMILIES[stage], "stage": stage, "metric": "bits_per_byte"}
        lines, made = compare_setting(key, {m: nll for m, (nll, _) in losses.items()}, seed,
                                      n_bytes, flags)
        summaries += lines
        tests += made
    return summaries, tests
