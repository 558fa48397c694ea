# The report: the SALT paper's Tables 1-6, 8 and Figure 2 regenerated from the result files
# (evaluation JSONs, LAPT metrics, overlap coverage), the paper's numbers beside ours where
# the setting matches. Every output is registered for `snakemake --report report.html`.
from embtransfer.report.build import TABLE_NUMBERS, config_subset, output_names
from embtransfer.report.check import check_report

try:
    check_report(config)
except ConfigError as err:
    raise WorkflowError(str(err)) from None


report: "../report/workflow.rst"


REPORT_DIR = f"{RESULTS}/report"
REPORT_OUTPUTS = output_names(REPORT_DIR)
REPORT_SUBCATEGORIES = {
    1: "Table 1: knowledge",
    2: "Table 2: reading comprehension",
    3: "Table 3: cross-lingual",
    4: "Table 4: target-PLM architectures",
    5: "Table 5: eval loss during LAPT",
    6: "Table 6: vocabulary overlap",
    8: "Table 8: final training loss",
}


def report_output(name):
    """An output of the report rule, registered for snakemake --report with its caption."""
    path = REPORT_OUTPUTS[name]
    if name.startswith("table"):
        number = int(name[len("table") : name.index("_")])
        kind = "Markdown" if name.endswith("_md") else "CSV"
        return report(
            path,
            caption=f"../report/table{number}.rst",
            category="Paper tables",
            subcategory=REPORT_SUBCATEGORIES[number],
            labels={"table": str(number), "format": kind},
        )
    if name == "figure2":
        return report(path, caption="../report/figure2.rst", category="Paper figures",
                      labels={"figure": "2"})
    return report(path, caption="../report/report_md.rst", category="Paper tables",
                  subcategory="All tables (report.md)", labels={"table": "all", "format": "Markdown"})


def report_lapt_metrics():
    # The LAPT stage defines all_lapt_metrics() (the metrics.jsonl of every LAPT run);
    # without it there are no LAPT inputs and Tables 5, 8 and Figure 2 say "missing".
    return all_lapt_metrics() if "all_lapt_metrics" in globals() else []


rule report:
    input:
        evaluation=all_evaluation(),
        lapt=report_lapt_metrics(),
        coverage=all_coverage(),
        reference=config["report"]["reference"],
    output:
        **{name: report_output(name) for name in REPORT_OUTPUTS},
    params:
        config=config_subset(config),
        results=RESULTS,
        code=script_hash("report.py"),
    conda:
        CONDA_ENV
    log:
        f"{LOGS}/report/report.log",
    script:
        "../scripts/report.py"


def all_report():
    return list(REPORT_OUTPUTS.values())
