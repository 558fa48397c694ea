"""The paper's tables (Markdown + CSV), Figure 2 and report.md from the result files."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.logs import job_logger
from embtransfer.report.build import Inputs, write_report
from embtransfer.report.environment import write_environment

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
inputs = Inputs.of_rule(sm.input)
tables, curves = write_report(
    sm.params.config, inputs, dict(sm.output.items()), results_dir=sm.params.results,
    dpi=sm.params.config["report"]["figure_dpi"],
)
for number, table in tables.items():
    lacking = sum(len(row.missing) for row in table.rows)
    log.info("table %d: %d rows, %d with missing cells", number, len(table.rows), lacking)
log.info("figure 2: %d panels", len(curves))
write_environment(sm.output.environment, sm.params.lock)
