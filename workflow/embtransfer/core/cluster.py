"""SLURM: refuse to submit while the profile has placeholders; a job's time left.

The shipped profile (slurm/config.yaml) leaves the site-specific values
(`slurm_account`, `slurm_partition`, optionally `gpu_model`) as ``FILL_IN_*``
placeholders. Left in, sbatch fails late and cryptically ("invalid partition
specified") or, on clusters without account enforcement, silently charges a
wrong account. The run's start hook (:func:`embtransfer.core.hooks.on_start`) calls
:func:`check_slurm_run`, which stops the run before the first submission with a message
naming the file and key.

Inside a job, :func:`slurm_seconds_left` reads the time to the job's limit, which the
LAPT trainer's stop timer (:mod:`embtransfer.lapt.preemption`) runs against.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping

PLACEHOLDER_PREFIX = "FILL_IN"
PROFILE_FILE = "slurm/config.yaml"
SITE_KEYS = ("slurm_account", "slurm_partition", "gpu_model", "qos", "constraint")
HINTS = {
    "slurm_account": "your SLURM account (`sacctmgr -n -s list user $USER format=account`)",
    "slurm_partition": "a partition of your cluster (`sinfo -s`; for GPU rules one with "
    "GPUs, or delete the line to use the default partition)",
    "gpu_model": "a GPU model of your cluster (`sinfo -o '%P %G'`), or delete the key",
}


class SlurmProfileError(Exception):
    """A placeholder of the SLURM profile was left in."""


def is_placeholder(value) -> bool:
    return isinstance(value, str) and value.strip().upper().startswith(PLACEHOLDER_PREFIX)


def find_placeholders(jobs: Iterable[tuple[str, Mapping]]) -> dict[tuple[str, str], list[str]]:
    """(key, value) -> sorted rule names, for every site key still holding a placeholder.

    `jobs` yields (rule name, resources mapping) per job to be submitted.
    """
    found: dict[tuple[str, str], set[str]] = {}
    for rule, resources in jobs:
        for key in SITE_KEYS:
            value = resources.get(key)
            if is_placeholder(value):
                found.setdefault((key, str(value)), set()).add(rule)
    return {k: sorted(v) for k, v in sorted(found.items())}


def placeholder_message(found: Mapping[tuple[str, str], list[str]]) -> str:
    lines = [
        f"The SLURM profile still has placeholder values: fill them in in {PROFILE_FILE} "
        "(see docs/slurm.md, 'What a site fills in'):"
    ]
    for (key, value), rules in found.items():
        hint = HINTS.get(key, "a value for your site")
        shown = ", ".join(rules[:5]) + (", ..." if len(rules) > 5 else "")
        lines.append(
            f"  {key}: {value}  ->  {hint}; set it under `default-resources:` "
            f"(or `set-resources: <rule>:`) in {PROFILE_FILE} (jobs of rules: {shown})"
        )
    return "\n".join(lines)


def check_slurm_run(workflow) -> None:
    """Raise SlurmProfileError when the slurm executor would submit a placeholder value.

    A no-op for any other executor, for dry runs and inside cluster jobs.
    """
    plugin = getattr(workflow, "executor_plugin", None)
    if plugin is None or getattr(plugin, "name", None) != "slurm":
        return
    jobs = ((job.rule.name, job.resources) for job in workflow.dag.needrun_jobs())
    found = find_placeholders(jobs)
    if found:
        raise SlurmProfileError(placeholder_message(found))


def slurm_seconds_left() -> float | None:
    """Seconds until this SLURM job's time limit, or None outside SLURM / when unknown."""
    end = os.environ.get("SLURM_JOB_END_TIME")
    if end:
        return float(end) - time.time()
    job = os.environ.get("SLURM_JOB_ID")
    if not job or shutil.which("squeue") is None:
        return None
    try:
        out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%L"], capture_output=True,
                             text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    days, _, hms = out.rpartition("-")
    parts = hms.split(":")
    if not out or not all(part.isdigit() for part in parts) or (days and not days.isdigit()):
        return None  # UNLIMITED, NOT_SET, ...
    seconds = 0
    for part in parts:
        seconds = seconds * 60 + int(part)
    return seconds + 86400 * int(days or 0)
