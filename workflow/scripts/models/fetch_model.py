"""Download a hub snapshot pinned by revision (run where there is internet)."""

from embtransfer.core.logs import job_logger
from embtransfer.data.download import fetch_hub_snapshot

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
spec = sm.params.spec
path = fetch_hub_snapshot(
    spec["repo_id"],
    spec["revision"],
    sm.output[0],
    allow_patterns=spec.get("allow_patterns"),
    key=sm.wildcards.model,
)
log.info("%s: %s@%s in %s", sm.wildcards.model, spec["repo_id"], spec["revision"], path)
