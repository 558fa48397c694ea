"""A model at a real model's shapes with random weights (models/random_weights.py)."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.logs import job_logger
from embtransfer.models.random_weights import write_random_model

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
shapes = write_random_model(sm.params.spec, sm.input.tokenizer, sm.output[0], sm.params.seed)
log.info("%s: random weights, %s", sm.wildcards.model, shapes)
