"""Write one language's real-text corpus from pinned packages (embtransfer/data/real_text.py)."""

from embtransfer.core.logs import job_logger
from embtransfer.data.real_text import write_corpus

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
stats = write_corpus(sm.wildcards.name, sm.output.text, sm.output.stats, sm.params.max_chars)
log.info("%s: %s", sm.wildcards.name, stats)
