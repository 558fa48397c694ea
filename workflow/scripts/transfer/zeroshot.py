"""Held-out loss, perplexity and bits per byte of a checkpoint on the target valid text
(the untouched source LLM, and LAPT checkpoints; a transferred checkpoint gets its own in
the transfer job)."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.atomic import write_json
from embtransfer.core.logs import job_logger
from embtransfer.evaluation.intrinsic import zeroshot_record

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
record = zeroshot_record(sm.input.model, sm.input.text, sm.params.options, sm.params.device,
                         dict(sm.wildcards.items()))
write_json(sm.output[0], record)
log.info("%s", record)
