"""Download fastText crawl vectors cc.{code}.300.bin (a local rule: needs internet)."""

from embtransfer.core.logs import job_logger
from embtransfer.data.download import fetch_fasttext_crawl

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
path = fetch_fasttext_crawl(sm.wildcards.code, sm.output[0], target=sm.output[0])
log.info("cc.%s.300.bin: %d bytes in %s", sm.wildcards.code, path.stat().st_size, path)
