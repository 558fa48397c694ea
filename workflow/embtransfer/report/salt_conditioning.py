"""SALT's conditioning per setting: how close its neighbour sets come to the target PLM's
width, how many are rank-deficient, and how much the least squares amplifies.

Reads the regression records (:data:`paths.REGRESSION_META`, their ``stats.conditioning``:
:func:`embtransfer.transfer.regression.conditioning_summary`) and writes
``salt_conditioning.csv`` (one line per setting: :data:`COLUMNS`) and
``salt_conditioning.md``. Where k nears the PLM's width h the neighbours' Gram matrix is
nearly singular and the projected rows can be many times longer than the source rows they
combine (docs/methods.md, "SALT's conditioning").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from embtransfer.core import paths
from embtransfer.core.atomic import read_json, write_table
from embtransfer.report.records import MalformedResultError
from embtransfer.report.tables import markdown
from embtransfer.report.texts import prose

SETTING = ["lang", "source", "target"]
QUANTILES = ["median", "p90", "p99", "max"]
COLUMNS = [*SETTING, "h_t", "projected", *(f"k_over_h_{q}" for q in QUANTILES),
           "n_rank_deficient", "rank_deficient_share",
           *(f"amplification_{q}" for q in QUANTILES)]


def conditioning_frame(files: list[str]) -> pd.DataFrame:
    """One line per regression record in ``files``, sorted by setting."""
    lines = []
    for path in files:
        ident = paths.REGRESSION_META.parse(path)
        if ident is None:
            raise ValueError(f"{path} is not a SALT regression record ({paths.REGRESSION_META})")
        try:
            stats = read_json(path)["stats"]
            cond = stats["conditioning"]
            lines.append({key: ident[key] for key in SETTING} | {
                "h_t": cond["h_t"], "projected": stats["counts"]["projected"],
                **{f"k_over_h_{q}": cond["k_over_h"][q] for q in QUANTILES},
                **{key: cond[key] for key in ("n_rank_deficient", "rank_deficient_share")},
                **{f"amplification_{q}": cond["amplification"][q] for q in QUANTILES}})
        except (KeyError, TypeError) as err:
            raise MalformedResultError(
                f"SALT regression record {path} lacks its conditioning ({err!r}); it predates "
                "the conditioning statistics: delete it and rerun the salt_regression rule"
            ) from None
    frame = pd.DataFrame(lines, columns=COLUMNS)
    return frame.sort_values(SETTING, kind="stable").reset_index(drop=True)


def _number(value: Any, digits: int = 2, scale: float = 1.0, unit: str = "") -> str:
    return "—" if pd.isna(value) else f"{scale * value:.{digits}f}{unit}"


def conditioning_markdown(frame: pd.DataFrame) -> str:
    parts = [prose("conditioning.title"), prose("conditioning.intro")]
    if frame.empty:
        return "\n\n".join([*parts, prose("conditioning.empty")]) + "\n"
    columns = {
        "language": frame["lang"], "source": frame["source"], "target PLM": frame["target"],
        "h": frame["h_t"], "projected": frame["projected"],
        **{f"k/h {q}": frame[f"k_over_h_{q}"].map(_number) for q in QUANTILES},
        "rank-deficient": frame["rank_deficient_share"].map(lambda v: _number(v, 1, 100, " %")),
        **{f"amplification {q}": frame[f"amplification_{q}"].map(_number)
           for q in ("median", "p99", "max")},
    }
    return "\n\n".join([*parts, markdown(pd.DataFrame(columns))]) + "\n"


def write_salt_conditioning(files: list[str], csv_path: str | Path,
                            md_path: str | Path) -> pd.DataFrame:
    frame = conditioning_frame(files)
    write_table(frame, conditioning_markdown(frame), csv_path, md_path)
    return frame
