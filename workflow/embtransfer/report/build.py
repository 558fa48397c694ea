"""Build the whole report: Tables 1-6, 8 (Markdown + CSV), Figure 2 (PNG), the alignment,
probe, zero-shot and calibration tables, the methods figure (PNG), the findings written from
those tables (findings.md) and report.md."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from embtransfer.core import paths
from embtransfer.core.atomic import atomic_path
from embtransfer.core.grid import Grid, evaluated_stages, real_text_run, report_stages
from embtransfer.core.paired import CORRECTION, FAMILY_ALPHA
from embtransfer.report.alignment_table import write_alignment
from embtransfer.report.calibration import write_calibration
from embtransfer.report.fasttext_bli_table import write_fasttext_bli
from embtransfer.report.figures import (
    VS_BEST_MARK,
    VS_RANDOM_MARK,
    Curves,
    missing_curves,
    write_figure2,
    write_methods_figure,
)
from embtransfer.report.findings import write_findings
from embtransfer.report.paper import PaperNames, primary_target
from embtransfer.report.probe_table import measured_probes, write_probes
from embtransfer.report.records import (
    MalformedResultError,
    coverage_identity,
    eval_path_identity,
    lapt_path_identity,
    read_coverage,
    read_eval_records,
    read_lapt_runs,
    read_reference,
    read_zeroshot,
    zeroshot_identity,
)
from embtransfer.report.salt_conditioning import write_salt_conditioning
from embtransfer.report.salt_omp import write_salt_vs_omp
from embtransfer.report.source_floor import write_source_floor
from embtransfer.report.tables import (
    TABLE_SPECS,
    Table,
    eval_table,
    table5,
    table6,
    table8,
)
from embtransfer.report.zeroshot import write_zeroshot_comparison

TABLE_NUMBERS = (1, 2, 3, 4, 5, 6, 8)
#: The report outputs the findings read (embtransfer.report.findings.TABLES), by name.
FINDINGS_TABLES = ("alignment", "zeroshot", "table1", "plm_probes", "salt_vs_omp",
                   "lapt_zeroshot", "source_floor", "fasttext_bli")


def output_names(directory: str = paths.REPORT_DIR) -> dict[str, str]:
    """Every output of the report, by name: table{N}_md, table{N}_csv, alignment_md,
    alignment_csv, plm_probes_md, plm_probes_csv, fasttext_bli_md, fasttext_bli_csv,
    zeroshot_md, zeroshot_csv, calibration_md,
    calibration_csv, lapt_zeroshot_md, lapt_zeroshot_csv, source_floor_md, source_floor_csv,
    salt_vs_omp_md, salt_vs_omp_csv, salt_conditioning_md, salt_conditioning_csv, figure2,
    methods (the methods figure), findings, report_md."""
    names = {}
    for n in TABLE_NUMBERS:
        names[f"table{n}_md"] = f"{directory}/table{n}.md"
        names[f"table{n}_csv"] = f"{directory}/table{n}.csv"
    names["alignment_md"] = f"{directory}/alignment.md"
    names["alignment_csv"] = f"{directory}/alignment.csv"
    names["plm_probes_md"] = f"{directory}/plm_probes.md"
    names["plm_probes_csv"] = f"{directory}/plm_probes.csv"
    names["fasttext_bli_md"] = f"{directory}/fasttext_bli.md"
    names["fasttext_bli_csv"] = f"{directory}/fasttext_bli.csv"
    for table in ("zeroshot", "calibration", "lapt_zeroshot", "source_floor"):
        names[f"{table}_md"] = f"{directory}/{table}.md"
        names[f"{table}_csv"] = f"{directory}/{table}.csv"
    names["salt_vs_omp_md"] = f"{directory}/salt_vs_omp.md"
    names["salt_vs_omp_csv"] = f"{directory}/salt_vs_omp.csv"
    names["salt_conditioning_md"] = f"{directory}/salt_conditioning.md"
    names["salt_conditioning_csv"] = f"{directory}/salt_conditioning.csv"
    names["figure2"] = f"{directory}/figure2.png"
    names["methods"] = f"{directory}/methods.png"
    names["findings"] = f"{directory}/findings.md"
    names["report_md"] = f"{directory}/report.md"
    return names


@dataclass
class Inputs:
    evaluation: list[str]
    lapt: list[str]
    coverage: list[str]
    reference: str
    #: Zero-shot records of the LAPT runs' checkpoints (:func:`zeroshot_paths`): Table 5's
    #: bits per byte.
    zeroshot: list[str] = field(default_factory=list)
    #: Per-token alignment scores (:data:`paths.ALIGNMENT`), the miniature world only.
    alignment: list[str] = field(default_factory=list)
    #: The target PLMs' probe records (:data:`paths.PLM_PROBE`), the miniature world only.
    plm_probes: list[str] = field(default_factory=list)
    #: Per language, BLI in the aligned fastText spaces WECHSEL and OFA search
    #: (:data:`paths.FASTTEXT_BLI`).
    fasttext_bli: list[str] = field(default_factory=list)
    #: Every transferred checkpoint's and source model's zero-shot record
    #: (:data:`paths.ZEROSHOT`, :data:`paths.ZEROSHOT_SOURCE`), with per-document losses.
    transfer_zeroshot: list[str] = field(default_factory=list)
    #: The committed real shared-token table (one path, none without world pairs) and the
    #: world's (:data:`paths.SHARED_KINDS`, the miniature world only).
    real_shared_tokens: list[str] = field(default_factory=list)
    shared_kinds: list[str] = field(default_factory=list)
    #: The source's quality floor records (:data:`paths.SOURCE_FLOOR`), real text only.
    source_floor: list[str] = field(default_factory=list)
    #: The final LAPT checkpoints' zero-shot records (:data:`paths.INTRINSIC_LAPT`).
    lapt_zeroshot: list[str] = field(default_factory=list)
    #: SALT's regression records (:data:`paths.REGRESSION_META`): its conditioning.
    salt_regression: list[str] = field(default_factory=list)


def zeroshot_paths(lapt_metrics: list[str]) -> list[str]:
    """The zero-shot record (:data:`paths.ZEROSHOT`) of every LAPT metrics file
    (:data:`paths.LAPT_METRICS`), in the same results folder."""
    records = []
    for path in lapt_metrics:
        ident = lapt_path_identity(path)
        root = paths.LAPT_METRICS.root_of(path)
        records.append(paths.ZEROSHOT.at(root).fill(**ident))
    return records


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
        ident = eval_path_identity(path)
        if not ident:
            raise MalformedResultError(
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
        planned_lapt=frozenset(
            tuple(lapt_path_identity(p)[k] for k in ("lang", "source", "target", "method"))
            for p in inputs.lapt
        ),
    )
    names = PaperNames.from_config(config)
    reference = read_reference(inputs.reference)
    records, _ = read_eval_records(inputs.evaluation)
    runs, _ = read_lapt_runs(inputs.lapt)
    coverage: dict[tuple[str, str], dict[str, Any] | None] = {}
    for path in inputs.coverage:
        coverage[coverage_identity(path)] = read_coverage(path) if Path(path).is_file() else None
    tables = {n: eval_table(TABLE_SPECS[n], records, grid, names, reference, config)
              for n in (1, 2, 3, 4)}
    zeroshot = {zeroshot_identity(p): read_zeroshot(p)
                for p in inputs.zeroshot if Path(p).is_file()}
    tables[5] = table5(runs, grid, names, reference, zeroshot,
                       every_method=bool(config.get("real_text")))
    tables[6] = table6(coverage, grid, names, reference)
    tables[8] = table8(runs, grid, names, reference, config)
    return tables, grid, names, runs


def _write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


INTRO = (
    "The SALT paper's tables and Figure 2, regenerated from this workflow's result files. "
    "`missing`: the configuration asks for the cell but no result gives it (each table's note "
    "lists the files); `—`: no result of that language has the metric. `±`: lm-eval's standard "
    "error of a score. `(paper)` columns carry the paper's published number where our setting "
    "(source model, language, target-PLM architecture, method, metric) is the paper's, "
    "`not comparable` elsewhere."
)


def _write_comparisons(config: dict[str, Any], inputs: Inputs, outputs: dict[str, str],
                       dpi: int) -> dict[str, pd.DataFrame]:
    """The tables that compare the methods and the world (alignment, probes, zero-shot,
    calibration) and the methods figure; returns each table by name."""
    written = {
        "alignment": write_alignment(inputs.alignment, outputs["alignment_csv"],
                                     outputs["alignment_md"], config.get("seed", 0)),
        "probes": write_probes(inputs.plm_probes, outputs["plm_probes_csv"],
                               outputs["plm_probes_md"]),
        "fasttext_bli": write_fasttext_bli(inputs.fasttext_bli, outputs["fasttext_bli_csv"],
                                           outputs["fasttext_bli_md"]),
        "zeroshot": write_zeroshot_comparison(inputs.transfer_zeroshot, outputs["zeroshot_csv"],
                                              outputs["zeroshot_md"], config.get("seed", 0)),
        "calibration": write_calibration(inputs.real_shared_tokens, inputs.shared_kinds,
                                         outputs["calibration_csv"], outputs["calibration_md"]),
    }
    seed = config.get("seed", 0)
    written["lapt_zeroshot"] = write_zeroshot_comparison(
        inputs.lapt_zeroshot, outputs["lapt_zeroshot_csv"], outputs["lapt_zeroshot_md"], seed,
        lapt=True)
    languages = {key: spec.get("language", "") for key, spec in config["models"].items()}
    written["source_floor"] = write_source_floor(
        inputs.source_floor, languages, inputs.transfer_zeroshot, outputs["source_floor_csv"],
        outputs["source_floor_md"])
    written["salt_vs_omp"] = write_salt_vs_omp(
        inputs.transfer_zeroshot, inputs.alignment, outputs["salt_vs_omp_csv"],
        outputs["salt_vs_omp_md"], config.get("seed", 0))
    written["salt_conditioning"] = write_salt_conditioning(
        inputs.salt_regression, outputs["salt_conditioning_csv"],
        outputs["salt_conditioning_md"])
    write_methods_figure(outputs["methods"], written["alignment"], written["zeroshot"], dpi=dpi)
    return written


def _comparison_sections(written: dict[str, pd.DataFrame], outputs: dict[str, str]
                         ) -> list[str]:
    """report.md's sections pointing at the comparison tables and the methods figure."""
    alignment, probes = written["alignment"], written["probes"]
    zeroshot, calibration = written["zeroshot"], written["calibration"]
    name = {key: Path(path).name for key, path in outputs.items()}
    parts = ["", "## Methods per setting: held-out alignment and zero-shot bits per byte", "",
             "Each method ± one standard error; "
             f"`{VS_BEST_MARK}`: differs from the setting's best method, `{VS_RANDOM_MARK}`: "
             f"from Random (paired tests, {CORRECTION} at family-wise α = {FAMILY_ALPHA} over "
             "each table's tests).", "",
             f"![Methods]({name['methods']})",
             "", f"What the tables show, in words: [findings.md]({name['findings']})."]
    if len(alignment):
        parts += _section("Alignment of the new rows (the miniature world's truth)",
                          f"Per method and setting in [alignment.md]({name['alignment_md']})"
                          f" ({len(alignment)} lines), the held-out concepts (no method was "
                          "aligned on them) first.")
    if len(zeroshot):
        parts += _section("Zero-shot bits per byte with standard errors",
                          f"Per method and setting in [zeroshot.md]({name['zeroshot_md']}) "
                          f"({len(zeroshot)} lines): standard errors over the documents, "
                          "paired tests against the best method and Random.")
    if len(written["salt_vs_omp"]):
        parts += _section("SALT against OMP",
                          f"Paired, per setting, in [salt_vs_omp.md]({name['salt_vs_omp_md']}) "
                          f"({len(written['salt_vs_omp'])} lines): zero-shot, LAPT and alignment.")
    if len(written["salt_conditioning"]):
        conditioning = written["salt_conditioning"]
        parts += _section("SALT's conditioning",
                          f"In [salt_conditioning.md]({name['salt_conditioning_md']}): k/h, "
                          "rank-deficient neighbour sets and the least squares' amplification "
                          f"per setting; largest k/h {conditioning['k_over_h_max'].max():.2f}, "
                          "largest amplification "
                          f"{conditioning['amplification_max'].max():.3g}.")
    if len(written["lapt_zeroshot"]):
        parts += _section("After LAPT: the final checkpoints' bits per byte",
                          f"In [lapt_zeroshot.md]({name['lapt_zeroshot_md']}) "
                          f"({len(written['lapt_zeroshot'])} lines): the zero-shot table's "
                          "standard errors and paired tests for the final LAPT checkpoints.")
    if len(written["source_floor"]):
        floor = written["source_floor"]
        held = floor[floor["text"] == "held-out"]
        parts += _section("The source's quality floor",
                          f"In [source_floor.md]({name['source_floor_md']}): "
                          f"{int(held['clears_floor'].astype(bool).sum())} of {len(held)} "
                          "sources clear the add-one unigram by 25 % and the Kneser–Ney "
                          "bigram on their held-out text.")
    if len(probes):
        every = "both probes" if len(measured_probes(probes)) > 1 else "the span probe"
        parts += _section("Do the target PLMs carry meaning?",
                          f"Per target PLM in [plm_probes.md]({name['plm_probes_md']}): "
                          f"{int(probes['carries'].sum())} of {len(probes)} carry meaning by "
                          f"{every} ({CORRECTION} at family-wise α = {FAMILY_ALPHA} over the "
                          "table's probes, as in the findings).")
    if len(written["fasttext_bli"]):
        bli = written["fasttext_bli"]
        parts += _section("Do the aligned fastText spaces carry translations?",
                          f"In [fasttext_bli.md]({name['fasttext_bli_md']}): "
                          f"{int(bli['above_chance'].sum())} of {len(bli)} languages' spaces "
                          "retrieve held-out translations above chance (WECHSEL's and OFA's "
                          "neighbours).")
    if len(calibration):
        parts += _section("The world's shared tokens beside real ones",
                          f"In [calibration.md]({name['calibration_md']}): "
                          f"{int((~calibration['in_range']).sum())} of {len(calibration)} "
                          "world figures lie outside the real range of their script family (†).")
    return parts


def _section(heading: str, text: str) -> list[str]:
    """A report.md section: a blank line, the heading, a blank line, one paragraph."""
    return ["", f"## {heading}", "", text]


def write_report(config: dict[str, Any], inputs: Inputs, outputs: dict[str, str],
                 results_dir: str = "results", dpi: int = 120
                 ) -> tuple[dict[int, Table], Curves]:
    """Write every output named in ``outputs`` (see :func:`output_names`), atomically."""
    tables, grid, names, runs = build_tables(config, inputs, results_dir)
    for n, table in tables.items():
        _write_text(outputs[f"table{n}_md"], table.markdown())
        with atomic_path(outputs[f"table{n}_csv"]) as tmp:
            table.long().to_csv(tmp, index=False)
    written = _write_comparisons(config, inputs, outputs, dpi)
    write_findings({name: outputs[f"{name}_csv"] for name in FINDINGS_TABLES},
                   outputs["findings"], real=bool(config.get("real_text")))
    curves = write_figure2(outputs["figure2"], runs, grid, names, config, dpi=dpi)
    figure_dir = Path(outputs["report_md"]).parent
    figure_link = os.path.relpath(outputs["figure2"], figure_dir)
    parts = ["# SALT paper tables, regenerated", "", INTRO]
    for table in tables.values():
        parts += ["", table.markdown(level=2).rstrip("\n")]
    parts += ["", "## Figure 2: LAPT training loss", "",
              "Training loss per optimizer step of every method, one panel per (language, "
              "source model), with the language's GPT target PLM.", "",
              f"![Figure 2]({figure_link})"]
    parts += _comparison_sections(written, outputs)
    targets = {lang: primary_target(config, names, lang) for lang in grid.langs}
    lacking = missing_curves(curves, grid, targets)
    if lacking:
        parts += ["", f"`missing` curves ({len(lacking)}):",
                  *(f"- {item}" for item in lacking)]
    _write_text(outputs["report_md"], "\n".join(parts) + "\n")
    return tables, curves
