"""The alignment table: how well each method's new rows mean what their tokens mean.

Reads the per-token scores of :mod:`embtransfer.evaluation.alignment` (one file per stage,
language, source, target) and writes ``alignment.csv`` (one line per setting, split and
method: the columns of :data:`COLUMNS`, then the rank and the paired comparison with the
best method of the setting and split) and ``alignment.md``.

Every setting is scored per ``split`` of the truth (:mod:`embtransfer.world.split`):
``held_out``, the concepts no method was aligned on, is the headline and comes first;
``dictionary``, the concepts WECHSEL and OFA fitted their map on, and ``none`` (names,
affixes, particles: no concept) are reported apart. ``world_oracle`` is the upper bound,
not a competitor: it is shown first and never ranked. Ranks are taken over the competing
methods of a setting and split (by P@1, ties by the centred cosine), and only where two or
more compete. Each method's P@1 is compared with the best competitor's by McNemar's test
over the same tokens, its raw and centred cosines to the oracle row by a paired bootstrap
(:mod:`embtransfer.core.paired`); ``*`` marks a difference that clears the test.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from embtransfer.core import paths
from embtransfer.core.atomic import atomic_path
from embtransfer.core.paired import derived_seed, mcnemar, paired_bootstrap
from embtransfer.evaluation.alignment import COSINES, summary
from embtransfer.report.tables import ORACLE, markdown
from embtransfer.world.split import SPLITS

SETTING = ["stage", "lang", "source", "target", "side", "split"]
COLUMNS = [
    "lang",
    "source",
    "target",
    "method",
    "stage",
    "side",
    "split",
    "tokens",
    "p_at_1",
    "p_at_1_se",
    "p_at_10",
    "cos_oracle",
    "cos_oracle_se",
    "cos_centred",
    "cos_centred_se",
]
EXTRA = [
    "rank",
    "best",
    "p_at_1_vs_best",
    "p_at_1_vs_best_p",
    "cos_oracle_vs_best",
    "cos_oracle_vs_best_p",
    "cos_centred_vs_best",
    "cos_centred_vs_best_p",
]
#: The headings of the splits in alignment.md.
SPLIT_HEADINGS = {
    "held_out": "Held-out concepts (no method was aligned on them: the headline)",
    "dictionary": "Dictionary concepts (WECHSEL and OFA fitted their map on these pairs)",
    "none": "No concept (names, affixes, particles)",
}


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


def _versus(scores: pd.DataFrame, best: pd.DataFrame, seed: int) -> dict[str, float]:
    """A method's paired differences from the best method over the same tokens."""
    hit = mcnemar(scores["hit_1"].to_numpy(), best["hit_1"].to_numpy())
    line = {"p_at_1_vs_best": 100 * hit.diff, "p_at_1_vs_best_p": hit.p}
    for column in COSINES:
        cos = paired_bootstrap(scores[column].to_numpy(), best[column].to_numpy(), seed)
        line |= {f"{column}_vs_best": cos.diff, f"{column}_vs_best_p": cos.p}
    return line


def _setting_lines(setting: tuple, group: pd.DataFrame, seed: int) -> list[dict[str, Any]]:
    """The lines of one setting and split: every method's summary, rank and comparison."""
    by_method = {m: g.sort_values("target_id") for m, g in group.groupby("method", sort=False)}
    ids = [tuple(g["target_id"]) for g in by_method.values()]
    if any(i != ids[0] for i in ids):
        raise ValueError(f"alignment {setting}: the methods were scored on different tokens")
    stats = {m: summary(g) for m, g in by_method.items()}
    # P@1 first; ties (often all at 0) by the centred cosine, which a row at the mean
    # source row does not win
    competing = sorted(
        (m for m in by_method if m != ORACLE),
        key=lambda m: (-stats[m]["p_at_1"], -stats[m]["cos_centred"], m),
    )
    ranked = len(competing) >= 2
    best = competing[0] if ranked else None
    lines = []
    for method, scores in by_method.items():
        line = dict(zip(SETTING, setting, strict=True)) | {"method": method} | stats[method]
        line |= {
            "rank": (competing.index(method) + 1) if ranked and method != ORACLE else math.nan,
            "best": best or "",
        }
        if best is not None and method != best and len(scores) >= 2:
            line |= _versus(scores, by_method[best], derived_seed(setting, method, seed))
        else:
            line |= {k: math.nan for k in EXTRA[2:]}
        lines.append(line)
    return lines


def _split_rank(frame: pd.DataFrame) -> np.ndarray:
    return frame["split"].map(SPLITS.index).to_numpy()


def alignment_frame(scores: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """One line per (setting, split, method): :data:`COLUMNS` then :data:`EXTRA`, the
    held-out lines first."""
    lines: list[dict[str, Any]] = []
    for setting, group in scores.groupby(SETTING, sort=True):
        lines += _setting_lines(setting, group, seed)
    frame = pd.DataFrame(lines, columns=[*SETTING, "method", *COLUMNS[7:], *EXTRA])
    frame = frame[COLUMNS + EXTRA]
    order = np.argsort(_split_rank(frame), kind="stable")
    return frame.iloc[order].reset_index(drop=True)


def _vs_best(diff: float, p: float, digits: int) -> str:
    if math.isnan(diff):
        return ""
    mark = " *" if p < 0.05 else ""
    return f"{diff:+.{digits}f} (p {p:.3f}){mark}"


def _with_se(values: pd.Series, errors: pd.Series, digits: int) -> list[str]:
    return [f"{v:.{digits}f} ± {s:.{digits}f}" for v, s in zip(values, errors, strict=True)]


def _setting_table(group: pd.DataFrame) -> pd.DataFrame:
    """The markdown table of one setting and split: the oracle first, then by rank."""
    group = group.assign(_o=(group["method"] != ORACLE).astype(int)).sort_values(
        ["_o", "rank", "method"]
    )
    return pd.DataFrame(
        {
            "method": group["method"] + np.where(group["method"] == ORACLE, " (upper bound)", ""),
            "rank": group["rank"].map(lambda r: "" if math.isnan(r) else str(int(r))),
            "P@1": _with_se(group["p_at_1"], group["p_at_1_se"], 1),
            "P@10": group["p_at_10"].map(lambda v: f"{v:.1f}"),
            "cos to oracle": _with_se(group["cos_oracle"], group["cos_oracle_se"], 3),
            "centred cos": _with_se(group["cos_centred"], group["cos_centred_se"], 3),
            "P@1 vs best": [
                _vs_best(d, p, 1)
                for d, p in zip(group["p_at_1_vs_best"], group["p_at_1_vs_best_p"], strict=True)
            ],
            "centred cos vs best": [
                _vs_best(d, p, 3)
                for d, p in zip(
                    group["cos_centred_vs_best"], group["cos_centred_vs_best_p"], strict=True
                )
            ],
        }
    )


INTRO = (
    "Over the non-shared target tokens whose meaning the miniature world knows: P@1 and "
    "P@10 of retrieving the token's translation among all source text rows by cosine, the "
    "cosine to the oracle row (the mean source row of the translation) and the centred "
    "cosine (both rows less the source's mean text row of that side: a row at the mean "
    "scores 0), each `±` one standard error. The held-out concepts come first: no method "
    "was aligned on them; WECHSEL and OFA fitted their map on the dictionary concepts. "
    "`world_oracle` is the upper bound and is not ranked; ranks are over the competing "
    "methods of a setting (by P@1, ties by the centred cosine). `vs best`: the difference "
    "from the setting's best method over the same tokens (P@1 by McNemar's test, cosine by "
    "a paired bootstrap; the raw cosine's is in alignment.csv); `*` marks p < 0.05."
)


def alignment_markdown(frame: pd.DataFrame) -> str:
    parts = ["# Alignment of the new rows with the world's truth", "", INTRO]
    for split in [s for s in SPLITS if (frame["split"] == s).any()]:
        parts += ["", f"## {SPLIT_HEADINGS[split]}"]
        part = frame[frame["split"] == split]
        for setting, group in part.groupby(
            ["stage", "lang", "source", "target", "side"], sort=True
        ):
            stage, lang, source, target, side = setting
            tokens = int(group["tokens"].iloc[0])
            parts += [
                "",
                f"### {stage}: {lang}, source {source}, target {target}, {side} "
                f"embeddings, {split.replace('_', '-')} ({tokens} tokens)",
                "",
                markdown(_setting_table(group)),
            ]
    return "\n".join(parts) + "\n"


def write_alignment(
    files: list[str], csv_path: str | Path, md_path: str | Path, seed: int = 0
) -> pd.DataFrame:
    frame = alignment_frame(read_alignment(files), seed)
    with atomic_path(csv_path) as tmp:
        frame.to_csv(tmp, index=False)
    with atomic_path(md_path) as tmp:
        tmp.write_text(alignment_markdown(frame), encoding="utf-8")
    return frame
