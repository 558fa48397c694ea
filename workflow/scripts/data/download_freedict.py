"""Copy one FreeDict dictionary out of its pinned Debian package (embtransfer/data/real_text.py)."""

from embtransfer.core.logs import job_logger
from embtransfer.data.real_text import write_freedict

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
write_freedict(sm.wildcards.pair, sm.output.index, sm.output.data)
log.info("freedict-%s: %s, %s", sm.wildcards.pair, sm.output.index, sm.output.data)
