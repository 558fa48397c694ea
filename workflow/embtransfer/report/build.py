"""Build the whole report, every output of :func:`output_names`, as the report rule writes
it: the paper's tables and figures, the comparisons with the tables and figure drawn from
them, the diagnostic tables, findings.md and report.md."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import pandas as pd

from embtransfer.core import paths
from embtransfer.core.atomic import atomic_path, write_table, write_text_lines
from embtransfer.core.grid import (
    Grid,
    evaluated_stages,
    real_text_run,
    report_stages,
    seeds,
    target_models,
)
from embtransfer.core.paired import CORRECTION, FAMILY_ALPHA
from embtransfer.report import diagnostics, records, setting_tables
from embtransfer.report import tables as paper_tables
from embtransfer.report.comparisons import (
    SUMMARY_COLUMNS,
    TEST_COLUMNS,
    decide,
    flagged_checkpoints,
    frame_of,
    lookup,
)
from embtransfer.report.figures import Curves, write_figure2, write_methods_figure
from embtransfer.report.findings import findings_markdown, headline_of
from embtransfer.report.paper import PaperNames
from embtransfer.report.seeds import combine, several
from embtransfer.report.texts import prose
from embtransfer.transfer.method_catalog import resolve_options


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
    holdout: list[str] = field(default_factory=list)

    @classmethod
    def of_rule(cls, named: Any) -> Inputs:
        """The report rule's named inputs (:func:`embtransfer.report.inputs.report_inputs`),
        each kind by its name: an input the rule lacks, or one this class does not know,
        is refused, so a kind added to one is not silently left out of the other."""
        given, known = dict(named.items()), {f.name for f in fields(cls)}
        if set(given) != known:
            raise ValueError(f"the report rule's inputs {sorted(set(given) ^ known)} are not "
                             "both the rule's and the report's: add each to both")
        return cls(**{k: v if k == "reference" else list(v) for k, v in given.items()})


def zeroshot_paths(lapt_metrics: list[str]) -> list[str]:
    """The zero-shot record (:data:`paths.ZEROSHOT`) of every LAPT metrics file
    (:data:`paths.LAPT_METRICS`), in the same results folder."""
    return [paths.ZEROSHOT.at(paths.LAPT_METRICS.root_of(p)).fill(**records.lapt_path_identity(p))
            for p in lapt_metrics]


def config_subset(config: dict[str, Any]) -> dict[str, Any]:
    """The part of the config the report reads (the rule's params: other edits do not rerun it)."""
    used = set(config["sources"]) | set(target_models(config))
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
        # the paired bootstraps of the comparisons, and the replicate seeds
        "seed": config.get("seed", 0),
        "seeds": seeds(config),
        "evaluation": {"stages": evaluated_stages(config)},
        # a real-text run: its own report category, Table 5 for every LAPT run, the findings'
        # real-text variant (a config without languages, as tests pass, has no real text)
        "real_text": "languages" in config and real_text_run(config),
    }


def findings_run(config: dict[str, Any]) -> dict[str, Any]:
    """What the findings' headline says of the run beyond its tables: its seeds and OMP's
    configured k (the SALT-against-OMP line at the tool's default k names it)."""
    omp = resolve_options("omp", config["transfer"].get("options", {}).get("omp", {}))
    return {"seed": config.get("seed", 0), "seeds": seeds(config), "omp_k": omp["k"]}


def build_tables(config: dict[str, Any], inputs: Inputs, results_dir: str = "results"
                 ) -> tuple[dict[int, paper_tables.Table], Grid, PaperNames, list]:
    """Read the inputs and build every table; returns (tables, grid, names, LAPT runs)."""
    run = ("stage", "lang", "source", "target", "method")  # of each run the rule lists
    grid = replace(
        Grid.from_config(config, results_dir),
        planned_eval=frozenset(tuple(records.eval_path_identity(p)[k] for k in run)
                               for p in inputs.evaluation),
        planned_lapt=frozenset(tuple(records.lapt_path_identity(p)[k] for k in run[1:])
                               for p in inputs.lapt),
    )
    names = PaperNames.from_config(config)
    reference = records.read_reference(inputs.reference)
    evals, _ = records.read_eval_records(inputs.evaluation)
    runs = [records.read_lapt_metrics(p) for p in inputs.lapt if Path(p).is_file()]
    coverage = {records.coverage_identity(p): records.read_coverage(p) if Path(p).is_file()
                else None for p in inputs.coverage}
    tables = {n: paper_tables.eval_table(paper_tables.TABLE_SPECS[n], evals, grid, names,
                                         reference, config) for n in (1, 2, 3, 4)}
    zeroshot = {records.zeroshot_identity(p): records.read_zeroshot(p)
                for p in inputs.zeroshot if Path(p).is_file()}
    tables[5] = paper_tables.table5(runs, grid, names, reference, zeroshot,
                                    every_method=bool(config.get("real_text")))
    tables[6] = paper_tables.table6(coverage, grid, names, reference)
    tables[8] = paper_tables.table8(runs, grid, names, reference, config)
    return tables, grid, names, runs


#: The per-setting tables drawn from the comparisons table: file, family, title.
SETTING_FILES = (
    ("zeroshot_md", "zeroshot", "Zero-shot bits per byte (before any training)"),
    ("lapt_zeroshot_md", "lapt_zeroshot", "After LAPT: the final checkpoints' bits per byte"),
    ("alignment_md", "alignment", "Alignment of the new rows with the truth"),
    ("heldout_md", "heldout", "Held-out shared tokens: each method's rows against their true "
     "source rows"),
)


def of_seed(files: list[str], seed: int) -> list[str]:
    """The files of replicate ``seed`` (:data:`paths.SEEDED`), and those drawn once (the
    source model's records), which every seed's comparison reads."""
    return [f for f in files if paths.seed_of(f) in (seed, None)]


@dataclass
class Compared:
    """Every paired test of the run: ``decided`` and ``summaries`` state a verdict only
    where it holds in every seed (:func:`embtransfer.report.seeds.combine`), ``per_seed``
    holds each seed's own tests; ``probes`` and ``bli`` are the primary seed's."""

    decided: pd.DataFrame
    summaries: pd.DataFrame
    probes: pd.DataFrame
    bli: pd.DataFrame
    per_seed: pd.DataFrame


def _compare_seed(config: dict[str, Any], inputs: Inputs, tables: dict[int, paper_tables.Table],
                  seed: int, primary: bool
                  ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(decided, summaries, probes, BLI) of one replicate seed, decided at the config's
    family-wise level (``report.family_alpha``); the paired bootstraps draw with ``seed``.
    LAPT and the paper tables run for the primary seed only."""
    transfer = setting_tables.zeroshot_lines(of_seed(inputs.transfer_zeroshot, seed), seed)
    # the transferred checkpoints' records carry the row check: its flag marks every table of
    # such a checkpoint and of the LAPT checkpoint trained from it
    flagged = flagged_checkpoints(transfer[0])
    parts = [transfer, setting_tables.alignment_lines(of_seed(inputs.alignment, seed), seed,
                                                      flagged),
             setting_tables.holdout_lines(of_seed(inputs.holdout, seed), seed, flagged)]
    if primary:
        parts += [
            setting_tables.zeroshot_lines(of_seed(inputs.lapt_zeroshot, seed), seed, "lapt",
                                          flagged),
            *(paper_tables.table_tests(n, tables[n].rows, tables[n].metrics, seed, flagged)
              for n in (1, 2, 3, 4))]
    probes = diagnostics.probe_frame(of_seed(inputs.plm_probes, seed))
    bli = diagnostics.bli_frame(of_seed(inputs.fasttext_bli, seed))
    tests = [t for _, made in parts for t in made]
    tests += diagnostics.probe_tests(probes) + diagnostics.bli_tests(bli)
    alpha = (config.get("report") or {}).get("family_alpha", FAMILY_ALPHA)
    decided = decide(frame_of(tests, TEST_COLUMNS), alpha)
    decided.attrs["alpha"] = alpha
    summaries = frame_of((s for made, _ in parts for s in made), SUMMARY_COLUMNS)
    return decided, summaries, probes, bli


def compare(config: dict[str, Any], inputs: Inputs, tables: dict[int, paper_tables.Table]
            ) -> Compared:
    """Every paired test of the run, per replicate seed and across them, and the paper
    tables marked."""
    chosen = seeds(config)
    made = [_compare_seed(config, inputs, tables, seed, seed == chosen[0]) for seed in chosen]
    decided, summaries, per_seed = combine(
        [(seed, d, s) for seed, (d, s, _, _) in zip(chosen, made, strict=True)])
    for n in (1, 2, 3, 4):
        paper_tables.apply_marks(tables[n], decided)
    return Compared(decided, summaries, made[0][2], made[0][3], per_seed)


def _write_comparisons(decided: pd.DataFrame, summaries: pd.DataFrame,
                       outputs: dict[str, str]) -> None:
    """comparisons.{csv,md}, summaries.csv and the per-setting tables drawn from them."""
    counts = decided.groupby("family").agg(tests=("p", "count"), clear=("clears", "sum"))
    lines = ["# Every paired comparison of the run", "",
             prose("comparisons_intro", correction=CORRECTION, alpha=decided.attrs.get("alpha")),
             "", paper_tables.markdown(counts.reset_index()), "", paper_tables.markdown(decided)]
    write_table(decided, "\n".join(lines) + "\n", outputs["comparisons_csv"],
                outputs["comparisons_md"])
    with atomic_path(outputs["summaries_csv"]) as tmp:
        summaries.to_csv(tmp, index=False)
    tests = lookup(decided)
    for name, family, title in SETTING_FILES:
        part = summaries[summaries["family"] == family]
        body = setting_tables.setting_sections(part, tests, details=True) if len(part) else [
            "", "(no such results in this run)"]
        write_text_lines(outputs[name], [f"# {title}", "", setting_tables.legend(several(decided)),
                                          *body])


def write_report(config: dict[str, Any], inputs: Inputs, outputs: dict[str, str],
                 results_dir: str = "results", dpi: int = 120
                 ) -> tuple[dict[int, paper_tables.Table], Curves]:
    """Write every output named in ``outputs`` (see :func:`output_names`), atomically."""
    tables, grid, names, runs = build_tables(config, inputs, results_dir)
    compared = compare(config, inputs, tables)
    decided, summaries, probes, bli = (compared.decided, compared.summaries, compared.probes,
                                       compared.bli)

    def csv_md(name: str) -> tuple[str, str]:  # a table's CSV and Markdown outputs
        return outputs[f"{name}_csv"], outputs[f"{name}_md"]

    for n, table in tables.items():
        write_table(table.long(), table.markdown(), *csv_md(f"table{n}"))
    _write_comparisons(decided, summaries, outputs)
    with atomic_path(outputs["seeds_csv"]) as tmp:
        compared.per_seed.to_csv(tmp, index=False)
    diagnostics.write_probes(probes, decided, *csv_md("plm_probes"))
    diagnostics.write_fasttext_bli(bli, decided, *csv_md("fasttext_bli"))
    languages = {key: spec.get("language", "") for key, spec in config["models"].items()}
    diagnostics.write_source_floor(inputs.source_floor, languages, inputs.transfer_zeroshot,
                                   *csv_md("source_floor"))
    # the primary seed's, as the paper tables and LAPT
    primary = seeds(config)[0]
    conditioning = diagnostics.write_salt_conditioning(of_seed(inputs.salt_regression, primary),
                                                       *csv_md("salt_conditioning"))
    movement = diagnostics.write_lapt_movement(of_seed(inputs.lapt_zeroshot, primary),
                                               *csv_md("lapt_movement"))
    new_rows = diagnostics.write_new_rows(of_seed(inputs.transfer_zeroshot, primary),
                                          *csv_md("new_rows"))
    diagnostics.write_heldout_kinds(of_seed(inputs.holdout, primary), *csv_md("heldout_kinds"))
    diagnostics.write_heldout_tracking(summaries, *csv_md("heldout_tracking"))
    write_methods_figure(outputs["methods"], summaries, decided, dpi=dpi)
    findings = findings_markdown(decided, summaries, findings_run(config),
                                 real=bool(config.get("real_text")), conditioning=conditioning,
                                 movement=movement, new_rows=new_rows)
    write_text_lines(outputs["findings"], [findings])  # it ends in one newline
    curves, lacking = write_figure2(outputs["figure2"], runs, grid, names, config, dpi=dpi)
    here = Path(outputs["report_md"]).parent
    link = {key: os.path.relpath(path, here) for key, path in outputs.items()}
    parts = ["# SALT paper tables, regenerated", "", prose("report_intro")]
    for table in tables.values():
        parts += ["", table.markdown(level=2).rstrip("\n")]
    parts += ["", prose("report_shows", headline=headline_of(findings), **link)]
    if lacking:
        parts += ["", f"`missing` curves ({len(lacking)}):",
                  *(f"- {item}" for item in lacking)]
    write_text_lines(outputs["report_md"], parts)
    return tables, curves
