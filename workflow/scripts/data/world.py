"""Build the miniature world (languages, lexicons, fact base) from the config seed."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.atomic import write_json
from embtransfer.core.logs import job_logger
from embtransfer.world.languages import build_world

log = job_logger(snakemake.log[0])  # noqa: F821
world = build_world(snakemake.params.world, snakemake.params.seed)  # noqa: F821
write_json(snakemake.output[0], world)  # noqa: F821
log.info("world with languages %s written", sorted(world.get("languages", {})))
