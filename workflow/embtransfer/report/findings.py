"""What a run shows, written from its result tables (``results/report/findings.md``).

The findings read the tables the report writes (:data:`TABLES`: alignment, zero-shot,
Table 1, the target-PLM probes) and state every comparison those tables test, in words: a
method is called better, worse or best only where the paired test clears the report's one
rule (:func:`embtransfer.core.paired.holm`: Holm-Bonferroni at family-wise
α = :data:`~embtransfer.core.paired.FAMILY_ALPHA` over every test of its table, the same
decision that puts a table's ``*``); elsewhere the methods are "not apart", except where an
alignment setting's retrieval tests could not have called any pair apart: there it has "no
power to separate methods" (:func:`embtransfer.report.alignment_table.powerless`).

* :func:`claims`: every tested comparison as one line (which table, setting, metric, the two
  methods, difference, p-value, whether it clears, and the relation it supports);
* :func:`findings_markdown`: the text of findings.md;
* :func:`compare_claims`: two runs' claims side by side (does run B make each claim of run
  A; which tested pairs differ, with both p-values);
* the command line refreshes the README's "What the default run shows" from a run:

      python -m embtransfer.report.findings --reference results/report

  copies the tables it reads into ``docs/reference_run/`` with ``run.json`` (the commit and
  date of the run) and rewrites the README between :data:`START` and :data:`END`;
  ``--real-reference`` does the same for a real-text run (``docs/reference_real_run/``, the
  README's "What real text shows" between :data:`REAL_START` and :data:`REAL_END`, beside
  the miniature world's reference); ``--compare A B`` prints :func:`compare_claims` of two
  report folders.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from embtransfer.core.atomic import atomic_path
from embtransfer.core.paired import CORRECTION, FAMILY_ALPHA, holm, normal_p
from embtransfer.report.alignment_table import (
    RETRIEVAL,
    alignment_clears,
    detectable,
    no_power_text,
    powerless,
    table_order,
)
from embtransfer.report.fasttext_bli_table import bli_section
from embtransfer.report.probe_table import probe_decisions
from embtransfer.report.source_floor import floor_sentence
from embtransfer.report.tables import ORACLE, RANDOM, SOURCE_MODEL_LABEL
from embtransfer.report.zeroshot import (
    NOT_COMPETING,
    OWN_TOKENIZER,
    row_check_statement,
    zeroshot_clears,
)

#: The tables the findings read, by name: the report's file names.
TABLES = {
    "alignment": "alignment.csv",
    "zeroshot": "zeroshot.csv",
    "table1": "table1.csv",
    "plm_probes": "plm_probes.csv",
    "salt_vs_omp": "salt_vs_omp.csv",
    "lapt_zeroshot": "lapt_zeroshot.csv",
    "source_floor": "source_floor.csv",
    "fasttext_bli": "fasttext_bli.csv",
}
#: The reference run the README's findings come from, and its record (commit, date).
REFERENCE_DIR = Path("docs/reference_run")
RUN_JSON = "run.json"
README = Path("README.md")
START, END = "<!-- findings:start -->", "<!-- findings:end -->"
#: The real-text run's reference (config/real_small.yaml) and its README section.
REAL_REFERENCE_DIR = Path("docs/reference_real_run")
REAL_START, REAL_END = "<!-- real-findings:start -->", "<!-- real-findings:end -->"
#: The alignment metrics stated, headline first: (column, name, digits, unit).
ALIGNMENT_METRICS = (
    ("p_at_10", "P@10", 1, " %"),
    ("p_at_1", "P@1", 1, " %"),
    ("cos_centred", "centred cosine", 2, ""),
)
#: What identifies a claim across runs. ``against`` is the role of the other method
#: (``best``: the setting's best, whichever method that is in the run; else its name), so a
#: claim against the best survives a rerun where two methods not apart swap first place.
CLAIM_KEY = ["table", "stage", "lang", "source", "target", "side", "split", "variant",
             "metric", "method", "against"]
#: The alignment lines the findings state: held-out tokens, input rows, before LAPT (the
#: tables hold more: the dictionary half, the output rows, after LAPT).
HEADLINE_ALIGNMENT = {"split": "held_out", "stage": "transfer", "side": "input"}
BEST = "best"
#: A pair's relation read from its other side.
FLIPPED = {"better": "worse", "worse": "better", "not apart": "not apart"}


def read_tables(directory: str | Path | dict[str, str]) -> dict[str, pd.DataFrame]:
    """The tables of :data:`TABLES` under ``directory`` (or at the paths a dict names); an
    absent or empty one is an empty frame (a run outside the world has fewer)."""
    files = directory if isinstance(directory, dict) else {
        name: str(Path(directory) / file) for name, file in TABLES.items()}
    tables = {}
    for name in TABLES:
        path = Path(files[name])
        tables[name] = (pd.read_csv(path) if path.is_file() and path.stat().st_size
                        else pd.DataFrame())
    return tables


# -- claims ------------------------------------------------------------------------------------


def _relation(diff: float, clears: bool, higher_is_better: bool) -> str:
    if not clears:
        return "not apart"
    return "better" if (diff > 0) == higher_is_better else "worse"


def _alignment_claims(frame: pd.DataFrame) -> list[dict[str, Any]]:
    if frame.empty:
        return []
    decided = alignment_clears(frame)
    lines = []
    for i, line in frame.iterrows():
        for metric, *_ in ALIGNMENT_METRICS:
            for other in ("best", "random"):
                column = f"{metric}_vs_{other}"
                p = line.get(f"{column}_p", math.nan)
                if pd.isna(p):
                    continue
                clears = bool(decided.loc[i, f"{column}_p"])
                lines.append({
                    "table": "alignment", "stage": line["stage"], "lang": line["lang"],
                    "source": line["source"], "target": line["target"], "side": line["side"],
                    "split": line["split"], "variant": "", "metric": metric,
                    "method": line["method"],
                    "versus": line["best"] if other == "best" else RANDOM,
                    "against": BEST if other == "best" else RANDOM,
                    "diff": line[column], "p": p, "clears": clears,
                    "relation": _relation(line[column], clears, True),
                })
    return lines


def _zeroshot_claims(frame: pd.DataFrame, table: str = "zeroshot") -> list[dict[str, Any]]:
    """The zero-shot table's tests (``table="lapt_zeroshot"``: the final LAPT checkpoints',
    the same table after LAPT)."""
    if frame.empty:
        return []
    decided = zeroshot_clears(frame)
    lines = []
    for i, line in frame.iterrows():
        for other in ("best", "random"):
            p = line[f"vs_{other}_p"]
            if pd.isna(p):
                continue
            clears = bool(decided.loc[i, f"vs_{other}_p"])
            lines.append({
                "table": table, "stage": "lapt" if table == "lapt_zeroshot" else "transfer",
                "lang": line["lang"],
                "source": line["source"], "target": line["target"], "side": "", "split": "",
                "variant": "", "metric": "bits_per_byte", "method": line["method"],
                "versus": line["best"] if other == "best" else RANDOM,
                "against": BEST if other == "best" else RANDOM,
                "diff": line[f"vs_{other}"], "p": p, "clears": clears,
                "relation": _relation(line[f"vs_{other}"], clears, False),
            })
    return lines


def _table1_claims(frame: pd.DataFrame) -> list[dict[str, Any]]:
    if frame.empty or "vs_best_p" not in frame:
        return []
    decided = pd.Series(holm(frame["vs_best_p"]), index=frame.index)
    variant = "eval language" if "eval language" in frame else None
    lines = []
    for _, block in frame.groupby(_table1_keys(frame), sort=False):
        best = block[block["best"].astype(bool)]
        if best.empty:
            continue
        top = best.iloc[0]
        for i, line in block.iterrows():
            if pd.isna(line["vs_best_p"]):
                continue
            diff = line["value"] - top["value"]
            clears = bool(decided[i])
            lines.append({
                "table": "table1", "stage": line["stage"], "lang": line["lang"],
                "source": line["source"], "target": line["target"], "side": "", "split": "",
                "variant": line[variant] if variant else "", "metric": line["metric"],
                "method": line["method"], "versus": top["method"], "against": BEST,
                "diff": diff,
                "p": line["vs_best_p"], "clears": clears,
                "relation": _relation(diff, clears, True),
            })
    return lines


def _table1_keys(frame: pd.DataFrame) -> list[str]:
    """Table 1's blocks of competing methods: every key column but the method, and the
    metric."""
    return [c for c in ("stage", "lang", "source", "target", "eval language", "metric")
            if c in frame]


def claims(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Every paired test the tables report, as one line each: :data:`CLAIM_KEY`, then the
    difference (method - versus), its p-value, whether it clears the table's correction and
    the relation it supports (``better``, ``worse`` or ``not apart``)."""
    lines = (_alignment_claims(tables["alignment"]) + _zeroshot_claims(tables["zeroshot"])
             + _table1_claims(tables["table1"]) + _probe_claims(tables["plm_probes"])
             + _salt_omp_claims(tables.get("salt_vs_omp", pd.DataFrame()))
             + _zeroshot_claims(tables.get("lapt_zeroshot", pd.DataFrame()), "lapt_zeroshot"))
    columns = [*CLAIM_KEY, "versus", "diff", "p", "clears", "relation"]
    found = pd.DataFrame(lines, columns=columns)
    found["stated"] = stated(found)
    return found


def stated(found: pd.DataFrame) -> pd.Series:
    """Which claims findings.md states (in words): the headline alignment lines
    (:data:`HEADLINE_ALIGNMENT`) of the competing methods, Table 1's competing methods on
    its tested metrics, every zero-shot, probe and SALT-OMP line."""
    alignment = found["table"] == "alignment"
    headline = np.logical_and.reduce(
        [found[key] == value for key, value in HEADLINE_ALIGNMENT.items()]
        + [found["method"] != ORACLE])
    table1 = (found["table"] == "table1") & ~found["method"].isin([ORACLE, SOURCE_MODEL_LABEL])
    other = ~found["table"].isin(["alignment", "table1"])
    return pd.Series((alignment & headline) | table1 | other, index=found.index)


def compare_claims(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Run A's and run B's claims on the same pairs: one line per tested pair of either run,
    with both relations, p-values and the method each was against (``versus_a``,
    ``versus_b``: the setting's best can differ), ``stated`` (findings.md of run A states
    it) and ``agrees`` (the same relation in both; a pair one run did not test has relation
    ``untested`` there). The claims of A's findings that B does not make are the stated
    lines where A's relation is not "not apart" and ``agrees`` is false."""
    merged = a.merge(b, on=CLAIM_KEY, how="outer", suffixes=("_a", "_b"))
    for side in ("a", "b"):
        merged[f"relation_{side}"] = merged[f"relation_{side}"].fillna("untested")
    merged = _read_reversed(merged)
    merged["stated"] = merged["stated_a"].fillna(False).astype(bool)
    merged["agrees"] = merged["relation_a"] == merged["relation_b"]
    columns = [*CLAIM_KEY, "versus_a", "versus_b", "relation_a", "p_a", "relation_b", "p_b",
               "stated", "agrees"]
    return merged[columns].sort_values(["agrees", *CLAIM_KEY], kind="stable").reset_index(
        drop=True)


def _read_reversed(merged: pd.DataFrame) -> pd.DataFrame:
    """A's claim "x vs the best y" where B tested the pair from y's side ("y vs the best
    x": the two methods swapped first place): B's relation, flipped, decides it, and B's
    line goes (it is the same pair)."""
    where = [key for key in CLAIM_KEY if key != "method"]
    best = merged["against"] == BEST
    only_a = merged[best & (merged["relation_b"] == "untested")
                    & (merged["relation_a"] != "untested")].reset_index()
    only_b = merged[best & (merged["relation_a"] == "untested")].reset_index()
    pairs = only_a.merge(only_b, left_on=[*where, "method", "versus_a"],
                         right_on=[*where, "versus_b", "method"], suffixes=("", "_rev"))
    at, rev = pairs["index"].to_numpy(), pairs["index_rev"].to_numpy()
    merged.loc[at, "relation_b"] = pairs["relation_b_rev"].map(FLIPPED).to_numpy()
    merged.loc[at, "p_b"] = pairs["p_b_rev"].to_numpy()
    merged.loc[at, "versus_b"] = pairs["method_rev"].to_numpy()
    return merged.drop(index=rev)


def findings_claims(compared: pd.DataFrame) -> pd.DataFrame:
    """The lines of :func:`compare_claims` that are claims of run A's findings: stated,
    and better or worse."""
    return compared[compared["stated"]
                    & ~compared["relation_a"].isin(["not apart", "untested"])]


def comparison_text(compared: pd.DataFrame) -> str:
    """:func:`compare_claims` as text: each claim of run A's findings and whether run B
    makes it, then every other pair whose relation differs (the tables' lines findings.md
    does not state among them), with both p-values."""
    made = findings_claims(compared)
    lines = [f"Run A's findings' claims ({len(made)}; {CORRECTION}, family-wise "
             f"α = {FAMILY_ALPHA}):"]
    for line in made.itertuples():
        held = "holds in B" if line.agrees else f"NOT in B ({line.relation_b}, p {line.p_b:.2g})"
        lines.append(f"- {_claim_label(line)}: {line.relation_a} (p {line.p_a:.2g}); {held}")
    other = compared[~compared["agrees"] & ~compared.index.isin(made.index)]
    lines += ["", f"Other pairs that differ ({len(other)}; unstated: only in the tables):"]
    lines += [f"- {_claim_label(line)}: A {line.relation_a} (p {line.p_a:.2g}), "
              f"B {line.relation_b} (p {line.p_b:.2g})"
              + ("" if line.stated or line.relation_a == "untested" else " [unstated]")
              for line in other.itertuples()]
    held = int(made["agrees"].sum())
    lines += ["", f"{held} of {len(made)} claims of run A's findings hold in run B."]
    return "\n".join(lines) + "\n"


def _claim_label(line: Any) -> str:
    where = ", ".join(str(v) for v in (line.stage, line.lang, line.source, line.target,
                                       line.side, line.split, line.variant) if v and v == v)
    versus = {line.versus_a, line.versus_b} - {None, math.nan}
    versus = {v for v in versus if isinstance(v, str)}
    against = line.against if len(versus) != 1 else versus.pop()
    if line.against == BEST and len(versus) == 2:
        against = f"the best (A {line.versus_a}, B {line.versus_b})"
    return f"{line.table} [{where}] {line.metric}: {line.method} vs {against}"


# -- the text ------------------------------------------------------------------------------------


def _names(methods: list[str]) -> str:
    return ", ".join(methods) if methods else "none"


def _ranked_sentence(name: str, order: list[str], value: dict[str, str],
                     vs_best: dict[str, str], vs_random: dict[str, str], by: str = "") -> str:
    """One metric of one setting in words: the first method (``order``: best first), called
    best only where every other is apart from it, the methods not apart from it and those
    worse, and each method's relation to Random. ``by``: the first method is the setting's
    best by that other metric (what its tests were against), not by this one."""
    top, rest = order[0], order[1:]
    close = [m for m in rest if vs_best.get(m) == "not apart"]
    untested = [m for m in rest if m not in vs_best]
    if by:
        # the methods were tested against the setting's best by another metric
        lead = f"against {top} ({value[top]}; the setting's best by {by})"
        if close:
            lead += f", not apart: {_names([f'{m} ({value[m]})' for m in close])}"
    elif rest and len({value[m] for m in order}) == 1:
        lead = f"all at {value[top]}"
    elif rest and all(vs_best.get(m) == "worse" for m in rest):
        lead = f"{top} is best ({value[top]})"
    elif close:
        lead = (f"{top} is first ({value[top]}) but not apart from "
                f"{_names([f'{m} ({value[m]})' for m in close])}")
    else:
        lead = f"{top} ({value[top]})" if not rest else f"{top} is first ({value[top]})"
    parts = [lead]
    for relation, word in (("worse", "worse than"), ("better", "better than")):
        found = [m for m in rest if vs_best.get(m) == relation]
        if found:
            parts.append(f"{word} {top}: {_names(found)}")
    if untested:
        parts.append(f"not tested against {top} (no per-item scores): "
                     f"{_names([f'{m} ({value[m]})' for m in untested])}")
    if vs_random:
        for relation, word in (("better", "better than Random"), ("worse", "worse than Random"),
                               ("not apart", "not apart from Random")):
            found = [m for m in order if vs_random.get(m) == relation]
            if found or relation != "worse":
                parts.append(f"{word}: {_names(found)}")
    return f"{name}: " + "; ".join(parts) + "."


def _relations(found: pd.DataFrame, versus: str | None = None, other: str = "best"
               ) -> dict[str, str]:
    """method -> relation of ``found``'s claims against the best (``other="best"``: the
    claim's versus is the line's best) or against ``versus``."""
    mine = found if versus is None else found[found["versus"] == versus]
    return dict(zip(mine["method"], mine["relation"], strict=True))


def _alignment_section(frame: pd.DataFrame, found: pd.DataFrame, real: bool = False
                       ) -> list[str]:
    head = frame[(frame["split"] == "held_out") & (frame["stage"] == "transfer")
                 & (frame["side"] == "input")] if not frame.empty else frame
    if head.empty:
        return []
    truth, items = (("the dictionary's held-out half", "Held-out FreeDict headwords")
                    if real else ("the world's truth", "Held-out concepts"))
    parts = ["", f"### The new rows (alignment with {truth}, before LAPT)", "",
             f"{items} (no method was aligned on them), input rows: P@10 and P@1 "
             "of retrieving a token's translation among the source's text rows, and the "
             "cosine to the oracle row centred on the source's mean row "
             "(`results/report/alignment.md`)."]
    # a metric no pair of the setting could be called apart by says so (the whole table's
    # tests set the bar)
    weak, bar = powerless(frame), detectable(frame)["detectable_tokens"]
    for (lang, source, target), group in head.groupby(["lang", "source", "target"], sort=True):
        group = table_order(group)
        competing = [m for m in group["method"] if m != ORACLE]
        tokens = int(group["tokens"].iloc[0])
        oracle = group[group["method"] == ORACLE]
        intro = f"- **{lang}, {source}, {target}** ({tokens} tokens"
        if len(oracle):
            line = oracle.iloc[0]
            intro += (f"; {ORACLE}, the upper bound of these metrics: P@10 "
                      f"{line['p_at_10']:.1f} %, P@1 {line['p_at_1']:.1f} %")
        parts.append(intro + "):")
        if len(competing) < 2:
            for method in competing:
                line = group[group["method"] == method].iloc[0]
                parts[-1] += (f" {method} alone: P@10 {_pm(line, 'p_at_10', 1)} %, P@1 "
                              f"{_pm(line, 'p_at_1', 1)} %, centred cosine "
                              f"{_pm(line, 'cos_centred', 2)}.")
            continue
        mine = found[(found["table"] == "alignment") & (found["lang"] == lang)
                     & (found["source"] == source) & (found["target"] == target)
                     & (found["split"] == "held_out") & (found["stage"] == "transfer")
                     & (found["side"] == "input")]
        best = group["best"].iloc[0]
        for metric, name, digits, unit in ALIGNMENT_METRICS:
            by_value = [m for m in group.sort_values([metric, "rank"], ascending=[False, True],
                                                     kind="stable")["method"] if m != ORACLE]
            # the tests are against the setting's best (ranked by P@10): it leads
            order = [best] + [m for m in by_value if m != best]
            value = {m: _pm(group[group["method"] == m].iloc[0], metric, digits) + unit
                     for m in order}
            if metric in RETRIEVAL and weak.loc[group.index[0], metric]:
                listed = (f"all at {value[best]}" if len(set(value.values())) == 1
                          else _names([f"{m} {value[m]}" for m in by_value]))
                parts.append(f"  - {name}: {listed}; "
                             f"{no_power_text(int(bar.iloc[0]), tokens)}.")
                continue
            claims_here = mine[mine["metric"] == metric]
            vs_top = _versus_method(claims_here, best)
            vs_random = _relations(claims_here, RANDOM) if RANDOM in order else {}
            vs_random.pop(RANDOM, None)
            highest = group.loc[group["method"] == best, metric].iloc[0] >= group.loc[
                group["method"] != ORACLE, metric].max()
            by = "" if highest else ALIGNMENT_METRICS[0][1]
            parts.append("  - " + _ranked_sentence(name, order, value, vs_top, vs_random, by))
    return parts


def _versus_method(found: pd.DataFrame, top: str) -> dict[str, str]:
    """method -> its relation to ``top`` (the claims are the method's against the table's
    best; where ``top`` is not that best, the pair is read from the other side)."""
    direct = found[found["versus"] == top]
    out = dict(zip(direct["method"], direct["relation"], strict=True))
    reverse = found[found["method"] == top]
    for versus, relation in zip(reverse["versus"], reverse["relation"], strict=True):
        out.setdefault(versus, FLIPPED[relation])
    return out


def _pm(line: pd.Series, column: str, digits: int) -> str:
    se = line.get(f"{column}_se", math.nan)
    value = f"{line[column]:.{digits}f}"
    return value if pd.isna(se) or se == 0 else f"{value} ± {se:.{digits}f}"


#: The zero-shot section's heading and source table, and the same after LAPT.
ZEROSHOT_HEADINGS = {
    "zeroshot": ("Zero-shot (bits per byte, before any training)", "zeroshot.md"),
    "lapt_zeroshot": ("After LAPT (bits per byte of the final checkpoints)",
                      "lapt_zeroshot.md"),
}


def _zeroshot_section(frame: pd.DataFrame, found: pd.DataFrame, table: str = "zeroshot"
                      ) -> list[str]:
    if frame.empty:
        return []
    heading, file = ZEROSHOT_HEADINGS[table]
    found = found[found["table"] == table]
    parts = ["", f"### {heading}", "",
             "Bits per byte on each target language's held-out text, lower is better; paired "
             f"tests over the same documents (`results/report/{file}`)."]
    for (lang, source), block in frame.groupby(["lang", "source"], sort=True):
        own = block[block["target"] == OWN_TOKENIZER]
        for target, group in block[block["target"] != OWN_TOKENIZER].groupby("target",
                                                                              sort=True):
            order = [m for m in group.sort_values("bits_per_byte", kind="stable")["method"]
                     if m not in NOT_COMPETING]
            value = {m: _bpb(group, m) for m in group["method"]}
            head = f"- **{lang}, {source}, {target}**"
            if len(order) < 2:
                parts.append(f"{head}: {_names([f'{m} ({value[m]})' for m in order])} alone.")
                continue
            mine = found[(found["lang"] == lang)
                         & (found["source"] == source) & (found["target"] == target)]
            vs_top = _versus_method(mine[mine["method"].isin(order)], order[0])
            vs_random = _relations(mine[mine["method"].isin(order)], RANDOM)
            sentence = _ranked_sentence("bits per byte", order, value, vs_top, vs_random)
            extra = []
            for method in [m for m in NOT_COMPETING if m in value]:
                rel = _versus_method(mine, order[0]).get(method, "untested")
                word = {"better": "better than", "worse": "worse than",
                        "not apart": "not apart from"}.get(rel, "untested against")
                extra.append(f"{method} {value[method]}, {word} {order[0]}")
            parts.append(f"{head}: {sentence}" + (f" {'; '.join(extra)}." if extra else ""))
        if len(own):
            parts.append(f"- {lang}, {source}: the source model with its own tokenizer reads "
                         f"{_bpb(own, 'source_model')} bits per byte.")
    return parts


def _bpb(group: pd.DataFrame, method: str) -> str:
    line = group[group["method"] == method].iloc[0]
    return f"{line['bits_per_byte']:.3f} ± {line['bits_per_byte_se']:.3f}"


def _table1_section(frame: pd.DataFrame, found: pd.DataFrame) -> list[str]:
    if frame.empty:
        return []
    parts = ["", "### Knowledge (Table 1)", "",
             "Scores in percent, paired tests over the same questions against the block's "
             "best (`results/report/table1.md`)."]
    found = found[found["table"] == "table1"]
    keys = _table1_keys(frame)
    # Avg is the mean of the block's other metrics, tested on none of its own
    ok = frame[(frame["status"] == "ok") & (frame["metric"] != "Avg")]
    for key, block in ok.groupby(keys, sort=False):
        ident = dict(zip(keys, key, strict=True))
        competing = block[~block["method"].isin([ORACLE, SOURCE_MODEL_LABEL])
                          & (block["stage"] != "source")]
        if competing.empty:
            continue
        value = {m: _score(block, m) for m in block["method"]}
        order = list(competing.sort_values("value", ascending=False, kind="stable")["method"])
        label = ", ".join(str(ident[k]) for k in keys if k != "metric")
        mine = found[(found["stage"] == ident["stage"]) & (found["lang"] == ident["lang"])
                     & (found["source"] == ident["source"])
                     & (found["target"] == ident["target"]) & (found["metric"] == ident["metric"])]
        if "eval language" in ident:
            mine = mine[mine["variant"] == ident["eval language"]]
        if len(order) < 2:
            parts.append(f"- **{label}**, {ident['metric']}: {order[0]} ({value[order[0]]}) "
                         "alone.")
            continue
        sentence = _ranked_sentence(ident["metric"], order, value,
                                    _versus_method(mine, order[0]), {})
        extra = [f"{m} {value[m]} (not ranked)" for m in (ORACLE,) if m in value]
        parts.append(f"- **{label}**, {sentence}" + (f" {'; '.join(extra)}." if extra else ""))
    controls = ok[ok["stage"] == "source"]
    for _, line in controls.iterrows():
        variant = line.get("eval language", "")
        parts.append(f"- The source model (no transfer), {line['lang']}, {line['source']}"
                     f"{', ' + str(variant) if variant else ''}: {line['metric']} "
                     f"{_score(controls.loc[[line.name]], line['method'])}.")
    return parts


def _score(block: pd.DataFrame, method: str) -> str:
    line = block[block["method"] == method].iloc[0]
    se = line["stderr"]
    return f"{line['value']:.1f}" + ("" if pd.isna(se) else f" ± {se:.1f}")


def _probe_claims(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Each probe of each target PLM against its random baseline (:func:`probe_decisions`)."""
    if frame.empty:
        return []
    decided = probe_decisions(frame)
    lines = []
    for i, line in frame.iterrows():
        for probe in [c for c in decided.columns if c not in ("lang", "source", "target",
                                                                "carries")]:
            z = line[f"{probe}_z"]
            if pd.isna(z):
                continue
            relation = decided.loc[i, probe]
            lines.append({
                "table": "plm_probes", "stage": "", "lang": line["lang"],
                "source": line["source"], "target": line["target"], "side": "", "split": "",
                "variant": "", "metric": probe, "method": line["target"],
                "versus": "random rows", "against": "random rows",
                "diff": line[f"{probe}_diff"], "p": normal_p(z),
                "clears": relation != "not apart", "relation": relation,
            })
    return lines


#: salt_vs_omp.csv's metrics: the words, digits and unit, and whether higher is better.
SALT_OMP_METRICS = {
    "bits_per_byte": ("zero-shot bits per byte", 3, "", False),
    "p_at_10": ("held-out P@10", 1, " points", True),
    "p_at_1": ("held-out P@1", 1, " points", True),
    "cos_centred": ("held-out centred cosine", 2, "", True),
}


def _salt_omp_claims(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """OMP against SALT (salt_vs_omp.csv: OMP minus SALT, decided there by the same rule)."""
    lines = []
    for line in frame.itertuples():
        higher = SALT_OMP_METRICS[line.metric][3]
        lines.append({
            "table": "salt_vs_omp", "stage": line.stage, "lang": line.lang,
            "source": line.source, "target": line.target, "side": "input", "split": "",
            "variant": "", "metric": line.metric, "method": line.method, "versus": "salt",
            "against": "salt",
            "diff": line.diff, "p": line.p, "clears": bool(line.clears),
            "relation": _relation(line.diff, bool(line.clears), higher),
        })
    return lines


def _salt_omp_section(frame: pd.DataFrame) -> list[str]:
    if frame.empty:
        return []
    parts = ["", "### SALT against OMP (mergekit's tokensurgeon)", "",
             "OMP minus SALT over the same documents or tokens (`results/report/salt_vs_omp.md`):"
             " `omp` with k = 64, `omp_salt_k` with k = SALT's median support size; zero-shot"
             " on the transferred checkpoints, alignment on the input rows before (`transfer`)"
             " and after LAPT (`lapt`)."]
    for line in frame.itertuples():
        words, digits, unit, higher = SALT_OMP_METRICS[line.metric]
        relation = _relation(line.diff, bool(line.clears), higher)
        verdict = "not apart from SALT" if relation == "not apart" else f"{relation} than SALT"
        stage = line.stage.split("/")[-1]
        parts.append(
            f"- **{line.lang}, {line.target}, {stage}**, {words}: {line.method} "
            f"{line.omp:.{digits}f} against SALT {line.salt:.{digits}f} "
            f"({line.diff:+.{digits}f} ± {line.se:.{digits}f}{unit}, p {line.p:.2g}): "
            f"{verdict}.")
    return parts


def _probe_section(frame: pd.DataFrame) -> list[str]:
    if frame.empty:
        return []
    decided = probe_decisions(frame)
    probes = [c for c in decided.columns if c not in ("lang", "source", "target", "carries")]

    def label(i: int) -> str:
        line = frame.loc[i]
        zs = ", ".join(f"{probe} z {line[f'{probe}_z']:.1f}" for probe in probes)
        below = [probe for probe in probes if decided.loc[i, probe] == "worse"]
        return f"{line['target']} ({zs}" + (
            f"; {', '.join(below)} below random" if below else "") + ")"

    yes = [label(i) for i in frame.index if decided.loc[i, "carries"]]
    no = [label(i) for i in frame.index if not decided.loc[i, "carries"]]
    if len(probes) > 1:
        what, by = "Two probes per PLM", "both probes"
    else:
        what, by = f"The {probes[0]} probe of each PLM", f"the {probes[0]} probe"
    absent = ("" if "class" in probes else " The class probe needs the miniature world's "
              "concept classes: not measured on real text.")
    return ["", "### The target PLMs SALT recycles", "",
            f"{what} against random baselines (`results/report/plm_probes.md`), "
            "decided by the same rule (the normal two-sided p-value of each probe's z, one "
            "family over every probe of the table)." + absent + " "
            f"Carry meaning by {by}: {_names(yes)}. Do not: {_names(no)}."]



def findings_markdown(tables: dict[str, pd.DataFrame], run: dict[str, Any] | None = None,
                      real: bool = False, world: dict[str, pd.DataFrame] | None = None) -> str:
    """The text of findings.md (and the README's section): every comparison the tables
    test, in words, at the report's one threshold. ``real``: a real-text run's ("What real
    text shows": its limits first, the source's floor, and where ``world`` (the miniature
    world's tables) is given, which method leads in each)."""
    found = claims(tables)
    made = found[found["relation"] != "not apart"]
    parts = _real_preamble(tables, world) if real else []
    parts += [
        "Written from the result tables by `embtransfer.report.findings`"
        + (f", from the run of commit {run['commit']} ({run['date']})" if run else "")
        + f". A method is called better, worse or best only where a paired test over the "
        f"same items clears the {CORRECTION} correction at family-wise α = {FAMILY_ALPHA} "
        "over every test of its table (McNemar's exact test for 0/1 scores, a paired "
        "bootstrap otherwise; the tables' `*` marks the same tests); elsewhere the methods "
        f"are not apart. {len(made)} of the {len(found)} tested pairs clear it. "
        + ("" if real else
           f"`{ORACLE}` is the world's oracle: the translation's rows where the world knows a "
           "token's meaning, Mean's row elsewhere; it is the upper bound of the alignment "
           "metrics only."),
    ]
    anomalies = row_check_statement(tables["zeroshot"])
    if anomalies:
        parts += ["", f"**Anomalies.** {anomalies}"]
    parts += _alignment_section(tables["alignment"], found, real)
    parts += _zeroshot_section(tables["zeroshot"], found)
    parts += _zeroshot_section(tables.get("lapt_zeroshot", pd.DataFrame()), found,
                               "lapt_zeroshot")
    parts += _table1_section(tables["table1"], found)
    parts += _probe_section(tables["plm_probes"])
    parts += bli_section(tables.get("fasttext_bli", pd.DataFrame()))
    parts += _salt_omp_section(tables.get("salt_vs_omp", pd.DataFrame()))
    return "\n".join(parts) + "\n"


#: What a real-text run is, stated before its findings.
REAL_LIMITS = (
    "A real-text run (`config/real_small.yaml`, docs/real_text.md) has its limits: one seed "
    "of the source, small models (a source of width 128 and 4 layers, target PLMs of width "
    "128 and 2 layers, all pretrained here), and the corpora's domains (LibreOffice help and "
    "manual pages for English, German and Vietnamese; classical Arabic hadith and interface "
    "strings for Arabic). What it shows holds for these models on this text."
)


def _real_preamble(tables: dict[str, pd.DataFrame],
                   world: dict[str, pd.DataFrame] | None) -> list[str]:
    """The limits of a real-text run, its source's floor figures and, beside the miniature
    world's tables, which method leads in each."""
    parts = [REAL_LIMITS]
    floor = tables.get("source_floor", pd.DataFrame())
    if len(floor):
        held = floor[floor["text"] == "held-out"]
        parts[0] += " " + "; ".join(floor_sentence(line) for line in held.itertuples()) + "."
        control = floor[floor["text"] == "control"]
        if len(control):
            parts[0] += (" With its own tokenizer on the target languages' held-out text: "
                         + ", ".join(f"{line.lang} {line.bits_per_byte:.3f}"
                                     for line in control.itertuples())
                         + " bits per byte.")
    if world is not None:
        parts += ["", "### Real text beside the miniature world", "",
                  "The method first in each setting, on real text and in the miniature "
                  "world's reference run (docs/reference_run/); `*`: best, apart from every "
                  "other by the same rule.", ""]
        for name, words in (("zeroshot", "zero-shot bits per byte"),
                            ("alignment", "held-out P@10")):
            real, mini = leaders(tables, name), leaders(world, name)
            verdict = ("the same method leads most often" if _top(real) == _top(mini)
                       else "the verdicts differ")
            parts.append(f"- {words}: real text {_tally(real)}; the miniature world "
                         f"{_tally(mini)}: {verdict}.")
    return parts


def leaders(tables: dict[str, pd.DataFrame], name: str) -> dict[str, tuple[str, bool]]:
    """Per setting (language, source, target) of the ``zeroshot`` or ``alignment`` table
    (held-out input rows before LAPT, as the findings state it): the first method and
    whether it is best (every other competing method worse by :func:`claims`)."""
    frame = tables.get(name, pd.DataFrame())
    if frame.empty:
        return {}
    found = claims({**{k: pd.DataFrame() for k in TABLES}, name: frame})
    if name == "alignment":
        frame = frame[np.logical_and.reduce(
            [frame[k] == v for k, v in HEADLINE_ALIGNMENT.items()])]
        found = found[(found["split"] == "held_out") & (found["metric"] == "p_at_10")
                      & (found["side"] == "input") & (found["stage"] == "transfer")]
    competing = frame[~frame["method"].isin([*NOT_COMPETING, ORACLE])]
    out = {}
    for setting, group in competing.groupby(["lang", "source", "target"], sort=True):
        top = group["best"].iloc[0]
        if not isinstance(top, str) or not top:
            continue
        mine = found[(found["lang"] == setting[0]) & (found["source"] == setting[1])
                     & (found["target"] == setting[2]) & (found["against"] == BEST)
                     & (found["method"] != top) & ~found["method"].isin([*NOT_COMPETING,
                                                                         ORACLE])]
        out["/".join(setting)] = (top, bool(len(mine)) and (mine["relation"] == "worse").all())
    return out


def _top(lead: dict[str, tuple[str, bool]]) -> str | None:
    counts = pd.Series([m for m, _ in lead.values()]).value_counts()
    return str(counts.index[0]) if len(counts) else None


def _tally(lead: dict[str, tuple[str, bool]]) -> str:
    if not lead:
        return "no setting"
    counts = pd.Series([m for m, _ in lead.values()]).value_counts()
    best = pd.Series([m for m, b in lead.values() if b]).value_counts()
    return ", ".join(f"{m} first in {n} of {len(lead)}"
                     + (f" ({best[m]}*)" if m in best else "") for m, n in counts.items())


def write_findings(directory: str | Path | dict[str, str], path: str | Path,
                   run: dict[str, Any] | None = None, real: bool = False) -> str:
    """Write findings.md from the tables under ``directory`` (:func:`read_tables`); returns
    its text. ``real``: a real-text run's ("What real text shows")."""
    heading = "# What real text shows\n\n" if real else "# What the run shows\n\n"
    text = heading + findings_markdown(read_tables(directory), run, real=real)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return text


# -- the reference run and the README ----------------------------------------------------------


#: The README's real-text section before a real run's tables are committed.
NO_REAL_REFERENCE = (
    "No real-text run's tables are committed yet (docs/reference_real_run/): "
    "`make real-run`, then `make findings-real-reference` writes them and this section.\n"
)


def readme_section(reference: Path = REFERENCE_DIR, real: bool = False,
                   world: Path = REFERENCE_DIR) -> str:
    """The README's findings: the text of the reference run's tables. ``real``: the
    real-text section, beside the miniature world's reference (``world``)."""
    if real and not (reference / RUN_JSON).is_file():
        return NO_REAL_REFERENCE
    run = json.loads((reference / RUN_JSON).read_text())
    if not real:
        return findings_markdown(read_tables(reference), run)
    return findings_markdown(read_tables(reference), run, real=True,
                             world=read_tables(world))


def _markers(real: bool) -> tuple[str, str]:
    return (REAL_START, REAL_END) if real else (START, END)


def replace_section(text: str, section: str, real: bool = False) -> str:
    """``text`` with what stands between :data:`START` and :data:`END` (``real``:
    :data:`REAL_START`, :data:`REAL_END`) replaced."""
    start_mark, end_mark = _markers(real)
    start, end = text.index(start_mark) + len(start_mark), text.index(end_mark)
    return text[:start] + "\n" + section + text[end:]


def current_section(text: str, real: bool = False) -> str:
    start_mark, end_mark = _markers(real)
    return text[text.index(start_mark) + len(start_mark) + 1 : text.index(end_mark)]


def refresh_reference(report_dir: Path, reference: Path = REFERENCE_DIR,
                      readme: Path = README, real: bool = False,
                      real_reference: Path = REAL_REFERENCE_DIR) -> None:
    """Copy a run's tables into ``reference`` with its ``run.json`` (the checkout's commit,
    ``-dirty`` when the working tree differs from it, and the date the tables were written)
    and rewrite the README's findings from them (``real``: its real-text section). A new
    world reference rewrites the real-text section too (``real_reference`` beside it),
    which compares its leaders with the world's."""
    # before anything here is written, which would make the tree differ
    commit = subprocess.run(["git", "describe", "--always", "--abbrev=7", "--dirty=-dirty"],
                            capture_output=True, text=True, check=True).stdout.strip()
    reference.mkdir(parents=True, exist_ok=True)
    written = []
    for file in TABLES.values():
        source = report_dir / file
        if source.is_file():
            shutil.copyfile(source, reference / file)
            written.append(source.stat().st_mtime)
        else:
            (reference / file).unlink(missing_ok=True)
    date = dt.datetime.fromtimestamp(max(written), dt.UTC).date().isoformat()
    (reference / RUN_JSON).write_text(json.dumps({"commit": commit, "date": date}, indent=2)
                                      + "\n")
    text = replace_section(readme.read_text(), readme_section(reference, real=real), real)
    if not real and REAL_START in text:
        text = replace_section(text, readme_section(real_reference, real=True, world=reference),
                               real=True)
    readme.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--reference", type=Path, metavar="REPORT_DIR",
                       help="copy this report folder's tables into docs/reference_run/ and "
                            "rewrite the README's findings")
    group.add_argument("--real-reference", type=Path, metavar="REPORT_DIR",
                       help="copy a real-text run's tables into docs/reference_real_run/ and "
                            "rewrite the README's real-text findings")
    group.add_argument("--compare", type=Path, nargs=2, metavar=("A", "B"),
                       help="print which claims of report folder A report folder B makes")
    args = parser.parse_args(argv)
    if args.reference:
        refresh_reference(args.reference)
        return 0
    if args.real_reference:
        refresh_reference(args.real_reference, REAL_REFERENCE_DIR, real=True)
        return 0
    a, b = (claims(read_tables(d)) for d in args.compare)
    compared = compare_claims(a, b)
    print(comparison_text(compared), end="")
    return 0 if findings_claims(compared)["agrees"].all() else 1


if __name__ == "__main__":
    sys.exit(main())
