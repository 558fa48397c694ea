"""One fastText vector per token of a vocabulary, and the mask of tokens without one."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.logs import job_logger
from embtransfer.fasttext.vectors import load_fasttext, save_token_vectors, token_vectors
from embtransfer.vocab.canonical import read_vocab

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
try:
    model = load_fasttext(sm.input.fasttext)
except ValueError as err:
    where = f"languages.{sm.wildcards.lang}.fasttext" if sm.wildcards.vectors == "word" else "-"
    raise ValueError(f"{err} (configured at config key {where})") from err
vocab = read_vocab(sm.input.vocab)
vectors, missing = token_vectors(model, vocab, sm.wildcards.vectors)
save_token_vectors(sm.output.vectors, sm.output.missing, vectors, missing)
log.info(
    "%s (%s vectors): %d tokens, %d without a vector",
    sm.wildcards.model, sm.wildcards.vectors, len(vocab), int(missing.sum()),
)
