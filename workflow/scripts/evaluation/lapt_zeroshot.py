"""Held-out loss, perplexity and bits per byte of a LAPT checkpoint on the target valid text,
as the transfer stage scores its checkpoints (embtransfer.evaluation.zeroshot)."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.logs import job_logger
from embtransfer.evaluation.zeroshot import write_zeroshot_record

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
log.info("%s", write_zeroshot_record(sm.output[0], sm.input.model, sm.input.text, sm.params.options,
                                     sm.params.device, dict(sm.wildcards.items())))
