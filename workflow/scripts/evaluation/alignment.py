"""Translation retrieval and cosine to the oracle row of every method's checkpoint of one
(stage, language, source, target), per token of the world's truth
(embtransfer.evaluation.alignment)."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.atomic import write_parquet
from embtransfer.core.logs import job_logger
from embtransfer.evaluation.alignment import score_checkpoints, summary
from embtransfer.models.loading import load_embeddings, target_rows
from embtransfer.vocab.canonical import read_vocab
from embtransfer.world.truth import read_truth

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
trust = sm.params.trust_remote_code
checkpoints = {
    method: target_rows(path, sm.input.target_tokenizer, trust_remote_code=trust)
    for method, path in zip(sm.params.methods, sm.input.checkpoints, strict=True)
}
scores = score_checkpoints(
    load_embeddings(sm.input.source, trust_remote_code=trust),
    read_vocab(sm.input.source_vocab),
    read_truth(sm.input.truth),
    checkpoints,
)
write_parquet(sm.output[0], scores, metadata={**dict(sm.wildcards), "methods": sm.params.methods})
for (method, side, split), part in scores.groupby(["method", "side", "split"], sort=False):
    log.info("%s %s %s: %s", method, side, split, summary(part))
