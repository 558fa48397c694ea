"""Whether one target PLM's input rows carry meaning: the span probe over SALT's neighbour
table and, for a pair of the miniature world, the class probe over the world's truth
(embtransfer.evaluation.plm_probes)."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.atomic import read_json, write_json
from embtransfer.core.logs import job_logger
from embtransfer.evaluation.plm_probes import concept_classes, probe_plm
from embtransfer.models.loading import load_embeddings
from embtransfer.neighbors.search import Neighbors, read_neighbors
from embtransfer.vocab.overlap import read_overlap
from embtransfer.world.truth import read_truth

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
plm = load_embeddings(sm.input.plm, trust_remote_code=sm.params.trust_remote_code)
table, _ = read_neighbors(sm.input.neighbors)
pairs = read_overlap(sm.input.overlap)
shared = pairs.loc[pairs["how"] != "special", "target_id"].to_numpy()
world = "world" in sm.input.keys()  # real text has no concept classes: no class probe
record = probe_plm(
    plm.input,
    Neighbors.from_table(table),
    shared,
    read_truth(sm.input.truth) if world else None,
    concept_classes(read_json(sm.input.world)) if world else None,
    seed=sm.params.seed,
    rcond=sm.params.rcond,
)
write_json(sm.output[0], record)
log.info("probes of %s: %s", sm.wildcards.target, record)
