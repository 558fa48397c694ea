"""Held-out loss, perplexity and bits per byte of a LAPT checkpoint on the target valid text,
as the transfer stage scores its checkpoints (embtransfer.evaluation.zeroshot), and how far
LAPT moved the rows the method made (embtransfer.evaluation.row_movement)."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

import pandas as pd

from embtransfer.core.atomic import write_json
from embtransfer.core.logs import job_logger
from embtransfer.evaluation.row_movement import row_movement
from embtransfer.evaluation.zeroshot import zeroshot_record
from embtransfer.models.loading import load_embeddings

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
record = zeroshot_record(sm.input.model, sm.input.text, sm.params.options, sm.params.device,
                         dict(sm.wildcards.items()))
shared = pd.read_parquet(sm.input.overlap, columns=["target_id"])["target_id"].to_numpy()
record["rows_moved"] = row_movement(load_embeddings(sm.input.before),
                                    load_embeddings(sm.input.model), shared)
write_json(sm.output[0], record)
log.info("%s", record)
