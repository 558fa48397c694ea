"""The source's quality floor: is the source LLM a language model of its own language?

Reads rule source_floor's records (:data:`embtransfer.core.paths.SOURCE_FLOOR`,
:mod:`embtransfer.evaluation.lm_floor`) and writes ``source_floor.{csv,md}``: per source,
its bits per byte on its language's held-out text beside the add-one unigram and the
Kneser–Ney bigram of its own tokens (both fitted on its training text) and whether it
clears them (:data:`~embtransfer.evaluation.lm_floor.FLOOR_MARGIN` below the unigram and
below the bigram); then the control lines: the same source with its own tokenizer on each
target language's held-out text (the zero-shot table's ``source_model``), the reference
every transferred checkpoint stands beside.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import pandas as pd

from embtransfer.core import paths
from embtransfer.core.atomic import read_json, write_table
from embtransfer.core.paired import ratio_se
from embtransfer.report.records import read_records
from embtransfer.report.tables import markdown
from embtransfer.report.texts import prose

#: ``text``: ``held-out`` (the floor's line, the source's own language) or ``control``.
FLOOR_COLUMNS = [
    "source", "lang", "text", "documents", "bytes", "bits_per_byte", "bits_per_byte_se",
    "unigram_bits_per_byte", "kn_bigram_bits_per_byte", "below_unigram", "below_kn_bigram",
    "clears_floor",
]  # fmt: skip


def _se(nll_nats: list[float], n_bytes: list[int]) -> float:
    nll = np.asarray(nll_nats, np.float64) / math.log(2)
    return ratio_se(nll, np.asarray(n_bytes, np.float64)) if nll.size >= 2 else math.nan


def floor_frame(floor_files: list[str], languages: dict[str, str],
                zeroshot_files: list[str]) -> pd.DataFrame:
    """One ``held-out`` line per floor record (``languages``: source -> its language), then
    one ``control`` line (no floor columns) per source-model zero-shot record of
    ``zeroshot_files`` of a source with a floor record (other records are skipped)."""
    lines: list[dict[str, Any]] = []
    for path in floor_files:
        source = paths.SOURCE_FLOOR.parse(path)["source"]
        record = read_json(path)
        lines.append({
            "source": source, "lang": languages[source], "text": "held-out",
            "bits_per_byte": record["model_bits_per_byte"],
            "bits_per_byte_se": _se(record["document_nll_nats"]["model"],
                                    record["document_bytes"]),
            **{k: record[k] for k in ("documents", "bytes", "unigram_bits_per_byte",
                                      "kn_bigram_bits_per_byte", "below_unigram",
                                      "below_kn_bigram", "clears_floor")},
        })
    floored = {line["source"] for line in lines}
    controls = [r for r in read_records([p for p in zeroshot_files
                                         if paths.ZEROSHOT_SOURCE.parse(p)])
                if r["source"] in floored]
    for record in sorted(controls, key=lambda r: (r["source"], r["lang"])):
        lines.append({
            "source": record["source"], "lang": record["lang"], "text": "control",
            "documents": len(record.get("document_bytes", [])) or math.nan,
            "bytes": record.get("bytes", math.nan), "bits_per_byte": record["bits_per_byte"],
            "bits_per_byte_se": _se(record.get("document_nll_nats", []),
                                    record.get("document_bytes", [])),
        })
    return pd.DataFrame(lines, columns=FLOOR_COLUMNS)


def _bits(lines: pd.DataFrame) -> list[str]:
    return [f"{v:.4f}" + ("" if math.isnan(se) else f" ± {se:.4f}")
            for v, se in zip(lines["bits_per_byte"], lines["bits_per_byte_se"], strict=True)]


def floor_markdown(frame: pd.DataFrame) -> str:
    # lm_floor imports torch: the report's inputs (and so the Snakefile) import this module
    from embtransfer.evaluation.lm_floor import FLOOR_MARGIN  # noqa: PLC0415 (Snakefile start-up)

    parts = [prose("source_floor.title"),
             prose("source_floor.intro", margin=f"{100 * FLOOR_MARGIN:.0f}")]
    floor, control = frame[frame["text"] == "held-out"], frame[frame["text"] == "control"]
    if floor.empty:
        return "\n\n".join([*parts, prose("source_floor.empty")]) + "\n"
    parts += [prose("source_floor.held_out"), markdown(pd.DataFrame({
        "source": floor["source"], "language": floor["lang"], "bits per byte": _bits(floor),
        "add-one unigram": floor["unigram_bits_per_byte"],
        "Kneser–Ney bigram": floor["kn_bigram_bits_per_byte"],
        "below unigram": floor["below_unigram"].map(lambda v: f"{100 * v:.1f} %"),
        "below bigram": floor["below_kn_bigram"].map(lambda v: f"{100 * v:.1f} %"),
        "clears": floor["clears_floor"].map(lambda v: "yes" if v else "no"),
    }))]
    if len(control):
        parts += [prose("source_floor.control"), markdown(pd.DataFrame({
            "source": control["source"], "language": control["lang"],
            "bits per byte": _bits(control)}))]
    return "\n\n".join(parts) + "\n"


def write_source_floor(floor_files: list[str], languages: dict[str, str],
                       zeroshot_files: list[str], csv_path: str | os.PathLike,
                       md_path: str | os.PathLike) -> pd.DataFrame:
    frame = floor_frame(floor_files, languages, zeroshot_files)
    write_table(frame, floor_markdown(frame), csv_path, md_path)
    return frame
