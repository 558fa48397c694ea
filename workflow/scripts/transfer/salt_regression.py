"""SALT step 4: project every non-shared target token's PLM embedding into the source space."""

from embtransfer.core.logs import job_logger
from embtransfer.models.loading import check_tokenizer_model_agreement, load_embeddings
from embtransfer.neighbors.search import Neighbors, read_neighbors
from embtransfer.transfer.catalog import resolve_options
from embtransfer.transfer.regression import salt_project, write_projection

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
trust, allow_pickle = sm.params.trust_remote_code, sm.params.allow_pickle
for name in ("source", "target"):
    check_tokenizer_model_agreement(sm.input[name], sm.input[name])
table, neighbor_stats = read_neighbors(sm.input.neighbors)
source = load_embeddings(sm.input.source, trust_remote_code=trust, allow_pickle=allow_pickle)
plm = load_embeddings(sm.input.target, trust_remote_code=trust, allow_pickle=allow_pickle)
matrices = {"input": source.input}
if source.output is not None:
    matrices["output"] = source.output
options = resolve_options("salt", sm.params.options)
del options["vectors"]  # it chose the neighbour table (this rule's input), not a solve option
result = salt_project(
    plm.input, matrices, Neighbors.from_table(table), device=sm.params.device, **options
)
result["stats"]["neighbors"] = {
    k: neighbor_stats.get(k) for k in ("k", "support", "degenerate", "missing")
}
write_projection(result, sm.output.tensors, sm.output.meta)
log.info("SALT projection: %s", result["stats"])
