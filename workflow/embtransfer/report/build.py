"""Build the whole report, every output of :func:`output_names`, as the report rule writes
it: the paper's tables and figures, the comparisons with the tables and figure drawn from
them, the diagnostic tables, findings.md and report.md."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from embtransfer.core import paths
from embtransfer.core.atomic import atomic_path, write_table
from embtransfer.core.grid import Grid, evaluated_stages, real_text_run, report_stages
from embtransfer.core.paired import CORRECTION, FAMILY_ALPHA
from embtransfer.report import diagnostics, records, setting_tables
from embtransfer.report.comparisons import SUMMARY_COLUMNS, TEST_COLUMNS, decide, frame_of, lookup
from embtransfer.report.figures import Curves, missing_curves, write_figure2, write_methods_figure
from embtransfer.report.findings import findings_markdown, headline_of
from embtransfer.report.paper import PaperNames, primary_target
from embtransfer.report.tables import (
    TABLE_SPECS,
    Table,
    apply_marks,
    eval_table,
    markdown,
    table5,
    table6,
    table8,
    table_tests,
)
from embtransfer.report.texts import prose

TABLE_NUMBERS = (1, 2, 3, 4, 5, 6, 8)


def output_names(directory: str = paths.REPORT_DIR) -> dict[str, str]:
    """Every output of the report by name (:data:`embtransfer.core.paths.REPORT_FILES`)."""
    return {name: f"{directory}/{file}" for name, file in paths.REPORT_FILES.items()}


@dataclass
class Inputs:
    """The report's input files by kind, as :func:`embtransfer.report.inputs.report_inputs`
    lists them (what each kind is, and which rule writes it, is said there)."""

    evaluation: list[str]
    lapt: list[str]
    coverage: list[str]
    reference: str
    zeroshot: list[str] = field(default_factory=list)
    alignment: list[str] = field(default_factory=list)
    plm_probes: list[str] = field(default_factory=list)
    fasttext_bli: list[str] = field(default_factory=list)
    transfer_zeroshot: list[str] = field(default_factory=list)
    source_floor: list[str] = field(default_factory=list)
    lapt_zeroshot: list[str] = field(default_factory=list)
    salt_regression: list[str] = field(default_factory=list)


def zeroshot_paths(lapt_metrics: list[str]) -> list[str]:
    """The zero-shot record (:data:`paths.ZEROSHOT`) of every LAPT metrics file
    (:data:`paths.LAPT_METRICS`), in the same results folder."""
    return [paths.ZEROSHOT.at(paths.LAPT_METRICS.root_of(p)).fill(**records.lapt_path_identity(p))
            for p in lapt_metrics]


def config_subset(config: dict[str, Any]) -> dict[str, Any]:
    """The part of the config the report reads (the rule's params: other edits do not rerun it)."""
    used = set(config["sources"]) | {t for plms in config["targets"].values() for t in plms}
    return {
        "sources": list(config["sources"]),
        "targets": {lang: list(plms) for lang, plms in config["targets"].items()},
        "models": {
            key: {k: v for k, v in config["models"][key].items()
                  if k in ("type", "family", "repo_id", "language")}
            for key in sorted(used) if key in config["models"]
        },
        "transfer": {"methods": list(config.get("transfer", {}).get("methods", []))},
        "overlap": {"match": config.get("overlap", {}).get("match", "fuzzy")},
        "report": {**(config.get("report") or {}), "stages": report_stages(config)},
        # the paired bootstrap of the zero-shot comparison
        "seed": config.get("seed", 0),
        "evaluation": {"stages": evaluated_stages(config)},
        # a real-text run: its own report category, Table 5 for every LAPT run, the
        # findings' real-text variant
        # (a config without languages, as a part of one the tests pass, has no real text)
        "real_text": "languages" in config and real_text_run(config),
    }


def planned_eval_runs(paths: list[str]) -> set[tuple]:
    """(stage, lang, source, target, method) of every evaluation path the rule lists."""
    runs = set()
    for path in paths:
        ident = records.eval_path_identity(path)
        if not ident:
            raise records.MalformedResultError(
                f"evaluation input {path} is not .../eval/{{stage}}/{{lang}}/{{source}}/"
                "{target}/{method}/{task}.json or .../eval/source/{lang}/{source}/{task}.json"
            )
        runs.add(tuple(ident[k] for k in ("stage", "lang", "source", "target", "method")))
    return runs


def build_tables(config: dict[str, Any], inputs: Inputs, results_dir: str = "results"
                 ) -> tuple[dict[int, Table], Grid, PaperNames, list]:
    """Read the inputs and build every table; returns (tables, grid, names, LAPT runs)."""
    grid = replace(
        Grid.from_config(config, results_dir),
        planned_eval=frozenset(planned_eval_runs(inputs.evaluation)),
        # (lang, source, target, method) of every LAPT run the rule lists
        planned_lapt=frozenset(tuple(records.lapt_path_identity(p).values()) for p in inputs.lapt),
    )
    names = PaperNames.from_config(config)
    reference = records.read_reference(inputs.reference)
    evals, _ = records.read_eval_records(inputs.evaluation)
    runs, _ = records.read_lapt_runs(inputs.lapt)
    coverage = {records.coverage_identity(p): records.read_coverage(p) if Path(p).is_file()
                else None for p in inputs.coverage}
    tables = {n: eval_table(TABLE_SPECS[n], evals, grid, names, reference, config)
              for n in (1, 2, 3, 4)}
    zeroshot = {records.zeroshot_identity(p): records.read_zeroshot(p)
                for p in inputs.zeroshot if Path(p).is_file()}
    tables[5] = table5(runs, grid, names, reference, zeroshot,
                       every_method=bool(config.get("real_text")))
    tables[6] = table6(coverage, grid, names, reference)
    tables[8] = table8(runs, grid, names, reference, config)
    return tables, grid, names, runs


def _write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


#: The per-setting tables drawn from the comparisons table: file, family, title.
SETTING_FILES = (
    ("zeroshot_md", "zeroshot", "Zero-shot bits per byte (before any training)"),
    ("lapt_zeroshot_md", "lapt_zeroshot", "After LAPT: the final checkpoints' bits per byte"),
    ("alignment_md", "alignment", "Alignment of the new rows with the truth"),
)


def compare(config: dict[str, Any], inputs: Inputs, tables: dict[int, Table]
            ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(comparisons, summaries, probes, BLI): every paired test of the run, decided at the
    config's family-wise level (``report.family_alpha``), and the paper tables marked."""
    seed = config.get("seed", 0)
    parts = [setting_tables.zeroshot_lines(inputs.transfer_zeroshot, seed),
             setting_tables.zeroshot_lines(inputs.lapt_zeroshot, seed, "lapt"),
             setting_tables.alignment_lines(inputs.alignment, seed),
             *(table_tests(n, tables[n].rows, tables[n].metrics, seed) for n in (1, 2, 3, 4))]
    probes = diagnostics.probe_frame(inputs.plm_probes)
    bli = diagnostics.bli_frame(inputs.fasttext_bli)
    tests = [t for _, made in parts for t in made]
    tests += diagnostics.probe_tests(probes) + diagnostics.bli_tests(bli)
    alpha = (config.get("report") or {}).get("family_alpha", FAMILY_ALPHA)
    decided = decide(frame_of(tests, TEST_COLUMNS), alpha)
    decided.attrs["alpha"] = alpha
    summaries = frame_of((s for made, _ in parts for s in made), SUMMARY_COLUMNS)
    for n in (1, 2, 3, 4):
        apply_marks(tables[n], decided)
    return decided, summaries, probes, bli


def _write_comparisons(decided: pd.DataFrame, summaries: pd.DataFrame,
                       outputs: dict[str, str]) -> None:
    """comparisons.{csv,md}, summaries.csv and the per-setting tables drawn from them."""
    counts = decided.groupby("family").agg(tests=("p", "count"), clear=("clears", "sum"))
    lines = ["# Every paired comparison of the run", "",
             prose("comparisons_intro", correction=CORRECTION, alpha=decided.attrs.get("alpha")),
             "", markdown(counts.reset_index()), "", markdown(decided)]
    write_table(decided, "\n".join(lines) + "\n", outputs["comparisons_csv"],
                outputs["comparisons_md"])
    with atomic_path(outputs["summaries_csv"]) as tmp:
        summaries.to_csv(tmp, index=False)
    tests = lookup(decided)
    for name, family, title in SETTING_FILES:
        part = summaries[summaries["family"] == family]
        body = setting_tables.setting_sections(part, tests, details=True) if len(part) else [
            "", "(no such results in this run)"]
        text = [f"# {title}", "", setting_tables.LEGEND, *body]
        _write_text(outputs[name], "\n".join(text) + "\n")


def write_report(config: dict[str, Any], inputs: Inputs, outputs: dict[str, str],
                 results_dir: str = "results", dpi: int = 120
                 ) -> tuple[dict[int, Table], Curves]:
    """Write every output named in ``outputs`` (see :func:`output_names`), atomically."""
    tables, grid, names, runs = build_tables(config, inputs, results_dir)
    decided, summaries, probes, bli = compare(config, inputs, tables)
    for n, table in tables.items():
        write_table(table.long(), table.markdown(), outputs[f"table{n}_csv"],
                    outputs[f"table{n}_md"])
    _write_comparisons(decided, summaries, outputs)
    diagnostics.write_probes(probes, decided, outputs["plm_probes_csv"], outputs["plm_probes_md"])
    diagnostics.write_fasttext_bli(bli, decided, outputs["fasttext_bli_csv"],
                                   outputs["fasttext_bli_md"])
    languages = {key: spec.get("language", "") for key, spec in config["models"].items()}
    diagnostics.write_source_floor(inputs.source_floor, languages, inputs.transfer_zeroshot,
                                   outputs["source_floor_csv"], outputs["source_floor_md"])
    diagnostics.write_salt_conditioning(inputs.salt_regression, outputs["salt_conditioning_csv"],
                                        outputs["salt_conditioning_md"])
    write_methods_figure(outputs["methods"], summaries, decided, dpi=dpi)
    findings = findings_markdown(decided, summaries, real=bool(config.get("real_text")))
    _write_text(outputs["findings"], findings)
    curves = write_figure2(outputs["figure2"], runs, grid, names, config, dpi=dpi)
    here = Path(outputs["report_md"]).parent
    link = {key: os.path.relpath(path, here) for key, path in outputs.items()}
    parts = ["# SALT paper tables, regenerated", "", prose("report_intro")]
    for table in tables.values():
        parts += ["", table.markdown(level=2).rstrip("\n")]
    parts += ["", prose("report_shows", headline=headline_of(findings), **link)]
    targets = {lang: primary_target(config, names, lang) for lang in grid.langs}
    lacking = missing_curves(curves, grid, targets)
    if lacking:
        parts += ["", f"`missing` curves ({len(lacking)}):",
                  *(f"- {item}" for item in lacking)]
    _write_text(outputs["report_md"], "\n".join(parts) + "\n")
    return tables, curves
