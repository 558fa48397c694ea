"""Download NLTK's punkt sentence models (a local rule: needs internet)."""

from embtransfer.download import fetch_punkt
from embtransfer.logs import job_logger

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
log.info("punkt_tab in %s", fetch_punkt(sm.output[0]))
