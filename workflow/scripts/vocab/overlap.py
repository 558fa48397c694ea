"""Shared tokens of a source and a target vocabulary, and the paper's Table 6 counts."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.atomic import write_json
from embtransfer.core.logs import job_logger
from embtransfer.models.loading import load_tokenizer
from embtransfer.vocab.canonical import read_vocab
from embtransfer.vocab.overlap import compute_overlap, count_tokens, coverage, write_overlap

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
source = read_vocab(sm.input.source)
target = read_vocab(sm.input.target)
pairs = compute_overlap(
    source, target, match=sm.params.match,
    source_name=sm.wildcards.source, target_name=sm.wildcards.target,
)
tokenizer = load_tokenizer(sm.input.target_tokenizer, trust_remote_code=sm.params.trust_remote_code)
counts = count_tokens(tokenizer, sm.input.valid)
stats = coverage(pairs, target, counts)
stats.update(source=sm.wildcards.source, target=sm.wildcards.target, match=sm.params.match,
             source_vocab_size=int(len(source)))
write_overlap(pairs, sm.output.pairs, metadata=stats)
write_json(sm.output.coverage, stats)
log.info("%s -> %s: %s", sm.wildcards.source, sm.wildcards.target, stats)
