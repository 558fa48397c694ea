"""One method's held-out transfer: the method runs with the held-out shared tokens hidden,
and its rows for them are scored against their true source rows (no checkpoint)."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.logs import job_logger
from embtransfer.transfer.job import run_holdout_job

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
record = run_holdout_job(
    method=sm.wildcards.method,
    paths=dict(sm.input.items()),
    out_path=sm.output[0],
    options=sm.params.options,
    seed=sm.params.seed,
    trust_remote_code=sm.params.trust_remote_code,
    allow_pickle=sm.params.allow_pickle,
    context=dict(sm.wildcards.items()),
)
log.info("held-out transfer %s: %s", sm.wildcards.method, record)
