"""lm-eval benchmarks of one checkpoint: one contract JSON per task (embtransfer.evaluation)."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

import os

# Stock and shipped tasks read their data from the datasets directory (its tasks.json
# marker is the input); nothing comes from the hub. Set before lm-eval imports `datasets`,
# which reads it at import.
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from pathlib import Path

import torch

from embtransfer.core.logs import job_logger
from embtransfer.evaluation.runner import evaluate_checkpoint
from embtransfer.evaluation.task_catalog import TaskSpec

sm = snakemake  # noqa: F821

log = job_logger(sm.log[0])
torch.set_num_threads(sm.threads)
specs = [TaskSpec(**{**s, "metrics": {k: tuple(v) for k, v in s["metrics"].items()}})
         for s in sm.params.specs]
opts = sm.params.options
evaluate_checkpoint(
    sm.input.model, specs, list(sm.output), meta=dict(sm.params.meta),
    world_dir=sm.input.get("benchmarks"), device=opts["device"],
    batch_size=opts["batch_size"], limit=opts["limit"], seed=sm.params.seed,
    max_length=opts["max_length"], trust_remote_code=sm.params.trust_remote_code,
    datasets_dir=Path(sm.input.datasets).parent if sm.input.get("datasets") else None,
    nfc=opts["nfc"],
)
