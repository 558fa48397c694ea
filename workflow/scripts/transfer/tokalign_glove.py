"""TokAlign's GloVe space of a language's corpus in one model's tokenization."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.logs import job_logger
from embtransfer.core.threads import torch_threads
from embtransfer.models.loading import load_tokenizer
from embtransfer.transfer.glove import corpus_glove, write_glove

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
tokenizer = load_tokenizer(sm.input.tokenizer, trust_remote_code=sm.params.trust_remote_code)
with torch_threads(sm.threads):
    vectors, missing, record = corpus_glove(tokenizer, sm.input.corpus, sm.params.options,
                                            len(tokenizer), sm.params.seed)
record.update(dict(sm.wildcards))
write_glove(sm.output[0], vectors, missing, record)
log.info("GloVe of %s in %s's tokenization: %s", sm.wildcards.lang, sm.wildcards.model, record)
