"""One Markdown table per setting, methods by metrics, from the spine's summaries and
decided comparisons (:mod:`embtransfer.report.comparisons`): the zero-shot, LAPT and
alignment tables and the findings' per-setting tables are all drawn here, so every mark is
the comparisons table's.

A cell is the value ± one standard error, then its marks (:data:`MARKS`); ``details``
adds each metric's differences from the best, Random and SALT with their p-values.
"""

from __future__ import annotations

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


def _number(value: float, digits: int) -> str:
    return "" if pd.isna(value) else f"{value:.{digits}f}"


def _cells(line: Any, tests: dict[tuple, Any], versus: tuple[str, ...]) -> dict[str, str]:
    """A summary line's cell (value ± se, its rank, its marks) and, per name in ``versus``,
    its difference from that method ± se (p), ``*`` where the test clears."""
    spec = metric_spec(line["metric"])
    found = {v: tests.get((*(line[k] for k in KEYS), line["method"], v))
             for v in ("best", "random", *versus)}
    relation = {v: "" if test is None else test["relation"] for v, test in found.items()}
    marks = MARKS["best"] if line["rank"] == 1 else ""
    marks += MARKS["vs_best"] if relation["best"] == "worse" else ""
    marks += {"better": MARKS["better_random"],
              "worse": MARKS["worse_random"]}.get(relation["random"], "")
    rank = "" if pd.isna(line["rank"]) else f" ({int(line['rank'])})"
    cells = {spec.label: f"{_number(line['value'], spec.digits)} ± "
                         f"{_number(line['se'], spec.digits)}{rank} {marks}".rstrip()}
    for other in versus:
        test, d = found[other], spec.digits
        cells[f"{spec.label} vs {other}"] = "" if test is None else (
            f"{test['diff']:+.{d}f} ± {test['se']:.{d}f} ({format_p(test['p'])})"
            + (" *" if test["clears"] else ""))
    return cells


def table_order(group: pd.DataFrame) -> pd.DataFrame:
    """The lines of ``group``'s first metric in the tables' order: shown lines first (the
    oracle, the source model), then by rank."""
    first = group[group["metric"] == group["metric"].iloc[0]] if len(group) else group
    return first.assign(_shown=first["rank"].notna()).sort_values(
        ["_shown", "rank", "method"], kind="stable").drop(columns="_shown")


def setting_table(group: pd.DataFrame, tests: dict[tuple, Any], details: bool = False,
                  versus: tuple[str, ...] = ("best", "random", "salt")) -> str:
    """The Markdown table of one setting's summary lines (one or more metrics)."""
    rows = []
    for method in table_order(group)["method"]:
        row = {"method": method}
        mine = group[group["method"] == method]
        for metric in dict.fromkeys(group["metric"]):
            line = mine[mine["metric"] == metric]
            if line.empty:
                row[metric_spec(metric).label] = ""
            else:
                row |= _cells(line.iloc[0], tests, versus if details else ())
        flags = sorted({flag for flag in mine["flags"].dropna() if flag})
        if flags:
            row["flags"] = "; ".join(flags)
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
