"""The per-setting comparisons: what the zero-shot and alignment settings hand the spine
item by item, and one Markdown table per setting drawn from its summaries and decided
comparisons (zeroshot.md, lapt_zeroshot.md, alignment.md and the findings' tables), so
every mark is the comparisons table's. Zero-shot: each checkpoint's bits per byte on its
language's held-out text, before any training or after LAPT, per document
(:mod:`embtransfer.evaluation.zeroshot`). Alignment: how well each method's new rows mean
what their tokens mean, per token (:mod:`embtransfer.evaluation.alignment` defines the
metrics, their chance levels and each token's ``split`` of the truth; ``held_out``, the
concepts no method was aligned on, is the headline).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from embtransfer.core import paths
from embtransfer.core.paired import binomial_test, derived_seed, normal_p
from embtransfer.evaluation.alignment import COSINES
from embtransfer.report.comparisons import (
    KEYS,
    checkpoint_flags,
    compare_setting,
    given_test,
    metric_spec,
    row_check_flag,
)
from embtransfer.report.records import ZEROSHOT_KEYS, MalformedResultError, identity, read_records
from embtransfer.report.seeds import fraction, primary_relation
from embtransfer.report.tables import format_p, markdown
from embtransfer.report.texts import prose
from embtransfer.transfer.method_catalog import COMPETING_ROLES, role
from embtransfer.world.split import SPLITS

# -- zero-shot bits per byte -----------------------------------------------------------------------


#: The source model's setting has no target PLM: it reads the text with its own tokenizer.
OWN_TOKENIZER = "(source tokenizer)"


def document_bits(record: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(per-document NLL in bits, per-document UTF-8 bytes) of one zero-shot record."""
    nll = np.asarray(record["document_nll_nats"], np.float64) / math.log(2)
    n_bytes = np.asarray(record["document_bytes"], np.float64)
    if nll.shape != n_bytes.shape or nll.ndim != 1 or nll.size < 2:
        raise MalformedResultError(
            f"results file {record.get('_path')}: document_nll_nats and document_bytes must be "
            f"two lists of one length (two documents or more), got {nll.shape} and {n_bytes.shape}")
    return nll, n_bytes


def zeroshot_lines(files: list[str], seed: int, stage: str = "transfer",
                   flagged: dict[tuple[str, ...], str] | None = None
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(summary lines, test lines) of every setting of ``files``' records (each with its
    per-document lists, in document order), family ``zeroshot`` or ``lapt_zeroshot``.
    A transferred checkpoint's record carries its row check, whose flag its lines carry;
    ``flagged`` (:func:`embtransfer.report.comparisons.flagged_checkpoints`) flags the
    checkpoints of a later stage trained from flagged rows."""
    settings: dict[tuple, dict[str, dict[str, Any]]] = {}
    required = (*ZEROSHOT_KEYS, "document_nll_nats", "document_bytes")
    for record in read_records(files, required=required):
        setting = (record["lang"], record["source"], record.get("target") or OWN_TOKENIZER)
        settings.setdefault(setting, {})[record["method"]] = record
    summaries: list[dict[str, Any]] = []
    tests: list[dict[str, Any]] = []
    for setting in sorted(settings):
        records = settings[setting]
        losses = {method: document_bits(record) for method, record in records.items()}
        n_bytes = next(iter(losses.values()))[1]
        for method, (_, own) in losses.items():
            if not np.array_equal(own, n_bytes):
                raise MalformedResultError(
                    f"zero-shot {setting}: {method} was scored on other documents than "
                    f"{next(iter(losses))} ({records[method].get('_path')})")
        key = dict(zip(("lang", "source", "target"), setting, strict=True)) | {
            "family": "zeroshot" if stage == "transfer" else f"{stage}_zeroshot", "stage": stage,
            "metric": "bits_per_byte"}
        # only a transferred checkpoint has a row check (not the source model, not LAPT's)
        flags = checkpoint_flags(flagged or {}, key) | {
            m: row_check_flag(r["row_check"]) for m, r in records.items()
            if isinstance(r.get("row_check"), dict)}
        lines, made = compare_setting(key, {m: nll for m, (nll, _) in losses.items()}, seed,
                                      n_bytes, flags)
        summaries += lines
        tests += made
    return summaries, tests


# -- alignment with the truth ----------------------------------------------------------------------


#: An alignment setting (its metric aside).
ALIGNMENT_SETTING = ["stage", "lang", "source", "target", "side", "split"]
#: The metrics a method is compared on, each beside its per-token column: P@10 first.
TESTED = {"p_at_10": "hit_10", "p_at_1": "hit_1", "contrast": "contrast"}


def read_scores(files: list[str], template: paths.Template, what: str, keys: tuple[str, ...],
                empty: list[str]) -> pd.DataFrame:
    """Every per-token score of ``files`` (parquet at ``template``, ``what`` in errors), with
    the wildcards ``keys`` of each path as leading columns; ``empty``: the columns of none."""
    parts = []
    for path in files:
        ident = identity(template, path, what)
        frame = pd.read_parquet(path)
        for key in keys:
            frame.insert(0, key, ident[key])
        parts.append(frame)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=empty)


def read_alignment(files: list[str]) -> pd.DataFrame:
    """Every per-token score of ``files`` (:data:`paths.ALIGNMENT`), with the setting's
    identity read from each path."""
    return read_scores(files, paths.ALIGNMENT, "an alignment file",
                       ("stage", "lang", "source", "target"),
                       [*ALIGNMENT_SETTING, "method", "target_id", "hit_1", "hit_10", *COSINES])


def alignment_lines(files: list[str], seed: int = 0,
                    flagged: dict[tuple[str, ...], str] | None = None
                    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(summary lines, test lines) of every setting and metric of ``files``' scores; the
    checkpoints ``flagged`` (:func:`embtransfer.report.comparisons.flagged_checkpoints`)
    carry their flag, or at a later stage the flag of the rows they were trained from."""
    scores = read_alignment(files)
    summaries: list[dict[str, Any]] = []
    tests: list[dict[str, Any]] = []
    # the held-out split first: the headline (embtransfer.world.split.SPLITS' order)
    settings = sorted(scores.groupby(ALIGNMENT_SETTING, sort=True),
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
        flags = checkpoint_flags(flagged or {}, dict(zip(ALIGNMENT_SETTING, setting,
                                                         strict=True)))
        for metric, column in TESTED.items():
            depth = metric.removeprefix("p_at_")
            chance = (100 * float(first[f"chance_{depth}"].mean())
                      if f"chance_{depth}" in first else float("nan"))
            key = dict(zip(ALIGNMENT_SETTING, setting, strict=True)) | {"family": "alignment",
                                                              "metric": metric}
            lines, made = compare_setting(
                key, {m: g[column].to_numpy() for m, g in by_method.items()},
                derived_seed(setting, seed), flags=flags, chance=chance)
            summaries += lines
            tests += made
    return summaries, tests


# -- held-out shared tokens ------------------------------------------------------------------------


#: A held-out setting (its metric aside): each method's rows for the setting's held-out tokens.
HOLDOUT_SETTING = ["lang", "source", "target", "side"]
#: The metrics of the held-out tokens, each beside its per-token column and its chance
#: column (none: a chance of 0): P@10 first, the headline's.
HOLDOUT_TESTED = {"p_at_10": ("hit_10", "chance_10"), "p_at_1": ("hit_1", "chance_1"),
                  "mrr": ("reciprocal_rank", "chance_rr"), "contrast": ("contrast", None)}


def read_holdout_scores(files: list[str]) -> pd.DataFrame:
    """Every per-token score of ``files`` (:data:`paths.HOLDOUT_SCORES`), with the setting's
    identity and the method read from each path."""
    return read_scores(files, paths.HOLDOUT_SCORES, "a held-out scores file",
                       ("method", "lang", "source", "target"),
                       [*HOLDOUT_SETTING, "method", "target_id", "kind", "how"])


def chance_test(key: dict[str, Any], method: str, column: np.ndarray,
                chance: np.ndarray | None) -> dict[str, Any]:
    """``method``'s mean of ``column`` against its chance as a test line: hits (0/1) by the
    exact binomial test at the mean chance rate, other scores by the normal z of their mean
    over its standard error (the ± the table shows); ``chance`` None is a chance of 0."""
    metric = metric_spec(key["metric"])
    values = np.asarray(column, np.float64)
    level = float(np.mean(chance)) if chance is not None else 0.0
    se = float(values.std(ddof=1) / math.sqrt(values.size))
    diff = float(values.mean()) - level
    if metric.test == "mcnemar":
        p, test = binomial_test(int(values.sum()), values.size, level), "binomial"
    else:
        p, test = (normal_p(diff / se) if se > 0 else (1.0 if diff == 0 else 0.0)), "z"
    return given_test(key, method, metric.scale * diff, metric.scale * se, p, test) | {
        "n": values.size}


def holdout_lines(files: list[str], seed: int = 0,
                  flagged: dict[tuple[str, ...], str] | None = None
                  ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(summary lines, test lines) of the held-out shared tokens, family ``heldout``: per
    setting, side and metric, the methods compared with each other (:func:`compare_setting`)
    and each working competing method against chance (:func:`chance_test`). A method whose
    transferred checkpoint is ``flagged`` carries the flag here too (the same method on the
    same setting): shown, not ranked, not tested."""
    scores = read_holdout_scores(files)
    summaries: list[dict[str, Any]] = []
    tests: list[dict[str, Any]] = []
    for setting, group in scores.groupby(HOLDOUT_SETTING, sort=True):
        by_method = {m: g.sort_values("target_id", kind="stable")
                     for m, g in group.groupby("method", sort=False)}
        ids = [tuple(g["target_id"]) for g in by_method.values()]
        if any(i != ids[0] for i in ids):
            raise MalformedResultError(f"held-out {setting}: the methods were scored on "
                                       "different tokens")
        if len(ids[0]) < 2:
            continue
        first = next(iter(by_method.values()))
        base = dict(zip(HOLDOUT_SETTING, setting, strict=True)) | {"family": "heldout",
                                                                   "stage": "transfer"}
        flags = checkpoint_flags(flagged or {}, base)
        for metric, (column, chance_column) in HOLDOUT_TESTED.items():
            key = base | {"metric": metric}
            chance = first[chance_column].to_numpy() if chance_column else None
            level = metric_spec(metric).scale * (float(chance.mean()) if chance is not None
                                                 else 0.0)
            lines, made = compare_setting(
                key, {m: g[column].to_numpy() for m, g in by_method.items()},
                derived_seed(setting, seed), flags=flags, chance=level)
            summaries += lines
            tests += made
            tests += [chance_test(key, m, g[column].to_numpy(), chance)
                      for m, g in by_method.items()
                      if role(m) in COMPETING_ROLES and m not in flags]
    return summaries, tests


# -- the tables ------------------------------------------------------------------------------------


#: The marks of a cell (:data:`LEGEND` says what each means; no working method should be
#: worse than Random).
MARKS = {"best": "▲", "vs_best": "▽", "better_random": "ʳ", "worse_random": "!"}
LEGEND = prose("legend", **MARKS)
#: What the marks of a run with several seeds add (:func:`legend`).
SEEDS_LEGEND = prose("legend_seeds", example=MARKS["vs_best"] + fraction(2, 3), near="~")
NEAR = "~"
SETTING = [k for k in KEYS if k not in ("family", "metric")]


def legend(several: bool = False) -> str:
    """The marks' legend; with several seeds, with what a fraction and ``~`` say."""
    return f"{LEGEND} {SEEDS_LEGEND}" if several else LEGEND


def several_seeds(tests: dict[tuple, Any]) -> bool:
    """Whether the decided tests of :func:`embtransfer.report.comparisons.lookup` are a
    consensus over several seeds (:func:`embtransfer.report.seeds.combine`)."""
    return any(int(test.get("seeds", 1)) > 1 for test in tests.values())


def _number(value: float, digits: int) -> str:
    return "" if pd.isna(value) else f"{value:.{digits}f}"


def _in_some(test: Any) -> bool:
    """A test that cleared in the primary seed but not in every seed that made it."""
    return isinstance(value := test.get("in_seeds", ""), str) and bool(value)


def _mark(test: Any, marks: dict[str, str]) -> str:
    """The mark of ``test``'s relation; where it held in some seeds only, the primary's mark
    and in how many seeds it held (it is no verdict, so it has no mark of its own)."""
    if test is None:
        return ""
    if _in_some(test):
        mark = marks.get(primary_relation(test), "")
        return mark + fraction(int(test["held"]), int(test["seeds"])) if mark else ""
    return marks.get(test["relation"], "")


def _near(test: Any) -> bool:
    return test is not None and bool(test.get("borderline", False))


def _cells(line: Any, tests: dict[tuple, Any], versus: tuple[str, ...],
           several: bool = False) -> dict[str, str]:
    """A summary line's cell (value ± se, its rank, its marks) and, per name in ``versus``,
    its difference from that method ± se (p), ``*`` where the test clears. ``several``: the
    tests are a consensus over several seeds, whose marks say where a test held in some
    seeds only and where one lies near its threshold (:data:`SEEDS_LEGEND`)."""
    spec = metric_spec(line["metric"])
    found = {v: tests.get((*(line[k] for k in KEYS), line["method"], v))
             for v in ("best", "random", *versus)}
    marks = MARKS["best"] if line["rank"] == 1 else ""
    marks += _mark(found["best"], {"worse": MARKS["vs_best"]})
    marks += _mark(found["random"], {"better": MARKS["better_random"],
                                     "worse": MARKS["worse_random"]})
    # one ~ for the cell: its marks stay short
    marks += NEAR if several and (_near(found["best"]) or _near(found["random"])) else ""
    rank = "" if pd.isna(line["rank"]) else f" ({int(line['rank'])})"
    cells = {spec.label: f"{_number(line['value'], spec.digits)} ± "
                         f"{_number(line['se'], spec.digits)}{rank} {marks}".rstrip()}
    for other in versus:
        test, d = found[other], spec.digits
        cells[f"{spec.label} vs {other}"] = "" if test is None else (
            f"{test['diff']:+.{d}f} ± {test['se']:.{d}f} ({format_p(test['p'])})"
            + (" *" if test["clears"] else "")
            + (f" {fraction(int(test['held']), int(test['seeds']))}" if _in_some(test) else "")
            + (f" {NEAR}" if several and _near(test) else ""))
    return cells


def table_order(group: pd.DataFrame) -> pd.DataFrame:
    """The lines of ``group``'s first metric in the tables' order: shown lines first (the
    oracle, the source model), then by rank, then the flagged checkpoints (shown, not
    ranked: apart from the methods they would otherwise stand among)."""
    first = group[group["metric"] == group["metric"].iloc[0]] if len(group) else group
    place = np.where(first["rank"].notna(), 1, np.where(first["flags"].astype(bool), 2, 0))
    return first.assign(_place=place).sort_values(
        ["_place", "rank", "method"], kind="stable").drop(columns="_place")


def setting_table(group: pd.DataFrame, tests: dict[tuple, Any], details: bool = False,
                  versus: tuple[str, ...] = ("best", "random", "salt"),
                  several: bool | None = None) -> str:
    """The Markdown table of one setting's summary lines (one or more metrics); ``several``:
    whether ``tests`` span several seeds (by default, read from them)."""
    several = several_seeds(tests) if several is None else several
    rows = []
    for method in table_order(group)["method"]:
        row = {"method": method}
        mine = group[group["method"] == method]
        for metric in dict.fromkeys(group["metric"]):
            line = mine[mine["metric"] == metric]
            if line.empty:
                row[metric_spec(metric).label] = ""
            else:
                row |= _cells(line.iloc[0], tests, versus if details else (), several)
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
    several = several_seeds(tests)
    for _, group in summaries.groupby(SETTING, sort=False):
        parts += ["", f"{'#' * level} {heading(group.iloc[0])}", "",
                  setting_table(group, tests, details, several=several).rstrip("\n")]
    return parts
