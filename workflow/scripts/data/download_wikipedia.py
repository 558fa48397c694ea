"""Write the first N NLTK sentences of a Wikipedia dump (a local rule: needs internet)."""

from embtransfer.core.logs import job_logger
from embtransfer.data.download import fetch_wikipedia

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
spec = sm.params.spec
n = fetch_wikipedia(
    spec["language"],
    spec.get("dump", "20231101"),
    spec.get("sentences", 8_000_000),
    sm.output[0],
    sm.input.nltk,
    target=sm.output[0],
)
log.info("%s: %d sentences of wikipedia %s.%s", sm.wildcards.lang, n, spec.get("dump"),
         spec["language"])
