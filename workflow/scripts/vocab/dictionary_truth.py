"""A real dictionary's held-out half as the alignment truth of one (source, target) pair:
each target token that is a held-out target word, with its English translation's source ids
(embtransfer.data.dictionary_split)."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.atomic import write_json
from embtransfer.core.logs import job_logger
from embtransfer.data.dictionaries import read_dictionary
from embtransfer.data.dictionary_split import dictionary_truth, split_dictionary
from embtransfer.models.hf import encode_texts
from embtransfer.models.loading import load_tokenizer
from embtransfer.vocab.canonical import read_vocab
from embtransfer.vocab.overlap import read_overlap
from embtransfer.world.truth import write_truth

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
split = split_dictionary(read_dictionary(sm.params.dictionary), sm.params.seed, sm.params.held_out)
tokenizer = load_tokenizer(sm.input.source_tokenizer, trust_remote_code=sm.params.trust_remote_code)
table, counts = dictionary_truth(
    split.held_out,
    read_vocab(sm.input.target_vocab),
    read_vocab(sm.input.source_vocab),
    lambda texts: encode_texts(tokenizer, texts),
    read_overlap(sm.input.overlap)["target_id"].to_numpy(),
    sm.wildcards.lang,
)
counts.update(source=sm.wildcards.source, target=sm.wildcards.target,
              seed=sm.params.seed, held_out=sm.params.held_out)  # fmt: skip
write_truth(sm.output.table, table, counts)
write_json(sm.output.counts, counts)
log.info("%s -> %s: %s", sm.wildcards.source, sm.wildcards.target, counts)
