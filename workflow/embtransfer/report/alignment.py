"""The alignment table: how well each method's new rows mean what their tokens mean.

Reads the per-token scores of :mod:`embtransfer.evaluation.alignment` (one file per stage,
language, source, target) and writes ``alignment.csv`` (one line per setting and method:
the columns of :data:`COLUMNS`, then the rank and the paired comparison with the setting's
best method) and ``alignment.md``.

``world_oracle`` is the upper bound, not a competitor: it is shown first and never ranked.
Ranks are taken over the competing methods of a setting, and only where two or more
compete. Each method's P@1 is compared with the best competitor's by McNemar's test over
the same tokens, its cosine to the oracle row by a paired bootstrap
(:mod:`embtransfer.report.paired`); ``*`` marks a difference that clears the test.
"""

from __future__ import annotations

import math
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from embtransfer.core import paths
from embtransfer.core.atomic import atomic_path
from embtransfer.evaluation.alignment import summary
from embtransfer.report.paired import mcnemar, paired_bootstrap
from embtransfer.report.tables import ORACLE, markdown

SETTING = ["stage", "lang", "source", "target", "side"]
COLUMNS = ["lang", "source", "target", "method", "stage", "side", "tokens", "p_at_1",
           "p_at_1_se", "p_at_10", "cos_oracle", "cos_oracle_se"]
EXTRA = ["rank", "best", "p_at_1_vs_best", "p_at_1_vs_best_p", "cos_oracle_vs_best",
         "cos_oracle_vs_best_p"]


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
        return pd.DataFrame(columns=[*SETTING, "method", "target_id", "hit_1", "hit_10",
                                     "cos_oracle"])
    return pd.concat(parts, ignore_index=True)


def _seed(setting: tuple, method: str, seed: int) -> int:
    return zlib.crc32(repr((setting, method, seed)).encode())


def alignment_frame(scores: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """One line per (setting, method): :data:`COLUMNS` then :data:`EXTRA`."""
    lines: list[dict[str, Any]] = []
    for setting, group in scores.groupby(SETTING, sort=True):
        by_method = {m: g.sort_values("target_id") for m, g in group.groupby("method", sort=False)}
        ids = [tuple(g["target_id"]) for g in by_method.values()]
        if any(i != ids[0] for i in ids):
            raise ValueError(f"alignment {setting}: the methods were scored on different tokens")
        stats = {m: summary(g) for m, g in by_method.items()}
        competing = sorted((m for m in by_method if m != ORACLE),
                           key=lambda m: (-stats[m]["p_at_1"], -stats[m]["cos_oracle"], m))
        ranked = len(competing) >= 2
        best = competing[0] if ranked else None
        for method, group_scores in by_method.items():
            line = dict(zip(SETTING, setting, strict=True)) | {"method": method} | stats[method]
            line |= {"rank": (competing.index(method) + 1) if ranked and method != ORACLE
                     else math.nan, "best": best or ""}
            comparable = best is not None and method != best and len(group_scores) >= 2
            if comparable:
                other = by_method[best]
                hit = mcnemar(group_scores["hit_1"].to_numpy(), other["hit_1"].to_numpy())
                cos = paired_bootstrap(group_scores["cos_oracle"].to_numpy(),
                                       other["cos_oracle"].to_numpy(),
                                       _seed(setting, method, seed))
                line |= {"p_at_1_vs_best": 100 * hit.diff, "p_at_1_vs_best_p": hit.p,
                         "cos_oracle_vs_best": cos.diff, "cos_oracle_vs_best_p": cos.p}
            else:
                line |= {k: math.nan for k in EXTRA[2:]}
            lines.append(line)
    frame = pd.DataFrame(lines, columns=[*SETTING, "method", *COLUMNS[6:], *EXTRA])
    return frame[COLUMNS + EXTRA]


def _vs_best(diff: float, p: float, digits: int) -> str:
    if math.isnan(diff):
        return ""
    mark = " *" if p < 0.05 else ""
    return f"{diff:+.{digits}f} (p {p:.3f}){mark}"


def alignment_markdown(frame: pd.DataFrame) -> str:
    parts = [
        "# Alignment of the new rows with the world's truth",
        "",
        "Over the non-shared target tokens whose meaning the miniature world knows: P@1 and "
        "P@10 of retrieving the token's translation among all source text rows by cosine, and "
        "the cosine to the oracle row (the mean source row of the translation), each `±` one "
        "standard error. `world_oracle` is the upper bound and is not ranked; ranks are over "
        "the competing methods of a setting. `vs best`: the difference from the setting's "
        "best method over the same tokens (P@1 by McNemar's test, cosine by a paired "
        "bootstrap); `*` marks p < 0.05.",
    ]
    for setting, group in frame.groupby(["stage", "lang", "source", "target", "side"],
                                        sort=True):
        stage, lang, source, target, side = setting
        group = group.assign(_o=(group["method"] != ORACLE).astype(int)).sort_values(
            ["_o", "rank", "method"])
        table = pd.DataFrame({
            "method": group["method"] + np.where(group["method"] == ORACLE, " (upper bound)", ""),
            "rank": group["rank"].map(lambda r: "" if math.isnan(r) else str(int(r))),
            "P@1": [f"{v:.1f} ± {s:.1f}" for v, s in zip(group["p_at_1"], group["p_at_1_se"],
                                                        strict=True)],
            "P@10": group["p_at_10"].map(lambda v: f"{v:.1f}"),
            "cos to oracle": [f"{v:.3f} ± {s:.3f}" for v, s in
                              zip(group["cos_oracle"], group["cos_oracle_se"], strict=True)],
            "P@1 vs best": [_vs_best(d, p, 1) for d, p in zip(
                group["p_at_1_vs_best"], group["p_at_1_vs_best_p"], strict=True)],
            "cos vs best": [_vs_best(d, p, 3) for d, p in zip(
                group["cos_oracle_vs_best"], group["cos_oracle_vs_best_p"], strict=True)],
        })
        tokens = int(group["tokens"].iloc[0])
        parts += ["", f"## {stage}: {lang}, source {source}, target {target}, {side} "
                  f"embeddings ({tokens} tokens)", "", markdown(table)]
    return "\n".join(parts) + "\n"


def write_alignment(files: list[str], csv_path: str | Path, md_path: str | Path,
                    seed: int = 0) -> pd.DataFrame:
    frame = alignment_frame(read_alignment(files), seed)
    with atomic_path(csv_path) as tmp:
        frame.to_csv(tmp, index=False)
    with atomic_path(md_path) as tmp:
        tmp.write_text(alignment_markdown(frame), encoding="utf-8")
    return frame
