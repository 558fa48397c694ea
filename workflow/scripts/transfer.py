"""Initialise the target-language embeddings with one method; write a loadable checkpoint."""

from embtransfer.logs import job_logger
from embtransfer.transfer_job import run_transfer_job

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
report = run_transfer_job(
    method=sm.wildcards.method,
    paths=dict(sm.input.items()),
    out_dir=sm.output[0],
    options=sm.params.options,
    mode=sm.params.mode,
    seed=sm.params.seed,
    trust_remote_code=sm.params.trust_remote_code,
    allow_pickle=sm.params.allow_pickle,
    context={k: v for k, v in sm.wildcards.items()},
)
log.info("transfer %s: %s; seconds %s", sm.wildcards.method, report["counts"], report["seconds"])
