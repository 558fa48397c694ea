"""Download NLTK's punkt sentence models (a local rule: needs internet)."""

from embtransfer.core.logs import job_logger
from embtransfer.data.download import fetch_punkt

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
log.info("punkt_tab in %s", fetch_punkt(sm.output[0]))
