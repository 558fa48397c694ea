"""The SALT paper's tables, regenerated from result files, the paper's numbers beside ours.

A table's rows are the ones the configuration asks for (the paper's grid, narrowed to the
runs the report rule's input paths name), filled from the result records; its columns are
the results' own metric names, so the same code builds the paper's benchmark tables and the
miniature world's fact-question table. What a cell shows (``missing``, ``—``, ``±``, the
``(paper)`` columns of :mod:`embtransfer.report.paper`, the marks) the notes under each
table say (``texts.yaml``). Markdown is wide, as in the paper; the CSV is long: one line per
(row, metric) with our value, its standard error, the paper's value and the cell's status.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from embtransfer.core import paths
from embtransfer.core.grid import STAGES, Grid, target_model
from embtransfer.core.paired import CORRECTION, FAMILY_ALPHA
from embtransfer.report.comparisons import checkpoint_flags, compare_setting
from embtransfer.report.paper import PaperNames, primary_target
from embtransfer.report.records import EvalRecord, LaptRun, MalformedResultError
from embtransfer.report.texts import prose

MISSING = "missing"
NOT_COMPARABLE = "not comparable"
NOT_APPLICABLE = "—"
#: The paper's column order; other metric names follow, sorted.
PAPER_METRIC_ORDER = ("ARC", "HellaSwag", "TruthfulQA", "Belebele acc", "MLQA EM", "MLQA F1",
                      "XQuAD EM", "XQuAD F1", "Avg")
SOURCE_MODEL_LABEL = "source model (no transfer)"
#: The miniature world's oracle (:mod:`embtransfer.transfer.method_catalog`): shown, not ranked.
ORACLE = "world_oracle"


def markdown(frame: pd.DataFrame, floatfmt: str = "{:.4f}") -> str:
    """A GitHub-style Markdown table; NaN cells are shown as an em dash."""

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return "—" if math.isnan(value) else floatfmt.format(value)
        return str(value)

    header = "| " + " | ".join(str(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *rows])


def format_p(p: float) -> str:
    """A p-value in a table cell: two significant digits, tiny ones as a power of ten (below
    a float's smallest, a normal tail is 0)."""
    if p < 1e-300:
        return "p < 1e-300"
    return f"p {p:.2g}" if p >= 1e-4 else f"p {p:.0e}".replace("e-0", "e-")


@dataclass
class Row:
    """One table row: its key columns, our values, the paper's setting (None: not the paper's)."""

    keys: dict[str, str]
    values: dict[str, float | None] = field(default_factory=dict)  # None = missing
    stderr: dict[str, float | None] = field(default_factory=dict)  # None = none reported
    paper: tuple[str, str, str, str] | None = None  # (source_model, arch, method, lang)
    note: str = ""  # the reference CSV's note for this row
    missing: list[str] = field(default_factory=list)
    #: Per metric (:func:`apply_marks`): "best" for its block's best competing method, else
    #: the p-value of the paired test against it; ``clears``: the metrics where that clears.
    vs_best: dict[str, str | float] = field(default_factory=dict)
    clears: set[str] = field(default_factory=set)
    per_document: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class Table:
    number: int
    title: str
    description: str
    rows: list[Row]
    metrics: list[str]
    reference: dict[tuple[str, ...], float]
    fmt: Callable[[str, float], str]
    notes: list[str] = field(default_factory=list)
    #: The family-wise level its marks were decided at (:func:`apply_marks`).
    alpha: float = FAMILY_ALPHA

    def paper_value(self, row: Row, metric: str) -> float | None:
        if row.paper is None:  # (source_model, arch, method, lang): the reference's order
            return None
        return self.reference.get((str(self.number), *row.paper, metric, row.note))

    def paper_metrics(self) -> list[str]:
        """Our metrics for which at least one row has the paper's number."""
        return [m for m in self.metrics if any(self.paper_value(r, m) is not None
                                               for r in self.rows)]

    def wide(self) -> pd.DataFrame:
        """The Markdown layout: key columns, then each metric with its paper column."""
        paper = set(self.paper_metrics())
        records = []
        for row in self.rows:
            cells: dict[str, str] = dict(row.keys)
            for metric in self.metrics:
                cells[metric] = self._ours(row, metric)
                if metric in paper:
                    ref = self.paper_value(row, metric)
                    cells[f"{metric} (paper)"] = (NOT_COMPARABLE if ref is None
                                                  else self.fmt(metric, ref))
            records.append(cells)  # every row has the same cells, in the same order
        return pd.DataFrame(records, columns=list(records[0]) if records else self.metrics)

    def _ours(self, row: Row, metric: str) -> str:
        if metric not in row.values:
            return NOT_APPLICABLE
        value, err = row.values[metric], row.stderr.get(metric)
        if value is None:
            return MISSING
        text = self.fmt(metric, value) + ("" if err is None else f" ± {self.fmt(metric, err)}")
        if row.vs_best.get(metric) == "best":
            return f"{text} (best)"
        return text + (" *" if metric in row.clears else "")

    def long(self) -> pd.DataFrame:
        """One line per (row, metric): value, stderr, status, paper_value, comparable."""
        lines = []
        for row in self.rows:
            for metric in self.metrics:
                if metric not in row.values:
                    continue
                value = row.values[metric]
                ref = self.paper_value(row, metric)
                err, best = row.stderr.get(metric), row.vs_best.get(metric)
                lines.append({
                    "table": self.number, **row.keys, "metric": metric,
                    "value": value if value is not None else math.nan,
                    "stderr": err if err is not None else math.nan,
                    "status": "ok" if value is not None else MISSING,
                    "paper_value": ref if ref is not None else math.nan,
                    "comparable": ref is not None,
                    "best": best == "best",
                    "vs_best_p": best if isinstance(best, float) else math.nan,
                })
        keys = list(self.rows[0].keys) if self.rows else []
        columns = ["table", *keys, "metric", "value", "stderr", "status", "paper_value",
                   "comparable", "best", "vs_best_p"]
        return pd.DataFrame(lines, columns=columns)

    def markdown(self, level: int = 1) -> str:
        parts = [f"{'#' * level} Table {self.number}: {self.title}", "", self.description, ""]
        frame = self.wide()
        parts.append(markdown(frame) if len(frame) else "(no rows: nothing configured)")
        notes = list(self.notes)
        if self.rows and not self.paper_metrics():
            notes.append(prose("tables.no_paper"))
        elif self.rows:
            notes.append(prose("tables.paper", not_comparable=NOT_COMPARABLE))
        if any(row.vs_best for row in self.rows):
            notes.append(prose("tables.best", correction=CORRECTION, alpha=self.alpha,
                              oracle=ORACLE))
        missing = [f"- {' '.join(f'{k}={v}' for k, v in row.keys.items())}: {what}"
                   for row in self.rows for what in row.missing]
        if missing:
            notes.append(f"Rows with `{MISSING}` cells ({len(missing)}):\n" + "\n".join(missing))
        for note in notes:
            parts += ["", note]
        return "\n".join(parts) + "\n"


def format_score(metric: str, value: float) -> str:
    return f"{value:.2f}"


def format_loss(metric: str, value: float) -> str:
    return f"{value:.4f}"


def format_coverage(metric: str, value: float) -> str:
    return f"{value:.0f}" if metric in ("copied", "initialized") else f"{value:.2f}"


def order_metrics(names: set[str]) -> list[str]:
    known = [m for m in PAPER_METRIC_ORDER if m in names]
    return known + sorted(names - set(known))


def sort_rows(rows: list[Row], grid: Grid) -> list[Row]:
    """``rows`` by language, source, stage, target and method, then their other keys; each
    value in the config's order, then alphabetical."""
    known: dict[str, list[Any]] = {
        "lang": grid.langs, "source": grid.sources, "stage": list(STAGES),
        "target": [t for plms in grid.targets.values() for t in plms],
        "method": [SOURCE_MODEL_LABEL, *grid.methods]}

    def key(row: Row) -> tuple:
        ordered = sorted(row.keys, key=lambda c: list(known).index(c) if c in known else 9)
        values = [(known.get(c, []), row.keys[c]) for c in ordered]
        return tuple((order.index(v), "") if v in order else (len(order), str(v))
                     for order, v in values)

    return sorted(rows, key=key)


# -- Tables 1-4: lm-eval results -------------------------------------------------------------


@dataclass(frozen=True)
class EvalTableSpec:
    number: int
    title: str
    kind: str
    variant: str  # the record's field that tells rows apart: "eval_language" or "note"
    variant_column: str
    by_target: bool = False  # Table 4: every target PLM, the focus method only


TABLE_SPECS = {
    1: EvalTableSpec(1, "knowledge benchmarks", "knowledge", "eval_language", "eval language"),
    2: EvalTableSpec(2, "machine reading comprehension", "mrc", "eval_language",
                     "eval language"),
    3: EvalTableSpec(3, "cross-lingual reading comprehension", "crosslingual", "note",
                     "languages"),
    4: EvalTableSpec(4, "knowledge benchmarks by target-PLM architecture", "knowledge",
                     "eval_language", "eval language", by_target=True),
}


#: An evaluation table's records: (lang, variant) -> metric -> the tasks giving it over every
#: run, and run key (stage, lang, source, target, method, variant) -> metric -> its record.
EvalIndex = tuple[dict[tuple[str, str], dict[str, set[str]]], dict[tuple, dict[str, EvalRecord]]]


def _index_eval_records(spec: EvalTableSpec, records: list[EvalRecord]) -> EvalIndex:
    """Index ``records`` by run; two files giving one metric of one run are an error."""
    expected: dict[tuple[str, str], dict[str, set[str]]] = {}
    found: dict[tuple, dict[str, EvalRecord]] = {}
    for r in records:
        variant = getattr(r, spec.variant)
        cell = found.setdefault((r.stage, r.lang, r.source, r.target, r.method, variant), {})
        for metric in r.scores:
            expected.setdefault((r.lang, variant), {}).setdefault(metric, set()).add(r.task)
            if metric in cell:
                raise MalformedResultError(f"results files {cell[metric].path} and {r.path} "
                                           f"both give {metric!r} for the same run")
            cell[metric] = r
    return expected, found


def _lang_variants(spec: EvalTableSpec, index: EvalIndex, lang: str) -> list[str]:
    """The variants of ``lang``'s rows: the target language's first; one when none has results."""
    return sorted({v for (lg, v) in index[0] if lg == lang},
                  key=lambda v: (v != "target", v)) or [
        "target" if spec.variant == "eval_language" else ""]


def _eval_row_order(spec: EvalTableSpec, grid: Grid, names: PaperNames, config: dict[str, Any],
                    index: EvalIndex) -> list[tuple]:
    """The run keys of the table's rows, in order: the control, the grid's, then others'."""
    keys: list[tuple] = []
    if not spec.by_target and grid.source_control:
        # The control: the untouched source model, in every variant (target language,
        # English, ...), whether its results are there or not.
        keys += [("source", lang, source, None, None, v)
                 for lang in grid.langs for source in grid.sources
                 if grid.wants_eval("source", lang, source, None, None)
                 for v in _lang_variants(spec, index, lang)]
    for stage, lang, source in itertools.product(grid.stages, grid.langs, grid.sources):
        if spec.by_target:
            combos = [(t, grid.focus_method) for t in grid.targets[lang]]
        else:
            target = primary_target(config, names, lang)
            combos = [(target, m) for m in grid.methods] if target else []
        keys += [(stage, lang, source, target, method, variant) for target, method in combos
                 if grid.wants_eval(stage, lang, source, target, method)
                 for variant in _lang_variants(spec, index, lang)]
    if not spec.by_target:  # other runs present: other target PLMs, the source model
        keys += [k for k in sorted(index[1], key=str)
                 if k not in keys and (k[4] is None or k[4] in grid.methods)]
    return keys


def _eval_row(spec: EvalTableSpec, grid: Grid, names: PaperNames, index: EvalIndex,
              key: tuple, all_metrics: list[str]) -> Row:
    """The row of run ``key``: its scores, their standard errors, what it lacks. Its note is
    the reference CSV's: Table 2 names the evaluation language always, Tables 1 and 4 only
    when it is not the target language, Table 3 the context/question languages."""
    stage, lang, source, target, method, variant = key
    per = index[0].get((lang, variant))
    # A language without any result of this kind: every column of the table is missing.
    wanted = order_metrics(set(per)) if per else list(all_metrics)
    cell = index[1].get(key, {})
    keys = {"stage": stage, "lang": lang, "source": source, "target": target or NOT_APPLICABLE}
    if spec.by_target:
        keys["arch"] = names.arch(target) or "?"
    keys["method"] = method or SOURCE_MODEL_LABEL
    keys[spec.variant_column] = variant or NOT_APPLICABLE
    note = variant if spec.variant == "note" else (
        "" if spec.kind == "knowledge" and variant == "target" else f"eval_language={variant}")
    row = Row(keys=keys, note=note,
              paper=names.setting(source, lang, target, method) if stage == "lapt" else None)
    for metric in wanted:
        record = cell.get(metric)
        row.values[metric] = record.scores[metric] if record else None
        row.stderr[metric] = record.stderr.get(metric) if record else None
        if record and metric in record.per_document:
            row.per_document[metric] = record.per_document[metric]
    if spec.kind == "knowledge" and wanted:
        # Avg's standard error is that of the mean of independent scores (none if one has none)
        scores, errors = [row.values[m] for m in wanted], [row.stderr[m] for m in wanted]
        row.values["Avg"] = None if None in scores else sum(scores) / len(scores)
        row.stderr["Avg"] = (None if None in errors
                             else math.sqrt(sum(e * e for e in errors)) / len(errors))
    if not per:
        row.missing.append(f"no {spec.kind} results for {lang} at all")
        if not wanted:
            row.values[MISSING] = None
    elif lacking := [metric for metric in wanted if metric not in cell]:
        row.missing.append(_describe_missing(grid, key, lacking, per, cell))
    return row


def eval_table(spec: EvalTableSpec, records: list[EvalRecord], grid: Grid, names: PaperNames,
               reference: dict[tuple[str, ...], float], config: dict[str, Any]) -> Table:
    """Table 1, 2, 3 or 4 from evaluation records (of the spec's kind)."""
    in_table = [r for r in records if r.kind == spec.kind
                and (r.stage in grid.stages
                     or (r.stage == "source" and not spec.by_target and grid.source_control))]
    index = _index_eval_records(spec, in_table)
    all_metrics = order_metrics({m for per in index[0].values() for m in per})
    rows = [_eval_row(spec, grid, names, index, key, all_metrics)
            for key in _eval_row_order(spec, grid, names, config, index)]
    knowledge = spec.kind == "knowledge"
    metrics = all_metrics + (["Avg"] if knowledge and all_metrics else [])
    if any(MISSING in r.values for r in rows) and not metrics:
        metrics = [MISSING]
    notes = [] if in_table else [prose("tables.no_results", kind=spec.kind)]
    if any(e is not None for r in rows for e in r.stderr.values()):
        notes.append(prose("tables.stderr_knowledge" if knowledge else "tables.stderr"))
    if not spec.by_target and not grid.source_control:
        notes.append(prose("tables.no_control"))
    elif any(r.keys["stage"] == "source" for r in rows):
        notes.append(prose("tables.control", label=SOURCE_MODEL_LABEL))
    return Table(spec.number, spec.title, prose(f"tables.description_{spec.number}"),
                 sort_rows(rows, grid), metrics, reference, format_score,
                 notes + scoring_notes(in_table))


#: A paper table row's keys that name its setting in the comparisons table; the one other
#: key but the method and the architecture (evaluation language, languages) is its variant.
_SETTING_KEYS = ("stage", "lang", "source", "target")


def _block_setting(keys: dict[str, str]) -> dict[str, str]:
    """The comparisons table's setting of a row's block (its keys but the method)."""
    variant = next((v for k, v in keys.items() if k not in (*_SETTING_KEYS, "arch", "method")),
                   "")
    return {k: keys[k] for k in _SETTING_KEYS} | {"variant": variant}


def table_tests(number: int, rows: list[Row], metrics: list[str], seed: int = 0,
                flagged: dict[tuple[str, ...], str] | None = None
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(summary lines, test lines) of a paper table's blocks (same keys but the method; the
    source control and the oracle are shown, not ranked) for each metric with per-question
    scores of two or more methods over the same questions: the spine compares each with the
    block's best, Random and SALT, family ``table{number}``. The checkpoints ``flagged``
    (:func:`embtransfer.report.comparisons.flagged_checkpoints`) carry their flag, or after
    LAPT the flag of the rows they were trained from, and are shown, not ranked."""
    blocks: dict[tuple, list[Row]] = {}
    for row in rows:
        if row.keys["stage"] != "source" and row.keys["method"] != SOURCE_MODEL_LABEL:
            blocks.setdefault(tuple(_block_setting(row.keys).items()), []).append(row)
    summaries: list[dict[str, Any]] = []
    tests: list[dict[str, Any]] = []
    for key, block in blocks.items():
        for metric in metrics:
            scored = [r for r in block if r.values.get(metric) is not None
                      and r.per_document.get(metric)]
            sizes = [len(r.per_document[metric]) for r in scored]
            scored = [r for r in scored if sizes and len(r.per_document[metric]) == max(
                sizes, key=sizes.count)]
            if len(scored) < 2:
                continue
            setting = {"family": f"table{number}", "metric": metric, **dict(key)}
            lines, made = compare_setting(
                setting, {r.keys["method"]: np.asarray(r.per_document[metric]) for r in scored},
                seed, flags=checkpoint_flags(flagged or {}, setting))
            summaries += lines
            tests += made
    return summaries, tests


def apply_marks(table: Table, decided: pd.DataFrame) -> None:
    """Each row's ``vs_best`` and ``clears`` from the decided comparisons of its table:
    "best" where the method is its block's best, else the p-value of its test against it."""
    table.alpha = decided.attrs.get("alpha", FAMILY_ALPHA)
    by_key = {(*_block_setting(row.keys).values(), row.keys.get("method")): row
              for row in table.rows}
    mine = decided[(decided["family"] == f"table{table.number}") & (decided["versus"] == "best")]
    for line in mine.itertuples():
        setting = (line.stage, line.lang, line.source, line.target, line.variant)
        row, best = by_key.get((*setting, line.method)), by_key.get((*setting, line.other))
        if row is None or best is None:
            continue
        row.vs_best[line.metric] = line.p
        if line.clears:
            row.clears.add(line.metric)
        best.vs_best[line.metric] = "best"


def scoring_notes(records: list[EvalRecord]) -> list[str]:
    """A note naming the protocol that scored each extractive-QA score (none without QA)."""
    protocols: dict[str, set[str]] = {}
    for r in records:
        if r.scoring_protocol is not None:
            for metric in r.scores:
                protocols.setdefault(metric, set()).add(r.scoring_protocol)
    by_protocol: dict[str, list[str]] = {}
    for metric, names in sorted(protocols.items()):
        by_protocol.setdefault("`, `".join(sorted(names)), []).append(metric)
    said = [f"{', '.join(metrics)} by `{names}`" for names, metrics in by_protocol.items()]
    return [prose("tables.scoring", protocols="; ".join(said))] if said else []


def _describe_missing(grid: Grid, key: tuple, lacking: list[str], per: dict[str, set[str]],
                      cell: dict[str, EvalRecord]) -> str:
    """What a row lacks: per metric, the files that should give it, or the files read that
    do not."""
    run = dict(zip(("stage", "lang", "source", "target", "method"), key, strict=False))
    template = (paths.EVAL_SOURCE if run["stage"] == "source" else paths.EVAL).at(grid.results_dir)
    read = {r.task for r in cell.values()}
    parts = []
    for metric in lacking:
        tasks = sorted(per.get(metric, ()))
        where = [template.fill(**run, task=t, seed=grid.seed) for t in tasks]
        present = [w for w, t in zip(where, tasks, strict=True) if t in read]
        parts.append(f"{metric} (not in {', '.join(present)})" if present
                     else f"{metric} (no result file: {', '.join(where)})")
    return "; ".join(parts)


# -- Tables 5 and 8: LAPT metrics --------------------------------------------------------------


def bits_per_byte(loss: float, zeroshot: dict[str, Any]) -> float:
    """A per-token loss (nats) in bits per byte of the valid text, with the token and byte
    counts of the checkpoint's zero-shot record: its own ``bits_per_byte`` for its own loss
    (:func:`embtransfer.evaluation.zeroshot.evaluate_text`)."""
    return loss * zeroshot["tokens"] / zeroshot["bytes"] / math.log(2)


def _lapt_rows(runs: list[LaptRun], grid: Grid, names: PaperNames, keys: list[tuple],
               arch: bool = False) -> list[tuple[tuple, LaptRun | None, Row]]:
    """The key, run and row of each (lang, source, target, method) of ``keys``; a run without
    its metrics file is ``missing``. ``arch``: the row names the target PLM's architecture."""
    by_key = {(r.lang, r.source, r.target, r.method): r for r in runs}
    out = []
    for key in keys:
        lang, source, target, method = key
        row = Row(keys={"lang": lang, "source": source, "target": target},
                  paper=names.setting(source, lang, target, method))
        if arch:
            row.keys["arch"] = names.arch(target) or "?"
        row.keys["method"] = method
        if (run := by_key.get(key)) is None:
            path = paths.LAPT_METRICS.at(grid.results_dir).fill(**row.keys, seed=grid.seed)
            row.missing.append(f"no LAPT metrics file ({path})")
        out.append((key, run, row))
    return out


def table5(runs: list[LaptRun], grid: Grid, names: PaperNames,
           reference: dict[tuple[str, ...], float],
           zeroshot: dict[tuple[str, str, str, str], dict[str, Any]] | None = None,
           fractions: tuple[float, ...] = (0.3, 0.6, 0.9), every_method: bool = False
           ) -> Table:
    """Eval loss (and bits per byte) at fractions of the LAPT steps, focus method, every
    target PLM. ``zeroshot``: (lang, source, target, method) -> zero-shot record.
    ``every_method``: every LAPT run's method, not the focus method alone (a real-text run
    trains every method on one target)."""
    zeroshot = zeroshot or {}
    seen = sorted({f for r in runs for f in r.evals}) or list(fractions)
    metrics = [f"eval loss @{f * 100:.0f}% steps" for f in seen]
    bpb_metrics = [f"bits per byte @{f * 100:.0f}% steps" for f in seen]
    methods = grid.methods if every_method else [grid.focus_method]
    keys = [(lang, source, target, method)
            for lang, source, method in itertools.product(grid.langs, grid.sources, methods)
            for target in grid.targets[lang] if grid.wants_lapt(lang, source, target, method)]
    rows = []
    for key, run, row in _lapt_rows(runs, grid, names, keys, arch=True):
        counts = zeroshot.get(key)
        evals = run.evals if run else {}
        for fraction, metric, bpb in zip(seen, metrics, bpb_metrics, strict=True):
            value = row.values[metric] = evals.get(fraction)
            row.values[bpb] = (bits_per_byte(value, counts)
                               if value is not None and counts else None)
        if lacking := [f"{f:g}" for f in seen if run and f not in evals]:
            row.missing.append(f"no evaluation at fraction {', '.join(lacking)} in {run.path}")
        if counts is None and any(f in evals for f in seen):
            row.missing.append(
                "bits per byte (no zero-shot record for the tokens per byte: "
                f"{paths.ZEROSHOT.at(grid.results_dir).fill(**row.keys, seed=grid.seed)})")
        rows.append(row)
    return Table(5, "eval loss during LAPT by target-PLM architecture",
                 prose("tables.description_5_every" if every_method else "tables.description_5"),
                 sort_rows(rows, grid),
                 [m for pair in zip(metrics, bpb_metrics, strict=True) for m in pair],
                 reference, format_loss, [prose("tables.notes_5")])


def table8(runs: list[LaptRun], grid: Grid, names: PaperNames,
           reference: dict[tuple[str, ...], float], config: dict[str, Any]) -> Table:
    """Final LAPT training loss per method (GPT target PLM; other runs present are added)."""
    metric = "final train loss"
    keys = []
    for lang in grid.langs:
        target = primary_target(config, names, lang)
        if target:
            keys += [(lang, source, target, m) for source in grid.sources for m in grid.methods
                     if grid.wants_lapt(lang, source, target, m)]
    keys += [k for k in sorted({(r.lang, r.source, r.target, r.method) for r in runs})
             if k not in keys and k[3] in grid.methods]
    rows = []
    for _, run, row in _lapt_rows(runs, grid, names, keys):
        loss = (run.final or {}).get("final_train_loss") if run else None
        row.values[metric] = float(loss) if loss is not None else None
        if run is not None and loss is None:
            row.missing.append(f"no final line with final_train_loss in {run.path}")
        rows.append(row)
    return Table(8, "final training loss", prose("tables.description_8"),
                 sort_rows(rows, grid), [metric], reference, format_loss)


# -- Table 6: vocabulary overlap ----------------------------------------------------------------


def table6(coverage: dict[tuple[str, str], dict[str, Any] | None], grid: Grid,
           names: PaperNames, reference: dict[tuple[str, ...], float]) -> Table:
    """Copied / initialized tokens and coverage per (source, target PLM); ``coverage``:
    (source, target) -> its coverage.json record, None when absent. The paper's counts are its
    fuzzy matching: with ``overlap.match: exact`` no row is comparable."""
    fields = {"copied": "copied", "initialized": "initialized", "coverage %": "coverage_pct",
              "corpus coverage %": "corpus_coverage_pct"}  # column -> coverage.json's key
    corpus = any(c and c.get("corpus_coverage_pct") is not None for c in coverage.values())
    metrics = list(fields)[:4 if corpus else 3]
    rows = []
    for lang, source in itertools.product(grid.langs, grid.sources):
        # one row per PLM, whichever vocabulary modes its settings take
        for target in dict.fromkeys(target_model(t) for t in grid.targets[lang]):
            record = coverage.get((source, target))
            paper = (names.sources.get(source), names.arch(target), "SALT",
                     names.languages.get(lang))
            row = Row(keys={"lang": lang, "source": source, "target": target,
                            "arch": names.arch(target) or "?"},
                      paper=paper if grid.overlap_match == "fuzzy" and all(paper) else None)
            for metric in metrics:
                value = record.get(fields[metric]) if record else None
                row.values[metric] = float(value) if value is not None else None
            if record is None:
                path = paths.COVERAGE.at(grid.results_dir).fill(source=source, target=target)
                row.missing.append(f"no coverage file ({path})")
            elif corpus and record.get("corpus_coverage_pct") is None:
                row.missing.append(f"no corpus_coverage_pct in {record['_path']}")
            rows.append(row)
    return Table(6, "vocabulary overlap", prose("tables.description_6"),
                 sort_rows(rows, grid), metrics, reference, format_coverage,
                 [prose("tables.notes_6", match=grid.overlap_match)])
