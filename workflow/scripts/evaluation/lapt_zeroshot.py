"""Held-out loss, perplexity and bits per byte of a LAPT checkpoint on the target valid text,
as the transfer stage scores its checkpoints (embtransfer.evaluation.zeroshot), and how far
LAPT moved the rows the method made (embtransfer.evaluation.row_movement)."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

import json
from pathlib import Path

import pandas as pd

from embtransfer.core.atomic import write_json
from embtransfer.core.logs import job_logger
from embtransfer.evaluation.row_movement import made_ids, row_movement
from embtransfer.evaluation.zeroshot import zeroshot_record
from embtransfer.models.loading import load_embeddings
from embtransfer.transfer.transferred_model import TRANSFER_JSON

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
record = zeroshot_record(sm.input.model, sm.input.text, sm.params.options, sm.params.device,
                         dict(sm.wildcards.items()))
shared = pd.read_parquet(sm.input.overlap, columns=["target_id"])["target_id"].to_numpy()
before = load_embeddings(sm.input.before)
checkpoint = json.loads((Path(sm.input.before) / TRANSFER_JSON).read_text())["checkpoint"]
record["rows_moved"] = row_movement(
    before, load_embeddings(sm.input.model), made_ids(checkpoint, before.input.shape[0], shared))
write_json(sm.output[0], record)
log.info("%s", record)
