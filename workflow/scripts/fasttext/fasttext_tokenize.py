"""FOCUS token-level mode: the corpus tokenized by the target tokenizer, tokens as words."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.logs import job_logger
from embtransfer.fasttext.vectors import tokenize_for_fasttext
from embtransfer.models.loading import load_tokenizer

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
tokenizer = load_tokenizer(sm.input.tokenizer, trust_remote_code=sm.params.trust_remote_code)
stats = tokenize_for_fasttext(tokenizer, sm.input.corpus, sm.output[0])
log.info("tokenized for fastText: %s", stats)
