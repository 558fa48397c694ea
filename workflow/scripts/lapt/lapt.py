"""LAPT of one transferred checkpoint on its pre-tokenised blocks.

Resumes from {method}.work/ when a checkpoint there was started from the same inputs and
settings (else sets it aside). A preempted run exits non-zero after its checkpoint, for
SLURM (or Snakemake's retries) to start it again.
"""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

import json
import shutil
import subprocess
from pathlib import Path

import torch

from embtransfer.core.atomic import atomic_path
from embtransfer.core.logs import job_logger
from embtransfer.lapt.distributed import launch_command
from embtransfer.lapt.settings import settings_from_config
from embtransfer.lapt.trainer import train_lapt

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
settings = settings_from_config(sm.params.lapt, sm.threads, sm.input.get("replay"))
work = Path(sm.params.work)
work.mkdir(parents=True, exist_ok=True)

# One process per GPU when the job holds several; otherwise train here (CPU or one GPU).
processes = min(int(sm.resources.get("gpu", 0)), torch.cuda.device_count())
if processes > 1:
    spec = {"model_dir": sm.input.model, "train_file": sm.input.train,
            "valid_file": sm.input.valid, "out_dir": sm.output.model, "cfg": settings.as_dict(),
            "seed": sm.params.seed, "work_dir": str(work)}
    (work / "spec.json").write_text(json.dumps(spec))
    log.info("training on %d GPUs through accelerate", processes)
    with open(sm.log[0], "a", encoding="utf-8") as fh:
        proc = subprocess.run(launch_command(work / "spec.json", processes), stdout=fh,
                              stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise SystemExit(f"accelerate launch failed (exit {proc.returncode}); see {sm.log[0]}")
else:
    train_lapt(sm.input.model, sm.input.train, sm.input.valid, sm.output.model, settings,
               sm.params.seed, work_dir=work, log=log.info)

with atomic_path(sm.output.metrics) as tmp:
    shutil.copyfile(work / "metrics.jsonl", tmp)
shutil.rmtree(work)  # the checkpoint is gone already; the metrics now live in the output
