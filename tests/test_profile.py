"""The workflow profile (profiles/default/config.yaml) keeps Snakemake's scheduler quiet.

Snakemake (9.x) ends every scheduling round that leaves ready jobs waiting by arming a
timer for its rate limiter's timespan, and every job that finishes starts a round: so each
finish starts a new chain of timed rounds, and while jobs wait for a core the chains add up
(snakemake/snakemake#3744). Each round re-evaluates the params of every ready job and stats
their inputs. The profile's longer timespan makes the chains fire a fifth as often.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]

SNAKEFILE = """
rule all:
    input: expand("out/{i}.txt", i=range(30))

rule wait:
    output: "out/{i}.txt"
    shell: "sleep 0.4 && touch {output}"
"""


def scheduling_rounds(workdir: Path, profile: str) -> int:
    """Rounds of a run of 30 short jobs on 2 cores (Snakemake logs "Ready jobs" in each)."""
    workdir.mkdir()
    (workdir / "Snakefile").write_text(SNAKEFILE)
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", "--verbose",
         "--workflow-profile", profile],
        cwd=workdir, capture_output=True, text=True, check=True,
    )
    return (proc.stdout + proc.stderr).count("Ready jobs")


def test_profile_keeps_scheduling_rounds_near_one_per_job(tmp_path):
    ours = scheduling_rounds(tmp_path / "profile", str(REPO / "profiles" / "default"))
    default = scheduling_rounds(tmp_path / "none", "none")
    assert ours < 60, ours  # about one round per finished job
    assert 2 * ours < default, (ours, default)
