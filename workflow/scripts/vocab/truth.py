"""The miniature world's ground truth for one (source, target) pair: each target token's
translation as source ids (embtransfer.world.truth)."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.atomic import read_json, write_json
from embtransfer.core.logs import job_logger
from embtransfer.models.hf import encode_texts
from embtransfer.models.loading import load_tokenizer
from embtransfer.vocab.canonical import read_vocab
from embtransfer.vocab.overlap import read_overlap
from embtransfer.world.split import concept_split
from embtransfer.world.truth import token_truth, write_truth

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
world = read_json(sm.input.world)
tokenizer = load_tokenizer(sm.input.source_tokenizer, trust_remote_code=sm.params.trust_remote_code)
table, counts = token_truth(
    world,
    sm.wildcards.lang,
    read_vocab(sm.input.target_vocab),
    read_vocab(sm.input.source_vocab),
    lambda texts: encode_texts(tokenizer, texts),
    read_overlap(sm.input.overlap)["target_id"].to_numpy(),
    split=concept_split(world, sm.params.seed, sm.params.held_out),
)
counts.update(source=sm.wildcards.source, target=sm.wildcards.target)
write_truth(sm.output.table, table, counts)
write_json(sm.output.counts, counts)
log.info("%s -> %s: %s", sm.wildcards.source, sm.wildcards.target, counts)
