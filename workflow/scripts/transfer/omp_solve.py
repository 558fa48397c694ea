"""omp's and omp_salt_k's fits of one pair from one OMP solve to the larger k
(embtransfer.transfer.methods.omp.solve_shared); each method's transfer job reads its own."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

import time

from embtransfer.core.logs import job_logger
from embtransfer.transfer.job import load_inputs
from embtransfer.transfer.methods.omp import solve_shared, write_fits

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
start = time.perf_counter()
inputs, _ = load_inputs(dict(sm.input.items()), sm.params.seed, sm.params.trust_remote_code,
                        sm.params.allow_pickle)
fits = solve_shared(inputs, **sm.params.options)
write_fits(sm.output[0], fits)
log.info("OMP fits %s in %.1f s", sorted((donor, k) for _, donor, k, _ in fits),
         time.perf_counter() - start)
