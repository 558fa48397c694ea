"""The alignment table: how well each method's new rows mean what their tokens mean.

Reads the per-token scores of :mod:`embtransfer.evaluation.alignment` (one file per stage,
language, source, target) and writes ``alignment.csv`` (one line per setting, split and
method: the columns of :data:`COLUMNS`, then the rank and the paired comparisons with the
best method of the setting and split and with Random) and ``alignment.md``.

Every setting is scored per ``split`` of the truth (:mod:`embtransfer.world.split`):
``held_out``, the concepts no method was aligned on, is the headline and comes first;
``dictionary``, the concepts WECHSEL and OFA fitted their map on, and ``none`` (names,
affixes, particles: no concept) are reported apart. ``world_oracle`` is the upper bound of
these metrics, not a competitor: it is shown first and never ranked. Ranks are taken over
the competing methods of a setting and split (by P@10, the retrieval depth that separates
methods whose P@1 is a handful of tokens; ties by the centred cosine, then P@1), and only
where two or more compete. Each method's P@1 and P@10 are compared with the best
competitor's and with Random's by McNemar's test over the same tokens, its raw and centred
cosines to the oracle row by a paired bootstrap (:mod:`embtransfer.core.paired`); ``*``
marks a difference that clears the report's corrected test (:func:`alignment_clears`).

What the retrieval tests could detect is stated beside them (:data:`POWER`): each setting's
chance P@1 and P@10 (a ranking that ignores the rows,
:func:`embtransfer.evaluation.alignment.chance_hits`, averaged over its tokens) and the
fewest discordant tokens a P@k difference needs to clear even the table's strictest Holm step
(:func:`detectable_discordant`); where no pair of competing methods differs by that many, the
setting cannot separate methods by that metric (:func:`powerless`, :func:`no_power_text`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from embtransfer.core import paths
from embtransfer.core.atomic import write_table
from embtransfer.core.paired import (
    CORRECTION,
    FAMILY_ALPHA,
    binomial_two_sided,
    derived_seed,
    family_clears,
    mcnemar,
    paired_bootstrap,
)
from embtransfer.evaluation.alignment import COSINES, DEPTHS, summary
from embtransfer.report.tables import ORACLE, RANDOM, format_p, markdown
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
    "p_at_10_se",
    "cos_oracle",
    "cos_oracle_se",
    "cos_centred",
    "cos_centred_se",
]
#: The metrics a method is compared on: the retrieval hits (McNemar), then the cosines
#: (paired bootstrap); each column of the per-token scores beside its summary's name.
TESTED = {"p_at_1": "hit_1", "p_at_10": "hit_10", "cos_oracle": "cos_oracle",
          "cos_centred": "cos_centred"}
#: What each method is compared with: the setting's best competitor, and Random.
VERSUS = ("best", "random")
EXTRA = [
    "rank",
    "best",
    *(f"{metric}_vs_{other}{end}" for other in VERSUS for metric in TESTED for end in ("", "_p")),
]
#: The p-value columns: one family of tests (:func:`alignment_clears`).
P_COLUMNS = [c for c in EXTRA if c.endswith("_p")]
#: The retrieval metrics McNemar's test compares (0/1 hits per token).
RETRIEVAL = [f"p_at_{k}" for k in DEPTHS]
#: What the retrieval tests could detect, per line (the same on every line of a setting):
#: the chance P@k in percent (NaN where the scores carry no per-token chance) and the
#: fewest discordant tokens a P@k difference needs (:func:`detectable_discordant`), as a
#: count and in points of P@k.
POWER = [*(f"chance_{m}" for m in RETRIEVAL), "detectable_tokens", "detectable_points"]
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


def _versus(scores: pd.DataFrame, other: pd.DataFrame, seed: int, name: str
            ) -> dict[str, float]:
    """A method's paired differences from ``other`` (named ``name`` in the columns) over the
    same tokens: P@k in percentage points by McNemar's test, cosines by a paired bootstrap."""
    line = {}
    for metric, column in TESTED.items():
        mine, theirs = scores[column].to_numpy(), other[column].to_numpy()
        if metric in COSINES:
            test, scale = paired_bootstrap(mine, theirs, seed), 1.0
        else:
            test, scale = mcnemar(mine, theirs), 100.0
        line |= {f"{metric}_vs_{name}": scale * test.diff, f"{metric}_vs_{name}_p": test.p}
    return line


def _setting_lines(setting: tuple, group: pd.DataFrame, seed: int) -> list[dict[str, Any]]:
    """The lines of one setting and split: every method's summary, rank and comparison."""
    by_method = {m: g.sort_values("target_id") for m, g in group.groupby("method", sort=False)}
    ids = [tuple(g["target_id"]) for g in by_method.values()]
    if any(i != ids[0] for i in ids):
        raise ValueError(f"alignment {setting}: the methods were scored on different tokens")
    stats = {m: summary(g) for m, g in by_method.items()}
    # every method was scored on the same tokens: one chance per setting
    first = next(iter(by_method.values()))
    chance = {f"chance_p_at_{k}": 100 * float(first[f"chance_{k}"].mean())
              if f"chance_{k}" in first else math.nan for k in DEPTHS}
    # P@10 first (P@1 is a handful of tokens); ties (often all at 0) by the centred cosine,
    # which a row at the mean source row does not win
    competing = sorted(
        (m for m in by_method if m != ORACLE),
        key=lambda m: (-stats[m]["p_at_10"], -stats[m]["cos_centred"], -stats[m]["p_at_1"], m),
    )
    ranked = len(competing) >= 2
    best = competing[0] if ranked else None
    lines = []
    for method, scores in by_method.items():
        line = (dict(zip(SETTING, setting, strict=True)) | {"method": method}
                | stats[method] | chance)
        line |= {
            "rank": (competing.index(method) + 1) if ranked and method != ORACLE else math.nan,
            "best": best or "",
        }
        line |= {k: math.nan for k in EXTRA[2:]}
        for name, other in (("best", best), ("random", RANDOM)):
            if other in by_method and other != method and len(scores) >= 2:
                # the seed of the comparison with the best keeps its earlier key
                key = (setting, method, seed) if name == "best" else (setting, method, name, seed)
                line |= _versus(scores, by_method[other], derived_seed(*key), name)
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
    columns = [*SETTING, "method", *COLUMNS[7:], *EXTRA, *POWER[:len(DEPTHS)]]
    frame = pd.DataFrame(lines, columns=columns)
    frame = frame.join(detectable(frame))[COLUMNS + EXTRA + POWER]
    order = np.argsort(_split_rank(frame), kind="stable")
    return frame.iloc[order].reset_index(drop=True)


def alignment_clears(frame: pd.DataFrame) -> pd.DataFrame:
    """Which of the table's paired tests clear the report's correction: the family is every
    p-value of :data:`P_COLUMNS` in ``frame`` (the whole alignment table)."""
    return family_clears(frame, [c for c in P_COLUMNS if c in frame])


def detectable_discordant(threshold: float) -> int:
    """The fewest discordant tokens, all on one side (b = d, c = 0), whose exact two-sided
    McNemar p-value (:func:`embtransfer.core.paired.binomial_two_sided`) is below
    ``threshold``: fewer can never clear it, however they fall."""
    if not 0 < threshold <= 1:
        raise ValueError(f"a p-value threshold lies in (0, 1], got {threshold}")
    d = 1
    while binomial_two_sided(d, d) >= threshold:
        d += 1
    return d


def detectable(frame: pd.DataFrame) -> pd.DataFrame:
    """Per line of an alignment table: ``detectable_tokens``, the :func:`detectable_discordant`
    count at the table's strictest Holm step (:data:`FAMILY_ALPHA` over the number of its
    tests, :func:`alignment_clears`; a table of no test counts as one), and
    ``detectable_points``, that count in points of P@k over the line's tokens."""
    tests = int(frame[[c for c in P_COLUMNS if c in frame]].notna().to_numpy().sum())
    d = detectable_discordant(FAMILY_ALPHA / max(tests, 1))
    tokens = frame["tokens"].to_numpy(np.float64)
    points = np.divide(100.0 * d, tokens, out=np.full(tokens.size, math.nan), where=tokens > 0)
    return pd.DataFrame({"detectable_tokens": d, "detectable_points": points},
                        index=frame.index)


def powerless(frame: pd.DataFrame) -> pd.DataFrame:
    """Per line of an alignment table and retrieval metric (:data:`RETRIEVAL`): whether its
    setting has no power to separate methods by that metric: no competing method (the oracle
    is not one) differs from the setting's best or from Random by as many net hits (the
    difference's points times the tokens) as :func:`detectable` asks; the McNemar p-value of
    a difference of fewer hits is larger still, whatever the discordant tokens. A setting
    with no tested pair is not called powerless."""
    d = detectable(frame)["detectable_tokens"]
    competing = frame["method"] != ORACLE
    out = pd.DataFrame(index=frame.index)
    for metric in RETRIEVAL:
        diffs = frame[[f"{metric}_vs_{other}" for other in VERSUS]].abs().where(
            competing, axis=0)
        hits = np.rint(diffs.max(axis=1, skipna=True) * frame["tokens"] / 100.0)
        tested = diffs.notna().any(axis=1)
        by_setting = pd.DataFrame({"hits": hits.where(tested, -1.0), "tested": tested})
        groups = by_setting.groupby([frame[k] for k in SETTING], sort=False)
        most, any_test = groups["hits"].transform("max"), groups["tested"].transform("any")
        out[metric] = any_test & (most < d)
    return out


def no_power_text(detectable_tokens: int, tokens: int) -> str:
    """What a powerless setting (:func:`powerless`) of ``tokens`` tokens says instead of
    calling its methods not apart (``detectable_tokens``: :func:`detectable`'s count)."""
    return (f"no power to separate methods: needs ≥ {detectable_tokens} discordant tokens "
            f"({100 * detectable_tokens / tokens:.1f} % of {tokens})")


def _vs_cell(diff: float, p: float, clears: bool, digits: int) -> str:
    if math.isnan(diff):
        return ""
    return f"{diff:+.{digits}f} ({format_p(p)}){' *' if clears else ''}"


def _with_se(values: pd.Series, errors: pd.Series, digits: int) -> list[str]:
    return [f"{v:.{digits}f} ± {s:.{digits}f}" for v, s in zip(values, errors, strict=True)]


def table_order(group: pd.DataFrame) -> pd.DataFrame:
    """The lines of one setting and split in the order alignment.md shows them: the oracle
    first, then by rank (the methods figure follows it)."""
    return group.assign(_o=(group["method"] != ORACLE).astype(int)).sort_values(
        ["_o", "rank", "method"]
    ).drop(columns="_o")


def _setting_table(group: pd.DataFrame, clears: pd.DataFrame) -> pd.DataFrame:
    """The markdown table of one setting and split: the oracle first, then by rank."""
    group = table_order(group)
    clears = clears.loc[group.index]

    def versus(metric: str, other: str, digits: int) -> list[str]:
        column = f"{metric}_vs_{other}"
        return [_vs_cell(d, p, c, digits) for d, p, c in zip(
            group[column], group[f"{column}_p"], clears[f"{column}_p"], strict=True)]

    return pd.DataFrame(
        {
            "method": group["method"] + np.where(group["method"] == ORACLE, " (upper bound)", ""),
            "rank": group["rank"].map(lambda r: "" if math.isnan(r) else str(int(r))),
            "P@10": _with_se(group["p_at_10"], group["p_at_10_se"], 1),
            "P@1": _with_se(group["p_at_1"], group["p_at_1_se"], 1),
            "cos to oracle": _with_se(group["cos_oracle"], group["cos_oracle_se"], 3),
            "centred cos": _with_se(group["cos_centred"], group["cos_centred_se"], 3),
            "P@10 vs best": versus("p_at_10", "best", 1),
            "P@10 vs Random": versus("p_at_10", "random", 1),
            "P@1 vs best": versus("p_at_1", "best", 1),
            "P@1 vs Random": versus("p_at_1", "random", 1),
            "centred cos vs best": versus("cos_centred", "best", 3),
            "centred cos vs Random": versus("cos_centred", "random", 3),
        }
    )


INTRO = (
    "Over the non-shared target tokens whose meaning the miniature world knows: P@1 and "
    "P@10 of retrieving the token's translation among all source text rows by cosine, the "
    "cosine to the oracle row (the mean source row of the translation) and the centred "
    "cosine (both rows less the source's mean text row of that side: a row at the mean "
    "scores 0), each `±` one standard error. The held-out concepts come first: no method "
    "was aligned on them; WECHSEL and OFA fitted their map on the dictionary concepts. "
    "`world_oracle` (the world's translation rows) is the upper bound of these metrics and "
    "is not ranked; ranks are over the competing methods of a setting (by P@10, ties by the "
    "centred cosine, then P@1). `vs best` and `vs Random`: the difference from the setting's "
    "best method and from Random over the same tokens (P@1 and P@10 in points by McNemar's "
    "exact test, the cosine by a paired bootstrap; the raw cosine's are in alignment.csv); "
    f"`*` marks a difference that clears the {CORRECTION} correction at family-wise "
    f"α = {FAMILY_ALPHA} over every test of this table. Under each setting: its tokens n, "
    "the chance P@1 and P@10 (the expected hits of a ranking that ignores the rows: per "
    "token 1 - C(N - L, k) / C(N, k) for N candidate rows and a translation of L source ids, "
    "averaged) and the fewest discordant tokens, all one method's, whose exact McNemar "
    "p-value clears the strictest step of the correction (α over the number of tests): a "
    "P@k difference of fewer net hits cannot be called, and where no pair of competing "
    "methods reaches it the setting has no power to separate them by that metric."
)


def _power_sentence(line: pd.Series, powered_not: pd.Series) -> str:
    """A setting's chance levels and the difference its retrieval tests could detect."""
    chance = ", ".join(
        f"{name} {line[f'chance_{metric}']:.2f} %" for metric, name in
        zip(RETRIEVAL, ("P@1", "P@10"), strict=True) if not pd.isna(line[f"chance_{metric}"]))
    d, points = int(line["detectable_tokens"]), line["detectable_points"]
    text = (f"n = {int(line['tokens'])}; " + (f"chance {chance}; " if chance else "")
            + f"detectable: ≥ {d} discordant tokens ({points:.1f} points of P@k)")
    weak = [name for metric, name in zip(RETRIEVAL, ("P@1", "P@10"), strict=True)
            if powered_not[metric]]
    if weak:
        text += f"; no power to separate methods by {' or '.join(weak)}"
    return text + "."


def alignment_markdown(frame: pd.DataFrame) -> str:
    clears = alignment_clears(frame)
    powers = powerless(frame)
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
                _power_sentence(group.iloc[0], powers.loc[group.index[0]]),
                "",
                markdown(_setting_table(group, clears)),
            ]
    return "\n".join(parts) + "\n"


def write_alignment(
    files: list[str], csv_path: str | Path, md_path: str | Path, seed: int = 0
) -> pd.DataFrame:
    frame = alignment_frame(read_alignment(files), seed)
    write_table(frame, alignment_markdown(frame), csv_path, md_path)
    return frame
