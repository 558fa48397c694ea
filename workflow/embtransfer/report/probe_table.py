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
from embtransfer.core.atomic import atomic_path, read_json
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
    for probe in PROBES:
        line |= {f"{probe}_{stat}": record[probe][stat] for stat in STATS}
    line |= record["geometry"]
    line["clears"] = all((record[p]["z"] or 0.0) >= Z_CLEARS for p in PROBES)
    return line


def probe_frame(files: list[str]) -> pd.DataFrame:
    """One line per record in ``files`` (:data:`paths.PLM_PROBE`), sorted by setting."""
    lines = []
    for path in files:
        ident = paths.PLM_PROBE.parse(path)
        if ident is None:
            raise ValueError(f"{path} is not a PLM probe record ({paths.PLM_PROBE})")
        lines.append(_line(ident, read_json(path)))
    frame = pd.DataFrame(lines, columns=COLUMNS)
    return frame.sort_values(SETTING, kind="stable").reset_index(drop=True)


def _cell(line: Any, probe: str) -> str:
    z = getattr(line, f"{probe}_z")
    if z is None or pd.isna(z):
        return "—"
    return (
        f"{getattr(line, f'{probe}_mean'):.3f} vs {getattr(line, f'{probe}_random'):.3f}: "
        f"{getattr(line, f'{probe}_diff'):+.3f} ± {getattr(line, f'{probe}_se'):.3f} "
        f"(z {z:.1f}, n {getattr(line, f'{probe}_items')})"
    )


def probes_markdown(frame: pd.DataFrame) -> str:
    table = pd.DataFrame(
        {
            "language": frame["lang"],
            "source": frame["source"],
            "target PLM": frame["target"],
            "span: neighbours vs random": [_cell(line, "span") for line in frame.itertuples()],
            "class: same class vs other classes": [
                _cell(line, "class") for line in frame.itertuples()
            ],
            "row norm": frame["row_norm"].map(lambda v: f"{v:.2f}"),
            "pairwise cos": frame["pairwise_cosine"].map(lambda v: f"{v:.3f}"),
            f"both z ≥ {Z_CLEARS:g}": frame["clears"].map(lambda v: "yes" if v else "no"),
        }
    )
    parts = [
        "# Do the target PLMs' input embeddings carry meaning?",
        "",
        "SALT rebuilds a non-shared token's row from its fastText neighbours' PLM rows, so "
        "the PLM's rows must carry what the neighbours say. **span**: the share of a "
        "non-shared token's PLM row explained by least squares on its neighbours' PLM rows, "
        "against as many shared rows drawn at random (per token). **class**: the mean cosine "
        "between a non-shared token's PLM row and those of the other concepts of its class in "
        "the world (animals, foods, verbs of eating, ...), against its mean cosine to the "
        "tokens of every other class (per token). Each cell: probe vs baseline, the paired "
        "difference ± its standard error, z and the items. Row norm and pairwise cosine: the "
        "mean over every input row (rows at initialisation: norm about the init std times "
        "sqrt(width), cosine about 0).",
        "",
        markdown(table),
    ]
    return "\n".join(parts) + "\n"


def write_probes(files: list[str], csv_path: str | Path, md_path: str | Path) -> pd.DataFrame:
    frame = probe_frame(files)
    with atomic_path(csv_path) as tmp:
        frame.to_csv(tmp, index=False)
    with atomic_path(md_path) as tmp:
        tmp.write_text(probes_markdown(frame), encoding="utf-8")
    return frame
