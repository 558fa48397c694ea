"""Download a MUSE bilingual dictionary {src}-{tgt}.txt (a local rule: needs internet)."""

from embtransfer.core.logs import job_logger
from embtransfer.data.download import fetch_muse_dictionary

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
path = fetch_muse_dictionary(sm.wildcards.src, sm.wildcards.tgt, sm.output[0],
                             target=sm.output[0])
log.info("%s-%s dictionary: %d lines", sm.wildcards.src, sm.wildcards.tgt,
         len(path.read_text(encoding="utf-8").splitlines()))
