"""Pre-download the datasets of the config's lm-eval tasks (a local rule: needs internet)."""

from pathlib import Path

from embtransfer.core.logs import job_logger
from embtransfer.data.download import fetch_lm_eval_datasets

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
done = fetch_lm_eval_datasets(
    sm.params.stock,
    sm.params.shipped,
    Path(sm.output[0]).parent,
    sm.output[0],
    shipped_dir=sm.params.shipped_dir,
    target=sm.output[0],
)
log.info("datasets of %d lm-eval tasks cached: %s", len(done), ", ".join(done))
