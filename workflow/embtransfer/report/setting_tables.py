"""One Markdown table per setting, methods by metrics, from the spine's summaries and
decided comparisons (:mod:`embtransfer.report.comparisons`): the zero-shot, LAPT and
alignment tables and the findings' per-setting tables are all drawn here, so every mark is
the comparisons table's.

A cell is the value ± one standard error, then its marks (:data:`MARKS`); ``details``
adds each metric's differences from the best, Random and SALT with their p-values.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from embtransfer.report.comparisons import KEYS, metric_spec
from embtransfer.report.tables import format_p, markdown

#: The marks of a cell: best of its setting; apart from (worse than) the best; better than
#: Random; worse than Random (no working method should be).
MARKS = {"best": "▲", "vs_best": "▽", "better_random": "ʳ", "worse_random": "!"}
LEGEND = (f"`{MARKS['best']}` best of the setting; `{MARKS['vs_best']}` apart from the best "
          f"(worse); `{MARKS['better_random']}` better than Random; `{MARKS['worse_random']}` "
          "worse than Random; unmarked: not apart, or not tested (the oracle and the source "
          "model are shown, never ranked).")
SETTING = [k for k in KEYS if k not in ("family", "metric")]


def _marks(line: Any, tests: dict[tuple, Any]) -> str:
    key = tuple(line[k] for k in KEYS) + (line["method"],)
    marks = MARKS["best"] if line["rank"] == 1 else ""
    vs_best, vs_random = tests.get((*key, "best")), tests.get((*key, "random"))
    if vs_best is not None and vs_best["relation"] == "worse":
        marks += MARKS["vs_best"]
    if vs_random is not None and vs_random["relation"] != "not apart":
        marks += MARKS["better_random" if vs_random["relation"] == "better" else "worse_random"]
    return marks


def _number(value: float, digits: int) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) \
        else f"{value:.{digits}f}"


def _versus(line: Any, tests: dict[tuple, Any], versus: str, digits: int) -> str:
    test = tests.get(tuple(line[k] for k in KEYS) + (line["method"], versus))
    if test is None:
        return ""
    return (f"{test['diff']:+.{digits}f} ± {test['se']:.{digits}f} ({format_p(test['p'])})"
            + (" *" if test["clears"] else ""))


def _order(group: pd.DataFrame) -> pd.DataFrame:
    """Shown lines first (the oracle, the source model), then by rank on the first metric."""
    first = group[group["metric"] == group["metric"].iloc[0]]
    order = first.assign(_shown=first["rank"].notna()).sort_values(
        ["_shown", "rank", "method"], kind="stable")["method"].tolist()
    return order


def setting_table(group: pd.DataFrame, tests: dict[tuple, Any], details: bool = False,
                  versus: tuple[str, ...] = ("best", "random", "salt")) -> str:
    """The Markdown table of one setting's summary lines (one or more metrics)."""
    metrics = list(dict.fromkeys(group["metric"]))
    rows = []
    for method in _order(group):
        row = {"method": method}
        for metric in metrics:
            spec = metric_spec(metric)
            line = group[(group["metric"] == metric) & (group["method"] == method)]
            if line.empty:
                row[spec.label] = ""
                continue
            line = line.iloc[0]
            rank = "" if pd.isna(line["rank"]) else f" ({int(line['rank'])})"
            row[spec.label] = (f"{_number(line['value'], spec.digits)} ± "
                               f"{_number(line['se'], spec.digits)}{rank} {_marks(line, tests)}"
                               ).rstrip()
            if details:
                for other in versus:
                    row[f"{spec.label} vs {other}"] = _versus(line, tests, other, spec.digits)
        flags = group.loc[group["method"] == method, "flags"].dropna()
        if flags.astype(bool).any():
            row["flags"] = "; ".join(sorted(set(flags[flags.astype(bool)])))
        rows.append(row)
    frame = pd.DataFrame(rows).fillna("")
    if details:  # a comparison no method has is no column
        frame = frame.loc[:, [c for c in frame.columns if frame[c].astype(bool).any()
                              or " vs " not in c]]
    return markdown(frame)


def heading(line: Any) -> str:
    """A setting's heading: its stage, language, source, target, side and split."""
    parts = [f"{line['lang']}, source {line['source']}, target {line['target']}"]
    if line["side"]:
        parts.append(f"{line['side']} rows")
    if line["split"]:
        parts.append(str(line["split"]).replace("_", "-"))
    stage = f"{line['stage']}: " if line["stage"] else ""
    return stage + ", ".join(parts) + f" (n = {int(line['n'])})"


def setting_sections(summaries: pd.DataFrame, tests: dict[tuple, Any], level: int = 2,
                     details: bool = False) -> list[str]:
    """A heading and a table per setting of ``summaries``, in their order."""
    parts: list[str] = []
    for _, group in summaries.groupby(SETTING, sort=False):
        parts += ["", f"{'#' * level} {heading(group.iloc[0])}", "",
                  setting_table(group, tests, details).rstrip("\n")]
    return parts
