"""The alignment table: how well each method's new rows mean what their tokens mean.

Reads the per-token scores of :mod:`embtransfer.evaluation.alignment` (one file per stage,
language, source, target; the metrics, their chance levels and each token's ``split`` of the
truth are defined there) and hands each setting (stage, language, source, target PLM,
embedding side, split) and metric to the spine
(:func:`embtransfer.report.comparisons.compare_setting`, which names each metric's test):
P@10 and P@1 of retrieving the token's translation, the raw and centred cosines to the
oracle row. ``held_out``, the concepts no method was aligned on, is the headline; the
``dictionary`` concepts WECHSEL and OFA fitted their map on and ``none`` (no concept) are
reported apart. Each retrieval summary carries its chance level, averaged over the tokens.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from embtransfer.core import paths
from embtransfer.core.paired import derived_seed
from embtransfer.evaluation.alignment import COSINES
from embtransfer.report.comparisons import compare_setting
from embtransfer.world.split import SPLITS

SETTING = ["stage", "lang", "source", "target", "side", "split"]
#: The metrics a method is compared on, each beside its per-token column: P@10 first.
TESTED = {"p_at_10": "hit_10", "p_at_1": "hit_1", "cos_centred": "cos_centred",
          "cos_oracle": "cos_oracle"}


def read_alignment(files: list[str]) -> pd.DataFrame:
    """Every per-token score of ``files`` (:data:`paths.ALIGNMENT`), with the setting's
    identity read from each path."""
    parts = []
    for path in files:
        ident = paths.ALIGNMENT.parse(path)
        if ident is None:
            raise ValueError(f"{path} is not an alignment file ({paths.ALIGNMENT})")
        frame = pd.read_parquet(path)
        for key in ("stage", "lang", "source", "target"):
            frame.insert(0, key, ident[key])
        parts.append(frame)
    if not parts:
        return pd.DataFrame(columns=[*SETTING, "method", "target_id", "hit_1", "hit_10", *COSINES])
    return pd.concat(parts, ignore_index=True)


def alignment_lines(files: list[str], seed: int = 0
                    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(summary lines, test lines) of every setting and metric of ``files``' scores."""
    scores = read_alignment(files)
    summaries: list[dict[str, Any]] = []
    tests: list[dict[str, Any]] = []
    # the held-out split first: the headline (embtransfer.world.split.SPLITS' order)
    settings = sorted(scores.groupby(SETTING, sort=True),
                      key=lambda item: SPLITS.index(item[0][-1]) if item[0][-1] in SPLITS else 9)
    for setting, group in settings:
        by_method = {m: g.sort_values("target_id", kind="stable")
                     for m, g in group.groupby("method", sort=False)}
        ids = [tuple(g["target_id"]) for g in by_method.values()]
        if any(i != ids[0] for i in ids):
            raise ValueError(f"alignment {setting}: the methods were scored on different tokens")
        if len(ids[0]) < 2:
            continue
        first = next(iter(by_method.values()))
        for metric, column in TESTED.items():
            depth = metric.removeprefix("p_at_")
            chance = (100 * float(first[f"chance_{depth}"].mean())
                      if f"chance_{depth}" in first else float("nan"))
            key = dict(zip(SETTING, setting, strict=True)) | {"family": "alignment",
                                                              "metric": metric}
            lines, made = compare_setting(
                key, {m: g[column].to_numpy() for m, g in by_method.items()},
                derived_seed(setting, seed), chance=chance)
            summaries += lines
            tests += made
    return summaries, tests

