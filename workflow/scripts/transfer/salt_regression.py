"""SALT step 4: solve every non-shared target token's coefficients over its neighbours.

Reads the target PLM and the neighbour table only; the transfer job applies the
coefficients to the source model's rows (embtransfer.transfer.methods.salt).
"""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.logs import job_logger
from embtransfer.models.loading import check_tokenizer_model_agreement, load_embeddings
from embtransfer.neighbors.search import Neighbors, read_neighbors
from embtransfer.transfer.method_catalog import resolve_options
from embtransfer.transfer.regression import salt_coefficients, write_coefficients

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
check_tokenizer_model_agreement(sm.input.target, sm.input.target)
table, neighbor_stats = read_neighbors(sm.input.neighbors)
plm = load_embeddings(sm.input.target, trust_remote_code=sm.params.trust_remote_code,
                      allow_pickle=sm.params.allow_pickle)
options = resolve_options("salt", sm.params.options)
del options["vectors"]  # it chose the neighbour table (this rule's input), not a solve option
result = salt_coefficients(plm.input, Neighbors.from_table(table), device=sm.params.device,
                           **options)
result["stats"]["neighbors"] = {
    k: neighbor_stats.get(k) for k in ("k", "support", "degenerate", "missing")
}
write_coefficients(result, sm.output.tensors, sm.output.meta)
log.info("SALT coefficients: %s", result["stats"])
