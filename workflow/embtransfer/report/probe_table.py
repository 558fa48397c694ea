"""The target-PLM probe table: does each target PLM's input rows carry meaning?

Reads the records of :mod:`embtransfer.evaluation.plm_probes` (one per language, source and
target PLM) and writes ``plm_probes.csv`` (one line per PLM: :data:`COLUMNS`) and
``plm_probes.md``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from embtransfer.core import paths
from embtransfer.core.atomic import read_json, write_table
from embtransfer.evaluation.plm_probes import PROBES, Z_CLEARS
from embtransfer.report.tables import markdown

SETTING = ["lang", "source", "target"]
STATS = ["items", "mean", "random", "diff", "se", "z"]
COLUMNS = [
    *SETTING,
    *(f"{probe}_{stat}" for probe in PROBES for stat in STATS),
    "row_norm",
    "pairwise_cosine",
    "clears",
]


def _line(ident: dict[str, str], record: dict[str, Any]) -> dict[str, Any]:
    line: dict[str, Any] = {key: ident[key] for key in SETTING}
    measured = [p for p in PROBES if record.get(p) is not None]
    for probe in measured:
        line |= {f"{probe}_{stat}": record[probe][stat] for stat in STATS}
    line |= record["geometry"]
    line["clears"] = all((record[p]["z"] or 0.0) >= Z_CLEARS for p in measured)
    return line


def probe_frame(files: list[str]) -> pd.DataFrame:
    """One line per record in ``files`` (:data:`paths.PLM_PROBE`), sorted by setting. A
    probe no record measured (the class probe, which needs the miniature world's concept
    classes, in a real-text run) has no columns; ``clears``: every probe of the line's
    record clears."""
    lines = []
    for path in files:
        ident = paths.PLM_PROBE.parse(path)
        if ident is None:
            raise ValueError(f"{path} is not a PLM probe record ({paths.PLM_PROBE})")
        lines.append(_line(ident, read_json(path)))
    columns = COLUMNS
    if lines:
        probes = [p for p in PROBES if any(f"{p}_z" in line for line in lines)]
        columns = [c for c in COLUMNS if c.split("_")[0] not in PROBES or
                   c.split("_")[0] in probes]
    frame = pd.DataFrame(lines, columns=columns)
    return frame.sort_values(SETTING, kind="stable").reset_index(drop=True)


def measured_probes(frame: pd.DataFrame) -> list[str]:
    """The probes of a probe table (:func:`probe_frame`): those it has columns of."""
    return [p for p in PROBES if f"{p}_z" in frame.columns]


def _cell(line: Any, probe: str) -> str:
    z = getattr(line, f"{probe}_z")
    if z is None or pd.isna(z):
        return "—"
    return (
        f"{getattr(line, f'{probe}_mean'):.3f} vs {getattr(line, f'{probe}_random'):.3f}: "
        f"{getattr(line, f'{probe}_diff'):+.3f} ± {getattr(line, f'{probe}_se'):.3f} "
        f"(z {z:.1f}, n {getattr(line, f'{probe}_items')})"
    )


#: What each probe column of plm_probes.md measures.
PROBE_TEXT = {
    "span": ("span: neighbours vs random",
             "**span**: the share of a non-shared token's PLM row explained by least squares "
             "on its neighbours' PLM rows, against as many shared rows drawn at random (per "
             "token)."),
    "class": ("class: same class vs other classes",
              "**class**: the mean cosine between a non-shared token's PLM row and those of "
              "the other concepts of its class in the world (animals, foods, verbs of eating, "
              "...), against its mean cosine to the tokens of every other class (per token)."),
}
NO_CLASS = ("The class probe needs the miniature world's concept classes: it is not measured "
            "on real text.")


def probes_markdown(frame: pd.DataFrame) -> str:
    probes = measured_probes(frame)
    columns = {
        "language": frame["lang"],
        "source": frame["source"],
        "target PLM": frame["target"],
    }
    for probe in probes:
        columns[PROBE_TEXT[probe][0]] = [_cell(line, probe) for line in frame.itertuples()]
    clears = "both z" if len(probes) > 1 else "z"
    columns |= {
        "row norm": frame["row_norm"].map(lambda v: f"{v:.2f}"),
        "pairwise cos": frame["pairwise_cosine"].map(lambda v: f"{v:.3f}"),
        f"{clears} ≥ {Z_CLEARS:g}": frame["clears"].map(lambda v: "yes" if v else "no"),
    }
    intro = [
        "SALT rebuilds a non-shared token's row from its fastText neighbours' PLM rows, so "
        "the PLM's rows must carry what the neighbours say.",
        *(PROBE_TEXT[probe][1] for probe in probes),
        "Each cell: probe vs baseline, the paired difference ± its standard error, z and the "
        "items. Row norm and pairwise cosine: the mean over every input row (rows at "
        "initialisation: norm about the init std times sqrt(width), cosine about 0).",
    ]
    if "class" not in probes:
        intro.append(NO_CLASS)
    parts = [
        "# Do the target PLMs' input embeddings carry meaning?",
        "",
        " ".join(intro),
        "",
        markdown(pd.DataFrame(columns)),
    ]
    return "\n".join(parts) + "\n"


def write_probes(files: list[str], csv_path: str | Path, md_path: str | Path) -> pd.DataFrame:
    frame = probe_frame(files)
    write_table(frame, probes_markdown(frame), csv_path, md_path)
    return frame
