"""The run's shared-token figures beside the committed real ones (embtransfer.vocab.calibration):
results/report/calibration.{csv,md}."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.logs import job_logger
from embtransfer.vocab.calibration import write_calibration

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
frame = write_calibration([sm.input.real], [sm.input.run], sm.output.csv, sm.output.md)
log.info("calibration: %d figures, %d outside the real range", len(frame),
         int((~frame["in_range"].astype(bool)).sum()) if len(frame) else 0)
