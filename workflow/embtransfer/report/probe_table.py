"""The target-PLM probe table: does each target PLM's input rows carry meaning?

Reads the records of :mod:`embtransfer.evaluation.plm_probes` (one per language, source and
target PLM) and writes ``plm_probes.csv`` (one line per PLM: :data:`COLUMNS`) and
``plm_probes.md``. Each probe's line gives both sides of its paired comparison (for the span
probe the share of a row in its neighbours' span and in as many random rows' span, so the
baseline a z stands on is in view), the difference, its standard error and z.

Whether a PLM carries meaning is decided by the report's one rule: each probe is a test
against its baseline (:func:`probe_tests`) in the comparisons table, and ``carries`` (every
probe better) reads the decided table, as report.md and the findings do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from embtransfer.core import paths
from embtransfer.core.atomic import read_json, write_table
from embtransfer.core.paired import CORRECTION, FAMILY_ALPHA, normal_p
from embtransfer.evaluation.plm_probes import PROBES
from embtransfer.report.comparisons import given_test
from embtransfer.report.tables import markdown
from embtransfer.report.texts import prose

SETTING = ["lang", "source", "target"]
#: The two sides of each probe's paired comparison: the record's ``mean`` and ``random``.
SIDES = {"span": ("neighbors_share", "random_share"), "class": ("same_cosine", "other_cosine")}
COLUMNS = [*SETTING, *(f"{probe}_{stat}" for probe in PROBES
                       for stat in ("items", *SIDES[probe], "diff", "se", "z")),
           "row_norm", "pairwise_cosine", "carries"]


def probe_tests(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Each probe of each PLM as a test against its random baseline (the normal two-sided
    p-value of its z), family ``plm_probes``: the spine decides them
    (:func:`embtransfer.report.comparisons.decide`). A z that is missing is no test."""
    return [given_test({key: line[key] for key in SETTING}
                       | {"family": "plm_probes", "metric": f"{probe}_probe"},
                       line["target"], float(z), 1.0, normal_p(z), "normal")
            for line in frame.to_dict("records") for probe in measured_probes(frame)
            if not pd.isna(z := line[f"{probe}_z"])]


def carries_meaning(decided: pd.DataFrame) -> pd.Series:
    """Per target PLM (language, source, target) of the decided comparisons: every probe of
    the table better than its baseline; a probe it has no test of is not passed."""
    probes = decided[decided["family"] == "plm_probes"]
    measured = probes["metric"].nunique()
    return probes.groupby(SETTING)["relation"].apply(
        lambda r: bool((r == "better").sum() == measured))


def probe_frame(files: list[str]) -> pd.DataFrame:
    """One line per record in ``files`` (:data:`paths.PLM_PROBE`), sorted by setting. A
    probe no record measured (the class probe, which needs the miniature world's concept
    classes, in a real-text run) has no columns; ``carries`` is added from the decided
    comparisons (:func:`write_probes`)."""
    lines = []
    for path in files:
        ident = paths.PLM_PROBE.parse(path)
        if ident is None:
            raise ValueError(f"{path} is not a PLM probe record ({paths.PLM_PROBE})")
        record = read_json(path)
        line: dict[str, Any] = {key: ident[key] for key in SETTING}
        for probe in [p for p in PROBES if record.get(p) is not None]:
            names = {"items": "items", "mean": SIDES[probe][0], "random": SIDES[probe][1],
                     "diff": "diff", "se": "se", "z": "z"}
            line |= {f"{probe}_{name}": record[probe][key] for key, name in names.items()}
        lines.append(line | record["geometry"])
    dropped = [p for p in PROBES if lines and not any(f"{p}_z" in line for line in lines)]
    frame = pd.DataFrame(lines, columns=[c for c in COLUMNS[:-1]
                                         if c.split("_")[0] not in dropped])
    return frame.sort_values(SETTING, kind="stable").reset_index(drop=True)


def measured_probes(frame: pd.DataFrame) -> list[str]:
    """The probes of a probe table (:func:`probe_frame`): those it has columns of."""
    return [p for p in PROBES if f"{p}_z" in frame.columns]


def _cell(line: Any, probe: str) -> str:
    if pd.isna(z := getattr(line, f"{probe}_z")):
        return "—"
    ours, baseline, diff, se, items = (getattr(line, f"{probe}_{stat}")
                                       for stat in (*SIDES[probe], "diff", "se", "items"))
    return f"{ours:.3f} vs {baseline:.3f}: {diff:+.3f} ± {se:.3f} (z {z:.1f}, n {items})"


def probes_markdown(frame: pd.DataFrame, alpha: float = FAMILY_ALPHA) -> str:
    probes = measured_probes(frame)
    columns = {"language": frame["lang"], "source": frame["source"], "target PLM": frame["target"]}
    columns |= {prose(f"probes.{probe}_column"): [_cell(line, probe) for line in frame.itertuples()]
                for probe in probes}
    columns |= {
        "row norm": frame["row_norm"].map(lambda v: f"{v:.2f}"),
        "pairwise cos": frame["pairwise_cosine"].map(lambda v: f"{v:.3f}"),
        "carries meaning": frame["carries"].map(lambda v: "yes" if v else "no"),
    }
    intro = [prose("probes.intro"), *(prose(f"probes.{probe}") for probe in probes),
             prose("probes.cells", correction=CORRECTION, alpha=alpha)]
    if "class" not in probes:
        intro.append(prose("probes.no_class"))
    table = markdown(pd.DataFrame(columns))
    return "\n\n".join([prose("probes.title"), " ".join(intro), table]) + "\n"


def write_probes(frame: pd.DataFrame, decided: pd.DataFrame, csv_path: str | Path,
                 md_path: str | Path) -> pd.DataFrame:
    """``frame`` with ``carries``: :func:`carries_meaning` per line (a PLM without tests
    does not carry), written as the table's csv and Markdown."""
    keys = pd.MultiIndex.from_frame(frame[SETTING].astype(str))
    verdict = carries_meaning(decided).reindex(keys).fillna(False)
    frame = frame.assign(carries=verdict.to_numpy(bool))
    write_table(frame, probes_markdown(frame, decided.attrs.get("alpha", FAMILY_ALPHA)),
                csv_path, md_path)
    return frame
