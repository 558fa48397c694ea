"""One table of every checkpoint's zero-shot held-out loss and bits per byte."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.logs import job_logger
from embtransfer.report.records import read_records
from embtransfer.report.zeroshot import write_zeroshot_table

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
table = write_zeroshot_table(read_records(sm.input), sm.output.csv, sm.output.md)
log.info("zero-shot table with %d rows", len(table))
