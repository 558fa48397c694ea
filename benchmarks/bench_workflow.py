"""Time the default workflow: `snakemake -n`, and a fresh run up to the neighbour tables.

Prints figures; asserts nothing. Targets (issue 2, on a 2-core machine): the
dry run answers in at most 3 s; the default workflow up to the neighbour
tables (`neighbors_only`) finishes in at most 5 minutes. Also the offline dry run
of the paper grid (issue 11: at most 10 s), wall and CPU seconds.

    python benchmarks/bench_workflow.py [--cores 2] [--skip-run]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed(cmd: list[str], cwd: Path, env: dict[str, str] | None = None
          ) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    return time.perf_counter() - start, proc


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cores", default="2")
    parser.add_argument("--skip-run", action="store_true", help="only time the dry run")
    args = parser.parse_args()
    snakemake = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile")]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        seconds, proc = timed([*snakemake, "--directory", tmp, "-n"], work)
        jobs = next((ln for ln in (proc.stdout + proc.stderr).splitlines()
                     if ln.startswith("total")), "?")
        print(f"snakemake -n (whole default DAG, {jobs.split()[-1]} jobs): {seconds:.2f} s "
              "(target <= 3 s)")
        offline = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
                       EMBTRANSFER_OFFLINE="1")
        cpu = cpu_seconds()
        seconds, proc = timed([*snakemake, "--directory", tmp, "-n", "--configfile",
                               str(REPO / "config" / "paper_salt.yaml")], work, offline)
        jobs = next((ln for ln in (proc.stdout + proc.stderr).splitlines()
                     if ln.startswith("total")), "?")
        print(f"snakemake -n --configfile config/paper_salt.yaml ({jobs.split()[-1]} jobs, "
              f"offline): {seconds:.2f} s, {cpu_seconds() - cpu:.2f} CPU s (target <= 10 s)")
        if args.skip_run:
            return
        seconds, proc = timed(
            [*snakemake, "--directory", tmp, "--cores", args.cores, "neighbors_only"], work
        )
        if proc.returncode != 0:
            print(proc.stderr[-3000:])
            raise SystemExit("the workflow failed")
        print(f"default workflow up to the neighbour tables, --cores {args.cores}: "
              f"{seconds:.1f} s (target <= 300 s)")
        seconds, proc = timed([*snakemake, "--directory", tmp, "-n", "neighbors_only"], work)
        print(f"snakemake -n after the run (nothing to do): {seconds:.2f} s")
        shutil.rmtree(work / ".snakemake", ignore_errors=True)


if __name__ == "__main__":
    main()
