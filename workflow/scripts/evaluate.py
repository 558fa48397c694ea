"""lm-eval benchmarks of one checkpoint: one contract JSON per task (embtransfer.evaluation)."""

import os
from pathlib import Path

from embtransfer.download import lm_eval_cache_env

sm = snakemake  # noqa: F821
if sm.input.get("datasets"):
    # Before anything imports huggingface_hub/datasets: they read these at import time.
    os.environ.update(lm_eval_cache_env(Path(sm.input.datasets).parent))

import torch  # noqa: E402

from embtransfer.evaluation.catalog import TaskSpec  # noqa: E402
from embtransfer.evaluation.runner import evaluate_checkpoint  # noqa: E402
from embtransfer.logs import job_logger  # noqa: E402

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
)
