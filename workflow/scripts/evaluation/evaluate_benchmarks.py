"""The miniature world's benchmarks of one language as local lm-eval tasks."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.atomic import atomic_path, read_json, write_json
from embtransfer.core.logs import job_logger
from embtransfer.evaluation.catalog import CATALOG
from embtransfer.evaluation.world_tasks import build_world_tasks

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
world = read_json(sm.input.world)
shots = {key: bench.num_fewshot for key, bench in CATALOG.items()}
with atomic_path(sm.output[0], directory=True) as tmp:
    manifest = build_world_tasks(world, sm.wildcards.lang, tmp, sm.params.seed,
                                 sm.params.sizes, shots)
    write_json(tmp / "manifest.json", manifest)
log.info("%s", manifest)
