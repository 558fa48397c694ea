"""A runnable copy of the workflow in another directory, and the job counts of a run.

The tests and ``benchmarks/bench_workflow.py`` run Snakemake on such copies, so the
checkout's ``results/`` is never touched; both read the rules' job counts from the
"Job stats:" table Snakemake prints.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

#: The checkout this package sits in (``workflow/embtransfer/core/`` is three levels down).
REPO = Path(__file__).resolve().parents[3]


def copy_workflow(dest: Path, repo: Path = REPO) -> Path:
    """Copy the Snakefile, the package, configs, environments, the workflow profile and the
    resources the report reads from ``repo`` into ``dest``; returns ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(repo / "Snakefile", dest / "Snakefile")
    # with the bytecode `make test` compiled (copytree keeps the sources' times, so it stays
    # valid): where PYTHONDONTWRITEBYTECODE is set, every Snakemake process would compile
    # the package again
    shutil.copytree(repo / "workflow", dest / "workflow")
    shutil.copytree(repo / "config", dest / "config")
    shutil.copytree(repo / "envs", dest / "envs")
    shutil.copytree(repo / "profiles", dest / "profiles")  # the workflow profile
    # the paper's numbers and the real shared-token figures, for the report
    for resource in ("reference", "calibration"):
        if (repo / "resources" / resource).is_dir():
            shutil.copytree(repo / "resources" / resource, dest / "resources" / resource)
    return dest


def job_stats(text: str) -> dict[str, int]:
    """Rule -> job count from the "Job stats:" table of Snakemake's output."""
    table = text.split("Job stats:", 1)[1]
    jobs: dict[str, int] = {}
    for line in table.splitlines()[3:]:
        match = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if not match:
            break
        if match.group(1) != "total":
            jobs[match.group(1)] = int(match.group(2))
    return jobs
