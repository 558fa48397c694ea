"""findings.md: what the run found, written from the comparisons table alone.

It opens with at most fourteen lines (the leaders once more per vocabulary mode a target is
written with) (:func:`headline`), then one table per setting
(:mod:`.setting_tables`), through the template ``findings.md.j2``. Every count in a line
carries its denominator and every line names its metric, side and stage, so each can be
checked in the tables below it. The reference runs' comparisons tables are committed
(``docs/reference_run/``, ``docs/reference_real_run/``); ``python -m
embtransfer.report.findings`` (:func:`main`) refreshes them and rewrites the README's
headlines and the docs pages from them, or compares two runs test by test.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

from embtransfer.core import paths
from embtransfer.core.grid import written_mode
from embtransfer.core.paired import CORRECTION, FAMILY_ALPHA
from embtransfer.report.comparisons import (
    KEYS,
    compare_runs,
    lookup,
    metric_spec,
    pair_ids,
    power,
    with_decisions,
)
from embtransfer.report.diagnostics import carries_meaning, heldout_tracking
from embtransfer.report.seeds import several
from embtransfer.report.setting_tables import legend, setting_sections
from embtransfer.report.tables import markdown
from embtransfer.report.texts import prose
from embtransfer.transfer.method_catalog import COMPETING_ROLES, METHODS, start_of

TEMPLATE = Path(__file__).with_name("findings.md.j2")
REFERENCE_DIR = Path("docs/reference_run")
REAL_REFERENCE_DIR = Path("docs/reference_real_run")
RUN_JSON = "run.json"
#: SALT's conditioning (its k/h and the PLM width h per setting), where a report folder or
#: reference has it: the SALT-against-OMP lines read k/h from it.
CONDITIONING = paths.REPORT_FILES["salt_conditioning_csv"]
MOVEMENT = paths.REPORT_FILES["lapt_movement_csv"]
#: How each method made the new rows of its transfer checkpoints: the line of a method
#: against its start counts the rows it refined from it.
NEW_ROWS = paths.REPORT_FILES["new_rows_csv"]
README = Path("README.md")
#: The docs page of each reference: the whole of docs/findings.md; a block of real_text.md.
PAGES = {False: Path("docs/findings.md"), True: Path("docs/real_text.md")}
MARKERS = {False: ("<!-- findings:start -->", "<!-- findings:end -->"),
           True: ("<!-- real-findings:start -->", "<!-- real-findings:end -->")}
OMP_METHODS = ("omp", "omp_salt_k")
#: OMP's k where the config leaves it: mergekit-tokensurgeon's default, the catalog's.
OMP_DEFAULT_K = METHODS["omp"]["options"]["k"].default
#: A checkpoint: the stage and setting it was made in and its method.
CHECKPOINT = ["stage", "lang", "source", "target", "method"]
STAGES = {"transfer": "transfer stage", "lapt": "after LAPT"}
#: How many settings or cells a line names before it gives their count alone.
NAMED = 4
#: The fewest ranked methods a setting's rank correlation is quoted over (of three, a
#: permutation test cannot go below p = 1/3).
TRACKED = 5


@dataclass(frozen=True)
class Kind:
    """A kind of setting (a headline's leader, a section's tables): its words (metric, side
    and stage), its family and the columns that select its settings."""

    label: str
    family: str
    select: tuple[tuple[str, str], ...] = ()


#: The paper tables: the headline gives their leaders (each by its first metric) in one line.
TABLES = tuple(Kind(f"Table {n}", f"table{n}") for n in (1, 2, 3, 4))
#: The held-out shared tokens' headline measure (embtransfer.report.setting_tables): the
#: contrast, which has power where a few hundred tokens leave P@10 none.
HELDOUT = Kind("Held-out shared tokens, contrast of the input rows, transfer stage", "heldout",
               (("side", "input"), ("metric", "contrast")))
KINDS = (
    Kind("Held-out P@10 of the input rows, transfer stage", "alignment",
         (("stage", "transfer"), ("side", "input"), ("split", "held_out"),
          ("metric", "p_at_10"))),
    HELDOUT,
    Kind("Zero-shot bits per byte of the whole model, transfer stage", "zeroshot"),
    Kind("Bits per byte of the whole model after LAPT", "lapt_zeroshot"),
    *TABLES,
)
SECTIONS = (
    Kind("Zero-shot bits per byte", "zeroshot"),
    Kind("Held-out alignment of the new rows (before LAPT)", "alignment",
         (("split", "held_out"), ("stage", "transfer"))),
    Kind("Held-out shared tokens: the new rows against their true source rows", "heldout"),
    Kind("After LAPT: bits per byte", "lapt_zeroshot"),
    *TABLES,
)
SETTING = [k for k in KEYS if k != "family"]


def read_run(directory: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(comparisons, summaries) of a report folder or a reference."""
    text = {k: str for k in [*KEYS, "method", "versus", "other", "test", "relation", "role",
                             "flags", "in_seeds"]}
    decided, summaries = (
        pd.read_csv(Path(directory) / paths.REPORT_FILES[name], keep_default_na=False,
                    na_values=[""], dtype=text) for name in ("comparisons_csv", "summaries_csv"))
    return (decided.fillna({c: "" for c in text if c in decided}),
            summaries.fillna({c: "" for c in text if c in summaries}))


def read_run_table(directory: str | Path, name: str = MOVEMENT) -> pd.DataFrame | None:
    """A table with a line per run (how far LAPT moved the new rows; ``name``
    :data:`NEW_ROWS`: how the methods made them) from a report folder or a reference, if it
    has it."""
    path = Path(directory) / name
    if not path.is_file():
        return None
    return pd.read_csv(path, dtype={k: str for k in ("lang", "source", "target", "method")})


def read_conditioning(directory: str | Path) -> pd.DataFrame | None:
    """SALT's conditioning table of a report folder or a reference, if it has one."""
    path = Path(directory) / CONDITIONING
    if not path.is_file():
        return None
    return pd.read_csv(path, dtype={k: str for k in ("lang", "source", "target")})


def _select(frame: pd.DataFrame, kind: Kind) -> pd.DataFrame:
    part = frame[frame["family"] == kind.family]
    for column, value in kind.select:
        part = part[part[column] == value]
    return part


def _split(split: str) -> str:
    return str(split).replace("_", "-")


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _stage(stage: str) -> str:
    return STAGES.get(stage, f"stage {stage}" if stage else "no stage")


def _join(words: Iterable[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    words = list(words)
    return " and ".join(words) if len(words) < 3 else ", ".join(words[:-1]) + f" and {words[-1]}"


# -- broken checkpoints --------------------------------------------------------------------------


def broken_checkpoints(summaries: pd.DataFrame) -> set[tuple[str, ...]]:
    """The checkpoints (:data:`CHECKPOINT`) the row check flags (a non-empty ``flags``) and
    every LAPT checkpoint trained from a flagged one (same language, source, target and
    method): their scores say what broken rows do, so none takes a rank or a lead here."""
    flagged = summaries[summaries["flags"].astype(str).str.strip() != ""]
    broken = {tuple(map(str, key)) for key in flagged[CHECKPOINT].itertuples(index=False)}
    # LAPT continues training from the transferred rows: it inherits what they are
    broken |= {("lapt", *key[1:]) for key in broken if key[0] != "lapt"}
    return broken


def _is_broken(frame: pd.DataFrame, broken: set[tuple[str, ...]], method: str = "method"
               ) -> pd.Series:
    keys = zip(*(frame[c].astype(str) for c in [*CHECKPOINT[:-1], method]), strict=True)
    return pd.Series([key in broken for key in keys], index=frame.index, dtype=bool)


def _broken_test(decided: pd.DataFrame, broken: set[tuple[str, ...]]) -> pd.Series:
    """A test with a broken checkpoint on either side."""
    return _is_broken(decided, broken) | _is_broken(decided, broken, "other")


# -- how each test and setting is named ----------------------------------------------------------


def measure(line: Any, split: bool = True) -> str:
    """A test's metric and side in words (its stage is said apart): ``bits per byte of the
    whole model``,
    ``held-out output-row cos to oracle`` (``split``: with the alignment's split),
    ``held-out-token input-row MRR`` (the held-out shared tokens'), ``Table 3
    XL acc (context=en,question=target)``."""
    label = metric_spec(line["metric"]).label
    if line["family"] == "alignment":
        words = f"{line['side']}-row {label}"
        return f"{_split(line['split'])} {words}" if split else words
    if line["family"] == "heldout":
        return f"held-out-token {line['side']}-row {label}"
    if line["family"] in ("zeroshot", "lapt_zeroshot"):
        return f"{label} of the whole model"
    if str(line["family"]).startswith("table"):
        variant = f" ({line['variant']})" if line["variant"] else ""
        return f"Table {str(line['family']).removeprefix('table')} {label}{variant}"
    return label


def _name(key: dict[str, Any], sources: bool, extra: Iterable[str] = ()) -> str:
    """A setting by its language and target PLM (and source, where a run has several), then
    ``extra`` of its other keys (a stage in words)."""
    words = [key["lang"], *([key["source"]] if sources else []), key["target"]]
    words += [_stage(key[k]) if k == "stage" else str(key[k]) for k in extra if key[k]]
    return " ".join(words)


def _names(keys: list[dict[str, Any]], sources: bool) -> str:
    """Up to :data:`NAMED` settings by name, each with the keys that tell them apart."""
    if len(keys) > NAMED:
        return ""
    extra = [k for k in ("variant", "stage") if len({key[k] for key in keys}) > 1]
    return f" ({', '.join(_name(k, sources, extra) for k in keys)})"


def _in_stage_order(stages: Iterable[str]) -> list[str]:
    held = set(stages)
    return [s for s in STAGES if s in held] + sorted(held - set(STAGES))


def _sources(frame: pd.DataFrame) -> bool:
    return frame["source"].nunique() > 1


# -- what the McNemar tests can detect -----------------------------------------------------------


def cell_power(decided: pd.DataFrame, broken: set[tuple[str, ...]]) -> pd.DataFrame:
    """:func:`power` per McNemar cell (setting and metric): the discordant count a test needs
    at the family's strictest Holm step (over every test of the family), beside the largest
    net difference of the tests between working checkpoints; ``powerless`` where it falls
    short (a broken checkpoint's difference gives no method a lead)."""
    alpha = decided.attrs.get("alpha", FAMILY_ALPHA)
    cells = power(decided, alpha)
    if cells.empty:
        return cells
    working = decided[~_broken_test(decided, broken)]
    largest = power(working, alpha).set_index(KEYS)["largest"] if len(working) else None
    cells = cells.set_index(KEYS)
    cells["largest"] = (largest.reindex(cells.index) if largest is not None
                        else pd.Series(float("nan"), index=cells.index)).fillna(0)
    cells["powerless"] = cells["largest"] < cells["detectable"]
    return cells.reset_index()


def _needs(detectable: Iterable[float]) -> str:
    values = sorted({int(d) for d in detectable})
    return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"


# -- each kind's leaders -------------------------------------------------------------------------


@dataclass
class Counted:
    """A kind's settings and what the headline counts of them."""

    total: int  # settings of the kind where competing methods are ranked
    methods: list[str]  # the working competing methods every counted setting holds
    settings: list[pd.DataFrame]  # each counted setting's lines of its working methods
    left_out: list[str]  # methods left out of some setting as broken
    broken_best: int  # settings whose best, by the tests, is a broken checkpoint


def counted(summaries: pd.DataFrame, decided: pd.DataFrame, kind: Kind,
            broken: set[tuple[str, ...]]) -> Counted | None:
    """The settings of ``kind`` a leader is counted over, and the working competing methods
    they all hold: of every method set some setting holds (two or more methods), the one
    that gives the most (setting, method) pairs over the settings holding it. A setting
    with fewer methods is shown below, not counted; so is one whose best, by the decided
    tests, is broken (no test reads the others against a working best there)."""
    part = _select(summaries, kind)
    if len(part) and not kind.select:  # a family without a selection: its first metric
        part = part[part["metric"] == part["metric"].iloc[0]]
    part = part[part["role"].isin(COMPETING_ROLES)]
    # a broken method is left out whether or not its summaries still rank it
    down = _is_broken(part, broken)
    left_out = sorted(set(part.loc[down, "method"]))
    part, down = part[part["rank"].notna()], down[part["rank"].notna()]
    if part.empty:
        return None
    total = part.groupby(SETTING).ngroups
    best = decided[decided["versus"] == "best"].drop_duplicates(KEYS)
    best_broken = set(best.loc[_is_broken(best, broken, "other"), KEYS].astype(str).apply(
        tuple, axis=1)) if len(best) else set()
    dropped = part[KEYS].astype(str).apply(tuple, axis=1).isin(best_broken)
    broken_best = part[dropped].groupby(SETTING).ngroups if dropped.any() else 0
    part = part[~down & ~dropped]
    held = part.groupby(SETTING)["method"].apply(frozenset)
    sets = [s for s in set(held) if len(s) >= 2]
    if not sets:
        return Counted(total, [], [], left_out, broken_best)
    top = max(sets, key=lambda s: (len(s) * int(held.apply(lambda h: h >= s).sum()), sorted(s)))
    keep = set(held[held.apply(lambda h: h >= top)].index)
    settings = [group for key, group in part.groupby(SETTING, sort=False) if key in keep]
    return Counted(total, sorted(top), settings, left_out, broken_best)


def _apart_in_some_seeds(decided: pd.DataFrame) -> set[tuple[str, ...]]:
    """(KEYS..., method) of every method whose test against the best cleared in some seeds
    but not all (:mod:`embtransfer.report.seeds`): "not apart" only for want of agreement."""
    if "in_seeds" not in decided:
        return set()
    partial = decided[(decided["versus"] == "best") & (decided["in_seeds"].astype(str) != "")]
    return {tuple(map(str, line)) for line in partial[[*KEYS, "method"]].itertuples(
        index=False, name=None)}


def _leaders(settings: list[pd.DataFrame], methods: list[str],
             partial: set[tuple[str, ...]] | None = None) -> str:
    """Who is best (alone) or tied for best, in how many of ``settings``: methods with the
    same counts share a phrase; a setting whose best is none of ``methods`` names none.
    ``partial`` (:func:`_apart_in_some_seeds`): the ties that stand only because a verdict
    apart from the best held in some seeds but not all, which the line counts apart."""
    s = len(settings)
    alone, tied = dict.fromkeys(methods, 0), dict.fromkeys(methods, 0)
    split = dict.fromkeys(methods, 0)
    outside = 0
    for group in settings:
        # tied with the setting's best, among every working method there
        top = group[group["tied_best"].astype(bool)]["method"].tolist()
        mine = [m for m in top if m in alone]
        if not mine:
            outside += 1
        for m in mine:
            (alone if len(top) == 1 else tied)[m] += 1
        lines = group[group["method"].isin(mine)]
        for line in lines[[*KEYS, "method"]].itertuples(index=False, name=None):
            if tuple(map(str, line)) in (partial or set()):
                split[line[-1]] += 1
    if all(tied[m] == s for m in methods):
        return f"all {len(methods)} methods tied for best in {s} of {s}: no test separates them"
    phrases: dict[tuple[int, int], list[str]] = {}
    for m in sorted(methods, key=lambda m: (-alone[m], -tied[m], m)):
        if alone[m] or tied[m]:
            phrases.setdefault((alone[m], tied[m]), []).append(m)
    said = [", ".join(names) + (f" best in {a}" + (f" and tied for best in {t}" if t else "")
                                if a else f" tied for best in {t}") + f" of {s}"
            for (a, t), names in phrases.items()]
    rest = list(phrases)[NAMED:]
    more = sum(len(phrases[counts]) for counts in rest)
    text = "; ".join(said[:NAMED]) + (
        f"; {more} more methods best or tied for best in at most "
        f"{max(a + t for a, t in rest)} of {s}" if more else "")
    if outside:
        text += f"; in {outside} of {s} the best is none of these {len(methods)}"
    if any(split.values()):
        named = ", ".join(f"{m} in {split[m]}" for m in sorted(methods) if split[m])
        text += f" (of these ties, worse than the best in some seeds but not all: {named})"
    return text


#: The words a kind's label gains for the settings of a target written with a vocabulary mode
#: (``gpt2_de@extend``, :func:`embtransfer.core.grid.written_mode`).
MODE_WORDS = {"extend": "extended vocabularies", "replace": "replaced vocabularies"}


def by_mode(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """``frame``'s lines by the vocabulary mode their target is written with, the bare names
    first ('' : the run's ``transfer.vocab_mode``): a kind's leaders are counted within one,
    so that the settings of an extended vocabulary are not ranked against the replaced."""
    modes = frame["target"].map(lambda t: written_mode(str(t)) or "")
    return [(mode, frame[modes == mode]) for mode in sorted(set(modes))]


def leader_lines(summaries: pd.DataFrame, decided: pd.DataFrame, kind: Kind,
                 broken: set[tuple[str, ...]], cells: pd.DataFrame, bold: bool = True
                 ) -> list[str]:
    """A kind's leader line per vocabulary mode of its settings (:func:`by_mode`)."""
    tests = dict(by_mode(decided))
    return [line for mode, part in by_mode(summaries)
            if (line := leader_line(part, tests.get(mode, decided.iloc[:0]), kind, broken,
                                    cells, bold, MODE_WORDS.get(mode, "")))]


def leader_line(summaries: pd.DataFrame, decided: pd.DataFrame, kind: Kind,
                broken: set[tuple[str, ...]], cells: pd.DataFrame, bold: bool = True,
                words: str = "") -> str:
    """A kind's leaders over its counted settings; where its McNemar tests cannot clear
    (:func:`cell_power`), the line says so and names no method there. ``words`` end the
    label (the vocabulary mode of the settings, :func:`leader_lines`)."""
    found = counted(summaries, decided, kind, broken)
    if found is None or not found.settings:
        return ""
    first = found.settings[0].iloc[0]
    label = kind.label + (f", {words}" if words else "")
    if kind in TABLES:
        stages = _in_stage_order(str(g["stage"].iloc[0]) for g in found.settings)
        label = (f"{kind.label}, {metric_spec(first['metric']).label} of the whole model, "
                 + _join(_stage(s) for s in stages) + (f", {words}" if words else ""))
    n, m = len(found.settings), len(found.methods)
    head = f"{n} of {found.total} settings, those that hold all {m} competing methods"
    if found.left_out:
        head += f"; {', '.join(found.left_out)} left out where its rows are flagged"
    if found.broken_best:
        head += (f"; {found.broken_best} whose best is a checkpoint with flagged rows "
                 "left out")
    head = (f"**{label}**" if bold else label) + f" ({head}): "
    sources = _sources(summaries)
    keys = [dict(zip(KEYS, map(str, g.iloc[0][KEYS]), strict=True)) for g in found.settings]
    weak = set()
    if len(cells):
        index = cells.set_index(KEYS)["powerless"]
        weak = {i for i, k in enumerate(keys) if bool(index.get(tuple(k.values()), False))}
    strong = [i for i in range(n) if i not in weak]
    partial = _apart_in_some_seeds(decided)
    if not weak:
        return head + _leaders(found.settings, found.methods, partial) + "."
    lines = cells.set_index(KEYS).loc[[tuple(keys[i].values()) for i in sorted(weak)]]
    items = "questions" if kind in TABLES else "tokens"  # what a paper table's tests count
    why = (f"the largest net difference between two working methods there, "
           f"{int(lines['largest'].max())} {items}, is below the "
           f"{_needs(lines['detectable'])} discordant {items} a test needs")
    if not strong:
        return head + (f"no power in any of the {n}{_names(keys, sources)}: {why}, so no "
                       "method is named best.")
    return head + (
        f"a test has power in {len(strong)} of {n}{_names([keys[i] for i in strong], sources)}: "
        + _leaders([found.settings[i] for i in strong], found.methods, partial)
        + f". No power in {len(weak)} of {n}{_names([keys[i] for i in sorted(weak)], sources)}"
        + f": {why}, so no method is named there.")


# -- SALT against OMP ----------------------------------------------------------------------------


def _span(values: Iterable[float], digits: int = 2, fixed: bool = False) -> str:
    """The range of ``values`` rounded to ``digits``: shortest form, or ``fixed`` digits."""
    values = sorted({round(float(v), digits) for v in values})
    form = f".{digits}f" if fixed else "g"
    low, high = format(values[0], form), format(values[-1], form)
    return low if len(values) == 1 else f"{low}-{high}"


def _k_over_h(rival: str, tests: pd.DataFrame, conditioning: pd.DataFrame | None,
              omp_k: int = OMP_DEFAULT_K) -> str:
    """k and, where SALT's conditioning table gives the PLM widths of the tests' settings,
    k/h: OMP's k (``omp_k``, the run's ``transfer.options.omp.k``) over the width; SALT's
    median k/h for OMP at SALT's k."""
    default = ", mergekit-tokensurgeon's default" if omp_k == OMP_DEFAULT_K else ""
    k = ("k = SALT's median support size" if rival == "omp_salt_k"
         else f"k = {omp_k}{default}")
    if conditioning is None or conditioning.empty:
        return k
    plms = tests[["lang", "source", "target"]].drop_duplicates()
    found = plms.merge(conditioning, on=["lang", "source", "target"])
    if len(found) < len(plms):  # a setting without SALT's conditioning: k/h unknown there
        return k
    ratio = found["k_over_h_median"] if rival == "omp_salt_k" else omp_k / found["h_t"]
    return f"{k}, k/h {_span(ratio)}"


def _moved(rival: str, tests: pd.DataFrame, movement: pd.DataFrame | None,
           subject: str = "salt") -> str:
    """How far LAPT moved the subject's (SALT's) and the rival's new rows in the settings of
    ``tests``: the span of the runs' median cosines to their rows before LAPT, per side (""
    where the run scored no LAPT checkpoint)."""
    if movement is None or movement.empty:
        return ""
    plms = tests[["lang", "source", "target"]].drop_duplicates()
    runs = movement[movement["method"].isin([subject, rival])].merge(
        plms, on=["lang", "source", "target"])
    runs = runs[runs["median_cosine"].notna()]
    if runs.empty:
        return ""
    sides = [f"{side} {_span(part['median_cosine'], 4, fixed=True)}"
             for side, part in runs.groupby("side", sort=True)]
    return (f" (the new rows' median cosine to their rows before LAPT: {', '.join(sides)}, "
            f"over {_plural(len(runs.drop_duplicates(['lang', 'target', 'method'])), 'run')})")


def _where(tests: pd.DataFrame) -> str:
    """The measures of ``tests`` with their counts, the alignment's splits before its:
    ``2 in bits per byte, 4 in dictionary and held-out output-row cos to oracle``."""
    said = []
    for what, group in tests.groupby(tests.apply(measure, axis=1, split=False), sort=False):
        splits = _join(sorted({_split(s) for s in group["split"] if s}))
        said.append((len(group), f"{splits} {what}".strip()))
    return ", ".join(f"{n} in {what}" for n, what in sorted(said, key=lambda x: (-x[0], x[1])))


def salt_omp_lines(decided: pd.DataFrame, summaries: pd.DataFrame | None = None,
                   conditioning: pd.DataFrame | None = None,
                   omp_k: int = OMP_DEFAULT_K, movement: pd.DataFrame | None = None
                   ) -> list[str]:
    """SALT against OMP at SALT's k and against OMP at the tool's default k, one line each,
    from SALT's side (OMP better is SALT worse), the transfer stage apart from LAPT's, which
    says how far LAPT moved the rows (``movement``: the report's lapt_movement table); a
    test with a broken checkpoint (:func:`broken_checkpoints`) counts in neither."""
    broken = broken_checkpoints(summaries) if summaries is not None else set()
    lines = []
    for rival, words in (("omp_salt_k", "at SALT's k"), ("omp", "at the tool's default k")):
        versus = decided[(decided["versus"] == "salt") & (decided["method"] == rival)]
        if versus.empty:
            continue
        down = _broken_test(versus, broken)
        working = versus[~down]
        head = f"`{rival}`: {_k_over_h(rival, versus, conditioning, omp_k)}"
        if down.any():
            head += f"; {_plural(int(down.sum()), 'test')} with flagged rows left out"
        # the rival's lines: OMP worse is SALT better
        body = _verdicts(working, "SALT", "salt", rival, movement, flip=True)
        lines.append(f"**SALT against OMP {words}** ({head}): {body}.")
    return lines


def _verdicts(working: pd.DataFrame, name: str, subject: str, rival: str,
              movement: pd.DataFrame | None, flip: bool = False) -> str:
    """Per stage, the subject's paired tests against the rival: better, worse and not apart,
    with the measures where they are apart; the LAPT stage with how far it moved the rows.
    ``flip``: the tests are the rival's lines (its relation to the subject)."""
    stages = []
    for stage in _in_stage_order(working["stage"]):
        tests = working[working["stage"] == stage]
        better = tests[tests["relation"] == ("worse" if flip else "better")]
        worse = tests[tests["relation"] == ("better" if flip else "worse")]
        moved = _moved(rival, tests, movement, subject) if stage == "lapt" else ""
        said = (f"{_stage(str(stage))}{moved}, {_plural(len(tests), 'paired test')}: "
                f"{name} better in ")
        said += f"{len(better)}" + (f" ({_where(better)})" if len(better) else "")
        said += f", worse in {len(worse)}" + (f" ({_where(worse)})" if len(worse) else "")
        said += f", not apart in {int((tests['relation'] == 'not apart').sum())}"
        stages.append(said)
    return "; ".join(stages) if stages else "no test between working checkpoints"


def start_lines(decided: pd.DataFrame, summaries: pd.DataFrame | None = None,
                new_rows: pd.DataFrame | None = None, movement: pd.DataFrame | None = None
                ) -> list[str]:
    """Each method that refines another's rows (the catalog's ``starts_from``: Token
    Distillation from Subword-mean's) against that start, one line per method: how many of
    its new rows it refined (``new_rows``: the report's new_rows table of the transfer
    checkpoints) and its paired tests, the transfer stage apart from LAPT's."""
    broken = broken_checkpoints(summaries) if summaries is not None else set()
    lines = []
    starts = decided[decided["versus"] == "start"]
    for method, versus in starts.groupby("method", sort=True):
        rival = str(versus["other"].iloc[0])
        working = versus[~_broken_test(versus, broken)]
        head = f"where its rows start{_refined(method, new_rows)}"
        body = _verdicts(working, f"`{method}`", method, rival, movement)
        lines.append(f"**`{method}` against `{rival}`** ({head}): {body}.")
    return lines


def _refined(method: str, new_rows: pd.DataFrame | None) -> str:
    """``; refined 150 of 4,862-5,310 new rows per setting`` from the new_rows table: the rows
    of the method's own label (``how``) out of all its new rows, over its settings."""
    if new_rows is None or new_rows.empty:
        return ""
    runs = new_rows[new_rows["method"] == method]
    if runs.empty:
        return ""
    label = start_of(method)[1]
    per = runs.groupby(["lang", "source", "target"])
    made = per.apply(lambda g: int(g.loc[g["how"] == label, "rows"].sum()), include_groups=False)
    total = per["rows"].sum()
    return (f"; {label} {_count_span(made)} of {_count_span(total)} new rows in each of its "
            f"{_plural(len(total), 'setting')}")


def _count_span(values: Iterable[int]) -> str:
    values = sorted({int(v) for v in values})
    low, high = f"{values[0]:,}", f"{values[-1]:,}"
    return low if low == high else f"{low}-{high}"


# -- the anomalies -------------------------------------------------------------------------------


def worse_line(decided: pd.DataFrame, broken: set[tuple[str, ...]], sources: bool) -> str:
    """Working checkpoints worse than Random, per stage and measure (the alignment family on
    its held-out split), out of every such test against Random."""
    against = decided[(decided["versus"] == "random")
                      & ((decided["family"] != "alignment") | (decided["split"] == "held_out"))]
    against = against[~_broken_test(against, broken)]
    worse = against[against["relation"] == "worse"]
    if worse.empty:
        return ""
    stages = []
    for stage in _in_stage_order(worse["stage"]):
        tests, said = worse[worse["stage"] == stage], []
        for what, group in tests.groupby(tests.apply(measure, axis=1), sort=False):
            # each setting, then its methods in brackets: a list of settings stays readable
            where = [f"{_name(key, sources)} (" + ", ".join(sorted(g["method"])) + ")"
                     for key, g in ((dict(zip(("lang", "source", "target"), k, strict=True)), g)
                                    for k, g in group.groupby(["lang", "source", "target"]))]
            said.append(f"{what}: " + ", ".join(where))
        stages.append(f"{_stage(str(stage))} ({_plural(len(tests), 'test')}): " + "; ".join(said))
    return prose("findings.worse", n=len(worse), of=len(against), said=". ".join(
        s[0].upper() + s[1:] for s in stages))


def flagged_line(summaries: pd.DataFrame, sources: bool = False) -> str:
    """The checkpoints the row check flags, the LAPT checkpoints trained from them, and any
    LAPT checkpoint flagged on its own."""
    flagged = summaries[summaries["flags"].astype(str).str.strip() != ""]
    if flagged.empty:
        return ""
    key = CHECKPOINT[1:]
    made = flagged[flagged["stage"] != "lapt"].drop_duplicates(key)
    origin = set(made[key].itertuples(index=False, name=None))
    lapt = summaries[summaries["stage"] == "lapt"].drop_duplicates(key)
    trained = lapt[lapt[key].apply(tuple, axis=1).isin(origin)] if len(lapt) else lapt
    alone = flagged[flagged["stage"] == "lapt"].drop_duplicates(key)
    alone = alone[~alone[key].apply(tuple, axis=1).isin(origin)]
    said = []
    for what, frame in (("checkpoint", made), ("LAPT checkpoint", alone)):
        if len(frame):
            said.append(f"{_plural(len(frame), what)}: " + ", ".join(
                f"{_name(r, sources)} {r['method']}" for _, r in frame.iterrows()))
    if len(trained):
        said.insert(1, f"the {_plural(len(trained), 'LAPT checkpoint')} trained from these")
    return prose("findings.flagged", said="; ".join(said))


def powerless_line(cells: pd.DataFrame, sources: bool) -> str:
    """The held-out split's McNemar cells whose tests cannot clear, out of all of them; the
    cells with power named."""
    held = cells[cells["split"] == "held_out"] if len(cells) else cells
    weak = held[held["powerless"]] if len(held) else held
    if weak.empty:
        return ""
    strong = held[~held["powerless"]]
    named = ""
    if 0 < len(strong):
        groups = strong.groupby(["lang", "source", "target", "side", "metric"], sort=False)
        if groups.ngroups <= NAMED:
            named = "; power in the other " + str(len(strong)) + ": " + "; ".join(
                f"{_name(dict(zip(('lang', 'source', 'target'), k[:3], strict=True)), sources)} "
                f"{k[3]}-row {metric_spec(k[4]).label} "
                f"({_join(_stage(s) for s in _in_stage_order(g['stage']))})" for k, g in groups)
        else:
            named = f"; power in the other {len(strong)}"
    metrics = " or ".join(metric_spec(m).label for m in sorted(set(held["metric"])))
    return prose("findings.powerless", n=len(weak), of=len(held), metrics=metrics,
                 largest=int(weak["largest"].max()), detectable=_needs(weak["detectable"]),
                 named=named)


def heldout_line(decided: pd.DataFrame, summaries: pd.DataFrame) -> str:
    """Which working methods' rows for the held-out shared tokens leave chance (the contrast
    of the input rows against 0, by the normal z of its mean), in how many of the settings
    each was tested in; and how that contrast tracks zero-shot bits per byte across methods
    (:func:`embtransfer.report.diagnostics.heldout_tracking`: +1, the methods better on the
    held-out tokens read the text better)."""
    tests = _select(decided, HELDOUT)
    tests = tests[tests["versus"] == "chance"]
    if tests.empty:
        return ""
    setting = ["lang", "source", "target"]
    n_settings = tests.groupby(setting).ngroups
    groups: dict[str, list[str]] = {"every": [], "some": [], "none": []}
    for method, group in tests.groupby("method", sort=True):
        above, of = int((group["relation"] == "better").sum()), len(group)
        which = "every" if above == of else "some" if above else "none"
        groups[which].append(method if which != "some" else f"{method} {above} of {of}")
    said = [f"in every setting it was tested in: {', '.join(groups['every'])}"
            if groups["every"] else "in every setting: none"]
    if groups["some"]:
        said.append(f"in some: {', '.join(groups['some'])}")
    if groups["none"]:
        said.append(f"in none: {', '.join(groups['none'])}")
    below = tests[tests["relation"] == "worse"]
    if len(below):
        said.append(f"below chance in {_plural(len(below), 'test')}")
    tracking = heldout_tracking(summaries, permutations=0)  # ρ alone: the table has p
    tracking = tracking[(tracking["side"] == "input") & (tracking["metric"] == "contrast")
                        & tracking["rho"].notna() & (tracking["methods"] >= TRACKED)]
    tracked = (f"; its Spearman correlation with zero-shot bits per byte across the working "
               f"methods, in the {_plural(len(tracking), 'setting')} with {TRACKED} or more: "
               f"{_span(tracking['rho'], 2, fixed=True)} (heldout_tracking.md)"
               if len(tracking) else "")
    return prose("findings.heldout", tests=len(tests), settings=n_settings,
                 said="; ".join(said), tracked=tracked)


def anomaly_lines(decided: pd.DataFrame, summaries: pd.DataFrame) -> list[str]:
    """One line per kind of anomaly with its count out of its whole; the tables below name
    the settings."""
    broken = broken_checkpoints(summaries)
    sources = _sources(summaries) if len(summaries) else False
    lines = [worse_line(decided, broken, sources), flagged_line(summaries, sources)]
    without = ~carries_meaning(decided)
    if without.any():
        plms = ", ".join(f"{lang} {target}" for lang, _, target in without[without].index)
        lines.append(prose("findings.meaningless", n=int(without.sum()), of=len(without),
                           plms=plms))
    lines.append(powerless_line(cell_power(decided, broken), sources))
    return [line for line in lines if line]


def seed_line(run: dict[str, Any] | None, decided: pd.DataFrame | None = None) -> str:
    """How many seeds the run's verdicts rest on, as its run.json (or the config) says; with
    several seeds and a consensus table (:func:`embtransfer.report.seeds.combine`), how
    many of the primary seed's clearing tests hold in every seed, how many in only some,
    and how many tests lie near their threshold, each pair of lines one test."""
    run = run or {}
    seeds = run.get("seeds", [run["seed"]] if "seed" in run else [])
    listed = seeds if isinstance(seeds, list) else []
    if decided is not None and "seeds" in decided and (several(decided) or len(listed) > 1):
        once = decided[~pair_ids(decided).duplicated()]
        held, made = once["held"].astype(int), once["seeds"].astype(int)
        n = max(len(listed), int(made.max()))
        named = f" ({', '.join(map(str, listed))}; {listed[0]} the primary)" if (
            len(listed) > 1) else ""
        return prose("findings.seeds_held", n=n, seeds=named, tests=len(once),
                     clear=int((held > 0).sum()), every=int(((held > 0) & (held == made)).sum()),
                     some=int(((held > 0) & (held < made)).sum()),
                     near=int(once["borderline"].astype(bool).sum()))
    if len(listed) > 1:
        return prose("findings.seeds", n=len(listed), seeds=", ".join(map(str, listed)))
    return prose("findings.seed", seed=f" (`seed` {seeds[0]})" if seeds else "")


def seed_count(run: dict[str, Any] | None, decided: pd.DataFrame) -> int:
    """How many seeds the run drew its seed-dependent stages with: the consensus table's,
    else the run's ``seeds``, else one."""
    listed = (run or {}).get("seeds")
    made = int(decided["seeds"].max()) if "seeds" in decided and len(decided) else 1
    return max(made, len(listed) if isinstance(listed, list) else 1)


def headline(decided: pd.DataFrame, summaries: pd.DataFrame, run: dict[str, Any] | None = None,
             conditioning: pd.DataFrame | None = None, movement: pd.DataFrame | None = None,
             new_rows: pd.DataFrame | None = None) -> list[str]:
    """The findings' opening lines (at most fourteen, and 4 leaders more per vocabulary mode
    a target is written with: 4 leaders, the paper tables' in one line, the held-out shared
    tokens against chance, SALT against OMP at its two k, Token Distillation against its
    start, 4 kinds of anomaly and the seeds)."""
    if decided.empty:
        return ["No paired test in this run: nothing to rank (see the tables below)."]
    broken = broken_checkpoints(summaries)
    cells = cell_power(decided, broken)
    lines = [line for kind in KINDS if kind not in TABLES
             for line in leader_lines(summaries, decided, kind, broken, cells)]
    benchmarks = [c for kind in TABLES
                  for c in leader_lines(summaries, decided, kind, broken, cells, bold=False)]
    if benchmarks:
        lines.append("**Benchmarks**: " + "; ".join(c.rstrip(".") for c in benchmarks) + ".")
    omp_k = int((run or {}).get("omp_k", OMP_DEFAULT_K))
    lines += [heldout_line(decided, summaries),
              *salt_omp_lines(decided, summaries, conditioning, omp_k, movement),
              *start_lines(decided, summaries, new_rows, movement),
              *anomaly_lines(decided, summaries), seed_line(run, decided)]
    return [line for line in lines if line]


def sections(decided: pd.DataFrame, summaries: pd.DataFrame) -> list[dict[str, Any]]:
    """The per-setting tables, grouped by kind."""
    tests = lookup(decided)
    out = [{"title": kind.label,
            "body": "\n".join(setting_sections(part, tests, level=4)).strip()}
           for kind in SECTIONS if len(part := _select(summaries, kind))]
    probes = decided[decided["family"] == "plm_probes"]
    if len(probes):
        table = probes.pivot_table(index=["lang", "source", "target"], columns="metric",
                                   values="diff", aggfunc="first").round(1)
        table["carries meaning"] = carries_meaning(decided).map({True: "yes", False: "no"})
        out.append({"title": "The target PLMs SALT recycles (probe z against random rows)",
                    "body": markdown(table.reset_index(), "{:.1f}")})
    omp = decided[(decided["versus"] == "salt") & decided["method"].isin(OMP_METHODS)]
    if len(omp):
        table = omp.assign(**{"OMP − SALT": [
            f"{d:+.{metric_spec(m).digits}f} ± {s:.{metric_spec(m).digits}f}"
            for d, s, m in zip(omp["diff"], omp["se"], omp["metric"], strict=True)]})
        columns = ["family", "stage", "lang", "target", "side", "metric", "method",
                   "OMP − SALT", "relation"]
        out.append({"title": "SALT against OMP", "body": markdown(table[columns])})
    return out


def findings_markdown(decided: pd.DataFrame, summaries: pd.DataFrame,
                      run: dict[str, Any] | None = None, real: bool = False,
                      conditioning: pd.DataFrame | None = None,
                      movement: pd.DataFrame | None = None,
                      new_rows: pd.DataFrame | None = None) -> str:
    """The text of findings.md. ``run``: the run's run.json (commit, date, note, seeds,
    ``omp_k``: OMP's configured k where it is not the tool's default);
    ``real``: a real-text run's; ``conditioning``: SALT's conditioning table, where the run
    has one (the SALT-against-OMP lines give k/h from it); ``movement``: how far LAPT moved
    the new rows, where the run scored its LAPT checkpoints (the lines after LAPT say so)."""
    summaries = with_decisions(summaries, decided)
    once = decided[~pair_ids(decided).duplicated()]  # a pair held twice is one test
    template = jinja2.Template(TEMPLATE.read_text(encoding="utf-8"), trim_blocks=True,
                               lstrip_blocks=True, keep_trailing_newline=True)
    return template.render(
        real=real, run=run,
        headline=headline(decided, summaries, run, conditioning, movement, new_rows),
        draws="one seed" if (n := seed_count(run, decided)) == 1 else f"{n} seeds",
        tests=len(once), clear=int(once["clears"].sum()), correction=CORRECTION,
        alpha=float(decided.attrs.get("alpha", FAMILY_ALPHA)), legend=legend(several(decided)),
        sections=sections(decided, summaries))


# -- the reference runs, the README and the docs pages ----------------------------------------


def reference_text(reference: Path, real: bool = False) -> str:
    """findings.md of a committed reference."""
    run = json.loads((reference / RUN_JSON).read_text())
    return findings_markdown(*read_run(reference), run, real=real,
                             conditioning=read_conditioning(reference),
                             movement=read_run_table(reference),
                             new_rows=read_run_table(reference, NEW_ROWS))


def headline_of(text: str) -> str:
    """The headline lines of a findings text (its paragraph after the title)."""
    return text.split("\n\n")[1]


#: The headline lines the README leaves to the docs page: the anomalies and the seeds.
PAGE_ONLY = re.compile(r"- \*\*(Worse than Random|Rows blown up or zero|PLMs without "
                       r"measurable meaning|Tests without power|One seed|\d+ seeds)\*\*")


def headline_block(text: str, page: Path) -> str:
    """The README's block: a findings text's headline lines that compare the methods, and
    where the rest (the anomalies, the seeds) and every setting's table are."""
    lines = [line for line in headline_of(text).splitlines() if not PAGE_ONLY.match(line)]
    return ("\n".join(lines) + f"\n\nThe anomalies, the seeds and every setting's table: "
            f"[{page}]({page}).\n")


def replace_block(text: str, block: str, real: bool) -> str:
    start_mark, end_mark = MARKERS[real]
    start, end = text.index(start_mark) + len(start_mark), text.index(end_mark)
    return text[:start] + "\n" + block + text[end:]


def write_pages(real: bool, readme: Path = README, root: Path = Path(".")) -> None:
    """Rewrite the README's headline and the docs page of a reference from its tables."""
    reference = root / (REAL_REFERENCE_DIR if real else REFERENCE_DIR)
    text = reference_text(reference, real)
    page = root / PAGES[real]
    page.write_text(replace_block(page.read_text(), text, real) if real else text)
    readme.write_text(replace_block(readme.read_text(), headline_block(text, PAGES[real]), real))


def refresh_reference(report_dir: Path, real: bool = False, readme: Path = README,
                      root: Path = Path(".")) -> None:
    """Copy a run's comparisons and summaries (and SALT's conditioning, where the run has
    it) into its reference with ``run.json`` (the checkout's commit, ``-dirty`` when the
    tree differs, and the tables' date) and rewrite the pages (:func:`write_pages`)."""
    commit = subprocess.run(["git", "describe", "--always", "--abbrev=7", "--dirty=-dirty"],
                            capture_output=True, text=True, check=True, cwd=root).stdout.strip()
    reference = root / (REAL_REFERENCE_DIR if real else REFERENCE_DIR)
    if reference.exists():
        shutil.rmtree(reference)
    reference.mkdir(parents=True)
    sources = [report_dir / paths.REPORT_FILES[n] for n in ("comparisons_csv", "summaries_csv")]
    for source in [*sources, *(report_dir / name for name in (CONDITIONING, MOVEMENT, NEW_ROWS))]:
        if source in sources or source.is_file():
            shutil.copyfile(source, reference / source.name)
    date = dt.datetime.fromtimestamp(max(s.stat().st_mtime for s in sources), dt.UTC).date()
    (reference / RUN_JSON).write_text(
        json.dumps({"commit": commit, "date": date.isoformat()}, indent=2) + "\n")
    write_pages(real, readme, root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    for flag, kind in (("--reference", {"type": Path, "metavar": "REPORT_DIR"}),
                       ("--real-reference", {"type": Path, "metavar": "REPORT_DIR"}),
                       ("--pages", {"action": "store_true"}),
                       ("--compare", {"type": Path, "nargs": 2, "metavar": ("A", "B")})):
        group.add_argument(flag, help=prose(f"findings_cli.{flag[2:]}"), **kind)
    args = parser.parse_args(argv)
    if args.reference or args.real_reference:
        refresh_reference(args.reference or args.real_reference, real=bool(args.real_reference))
        return 0
    if args.pages:  # both references' pages, where each is committed
        for real in (False, True):
            if (REAL_REFERENCE_DIR if real else REFERENCE_DIR).joinpath(RUN_JSON).is_file():
                write_pages(real)
        return 0
    merged = compare_runs(read_run(args.compare[0])[0], read_run(args.compare[1])[0])
    print(f"{int(merged['agrees'].sum())} of {len(merged)} tests shared by the two runs agree.")
    for r in merged[~merged["agrees"]].itertuples():
        print(f"- {r.family} {r.stage} {r.lang}/{r.source}/{r.target} {r.side} {r.split} "
              f"{r.metric}: {r.method} against {r.other}: {r.relation_a} in A, "
              f"{r.relation_b} in B")
    return 0 if merged["agrees"].all() else 1


if __name__ == "__main__":
    sys.exit(main())
