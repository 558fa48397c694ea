"""A source LLM pretrained here on real text against the count models of its own tokens
(embtransfer/evaluation/lm_floor.py): its held-out bits per byte and the floor's."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.atomic import write_json
from embtransfer.core.logs import job_logger
from embtransfer.evaluation.lm_floor import floor_record

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
record = floor_record(
    sm.input.model, sm.input.train, sm.input.heldout, sm.params.options, sm.params.device
)
write_json(sm.output[0], record)
log.info(
    "%s: %.3f bits per byte held out; add-one unigram %.3f, Kneser-Ney bigram %.3f; clears: %s",
    sm.wildcards.source,
    record["model_bits_per_byte"],
    record["unigram_bits_per_byte"],
    record["kn_bigram_bits_per_byte"],
    record["clears_floor"],
)
