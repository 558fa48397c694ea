"""What the report rule (workflow/rules/report.smk) reads, and how each of its outputs is
shown by `snakemake --report`: functions of the validated config, importable and tested
without Snakemake (tests/test_rule_inputs.py)."""

from __future__ import annotations

from typing import Any

from embtransfer.core import paths
from embtransfer.evaluation.inputs import (
    all_alignment,
    all_evaluation,
    all_lapt_zeroshot,
    all_plm_probes,
    all_source_floors,
)
from embtransfer.lapt.inputs import all_lapt_metrics
from embtransfer.report.build import output_names, zeroshot_paths
from embtransfer.transfer.inputs import (
    all_fasttext_bli,
    all_holdout_scores,
    all_salt_regression,
    all_zeroshot,
)
from embtransfer.vocab.inputs import all_coverage

# The subcategory of each paper table in `snakemake --report`'s "Paper tables".
TABLE_SUBCATEGORIES = {
    1: "Table 1: knowledge",
    2: "Table 2: reading comprehension",
    3: "Table 3: cross-lingual",
    4: "Table 4: target-PLM architectures",
    5: "Table 5: eval loss during LAPT",
    6: "Table 6: vocabulary overlap",
    8: "Table 8: final training loss",
}


def report_inputs(config: dict[str, Any]) -> dict[str, Any]:
    """The report rule's inputs: the result files its tables read, and the paper's numbers."""
    lapt_metrics = all_lapt_metrics(config)
    return {
        "evaluation": all_evaluation(config),
        "lapt": lapt_metrics,
        "coverage": all_coverage(config),
        # the LAPT checkpoints' zero-shot records, for Table 5's bits per byte
        "zeroshot": zeroshot_paths(lapt_metrics),
        "alignment": all_alignment(config),
        "plm_probes": all_plm_probes(config),
        "reference": config["report"]["reference"],
        # every checkpoint's zero-shot record: the zero-shot comparison and the methods figure
        "transfer_zeroshot": all_zeroshot(config),
        # the source's quality floor (rule source_floor) and the final LAPT checkpoints'
        # zero-shot records (rule lapt_zeroshot)
        "source_floor": all_source_floors(config),
        "lapt_zeroshot": all_lapt_zeroshot(config),
        # SALT's regression records: its conditioning per setting
        "salt_regression": all_salt_regression(config),
        # the aligned fastText spaces WECHSEL and OFA search, scored per language (BLI)
        "fasttext_bli": all_fasttext_bli(config),
        # every method's rows for the held-out shared tokens, scored (transfer.holdout)
        "holdout": all_holdout_scores(config),
    }


def all_report() -> list[str]:
    return list(output_names(paths.REPORT_DIR).values())


_COMPARED = "Methods compared"
_TRUTH = "Alignment with the world's truth"
#: Report outputs by name prefix: caption file, category and labels (tables get a format).
_ENTRIES: tuple[tuple[str, str, str, dict[str, str]], ...] = (
    ("alignment", "alignment", _TRUTH, {"table": "alignment"}),
    ("plm_probes", "plm_probes", _TRUTH, {"table": "target-PLM probes"}),
    ("fasttext_bli", "fasttext_bli", _TRUTH, {"table": "aligned fastText spaces (BLI)"}),
    ("zeroshot", "zeroshot", _COMPARED, {"table": "zero-shot bits per byte"}),
    ("heldout_kinds", "heldout_kinds", _COMPARED, {"table": "held-out shared tokens by kind"}),
    ("heldout_tracking", "heldout_tracking", _COMPARED,
     {"table": "held-out scores against bits per byte"}),
    ("heldout", "heldout", _COMPARED, {"table": "held-out shared tokens"}),
    ("comparisons", "comparisons", _COMPARED, {"table": "every paired comparison"}),
    ("summaries", "comparisons", _COMPARED, {"table": "every method's summary"}),
    ("seeds", "comparisons", _COMPARED, {"table": "every test in every seed"}),
    ("salt_conditioning", "salt_conditioning", _COMPARED, {"table": "SALT's conditioning"}),
    ("lapt_movement", "lapt_movement", _COMPARED, {"table": "how far LAPT moved the new rows"}),
    ("new_rows", "new_rows", _COMPARED, {"table": "how each method made its new rows"}),
    ("lapt_zeroshot", "lapt_zeroshot", _COMPARED, {"table": "after LAPT: bits per byte"}),
    ("source_floor", "source_floor", _COMPARED, {"table": "the source's quality floor"}),
    ("findings", "findings", _COMPARED, {"table": "findings, in words", "format": "Markdown"}),
    ("methods", "methods", _COMPARED, {"figure": "held-out P@10 and zero-shot bits per byte"}),
    ("calibration", "calibration", "Calibration of the world",
     {"table": "shared tokens, the run's and real"}),
    ("figure2", "figure2", "Paper figures", {"figure": "2"}),
)


#: The category of every report output of a real-text run
#: (:func:`embtransfer.core.grid.real_text_run`): each keeps its own as subcategory.
REAL_TEXT = "Real text"


def report_entry(name: str, real_text: bool = False) -> dict[str, Any]:
    """How the report output ``name`` shows in `snakemake --report`: the keyword arguments
    of Snakemake's report() (captions relative to workflow/rules/). ``real_text``: the run
    compares the methods on real text (``real_text_run``); every output then shows under
    :data:`REAL_TEXT`, its usual category (and subcategory) as its subcategory."""
    kind = "Markdown" if name.endswith("_md") else "CSV"
    listed = next((item for item in _ENTRIES if name.startswith(item[0])), None)
    if name.startswith("table"):
        number = int(name[len("table") : name.index("_")])
        entry = {"caption": f"../report/table{number}.rst", "category": "Paper tables",
                 "subcategory": TABLE_SUBCATEGORIES[number],
                 "labels": {"table": str(number), "format": kind}}
    elif listed:
        _, caption, category, labels = listed
        entry = {"caption": f"../report/{caption}.rst", "category": category,
                 "labels": {"format": kind, **labels} if "table" in labels else labels}
    else:
        entry = {"caption": "../report/report_md.rst", "category": "Paper tables",
                 "subcategory": "All tables (report.md)",
                 "labels": {"table": "all", "format": "Markdown"}}
    if real_text:
        within = ": ".join(v for v in (entry["category"], entry.get("subcategory")) if v)
        entry = {**entry, "category": REAL_TEXT, "subcategory": within}
    return entry
