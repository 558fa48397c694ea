"""Initialise the target-language embeddings with one method; write a loadable checkpoint
and its zero-shot scores (held-out loss and bits per byte before any training): one
process for both, so the checkpoint is read back once and Python starts once."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.logs import job_logger
from embtransfer.evaluation.zeroshot import write_zeroshot_record
from embtransfer.transfer.job import run_transfer_job

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
context = dict(sm.wildcards.items())
report = run_transfer_job(
    method=sm.wildcards.method,
    paths={k: v for k, v in sm.input.items() if k != "text"},
    out_dir=sm.output.model,
    options=sm.params.options,
    mode=sm.params.mode,
    seed=sm.params.seed,
    trust_remote_code=sm.params.trust_remote_code,
    allow_pickle=sm.params.allow_pickle,
    context=context,
)
log.info("transfer %s: %s; seconds %s", sm.wildcards.method, report["counts"], report["seconds"])
# the record carries the check of the new rows, so the report marks a flagged checkpoint,
# and how the method made them (the report's new_rows table)
record = write_zeroshot_record(sm.output.zeroshot, sm.output.model, sm.input.text,
                               sm.params.zeroshot, sm.params.device,
                               {**context, "row_check": report["row_check"],
                                "counts": report["counts"]})
log.info("zero-shot: %s", record)
