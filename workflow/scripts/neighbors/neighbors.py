"""Neighbour table: shared neighbours and sparsemax weights of every non-shared target token."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.logs import job_logger
from embtransfer.fasttext.vectors import load_token_vectors
from embtransfer.neighbors.search import compute_neighbors, write_neighbors
from embtransfer.vocab.overlap import read_overlap

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
vectors, missing = load_token_vectors(sm.input.vectors, sm.input.missing)
pairs = read_overlap(sm.input.overlap)
table, stats = compute_neighbors(
    vectors, missing,
    pairs["target_id"].to_numpy(), pairs["source_id"].to_numpy(),
    chunk_rows=sm.params.chunk_rows, prefilter_k=sm.params.prefilter_k,
    max_neighbors=sm.params.max_neighbors, threads=sm.threads,
)
stats.update(source=sm.wildcards.source, target=sm.wildcards.target,
             vectors=sm.wildcards.vectors)
write_neighbors(table, stats, sm.output[0])
log.info("neighbours of %s -> %s (%s): %s", sm.wildcards.source, sm.wildcards.target,
         sm.wildcards.vectors, stats)
