"""WECHSEL's and OFA's top-k search in the aligned space, once for both (aligned.share_search)."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

import time

from embtransfer.core.logs import job_logger
from embtransfer.transfer.aligned import read_aligned, search_every_target, write_search

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
aligned = read_aligned(sm.input[0])[0]
start = time.perf_counter()
rows = search_every_target(aligned, **sm.params.options)
log.info(
    "searched %d target rows, %s, in %.1f s", rows, sm.params.options, time.perf_counter() - start
)
write_search(sm.output[0], aligned)
