"""Train fastText vectors (word-level on raw text, or token-level on tokenized text)."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.logs import job_logger
from embtransfer.fasttext.vectors import train_fasttext

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
stats = train_fasttext(sm.input.corpus, sm.output[0], sm.params.params, sm.params.seed, sm.threads)
log.info("fastText trained: %s", stats)
