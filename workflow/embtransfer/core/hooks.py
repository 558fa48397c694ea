"""What the workflow does when a run starts and when it ends, in one place.

Snakemake keeps one handler of each kind (a second ``onsuccess:`` replaces the first,
silently), so the Snakefile registers ``onstart``, ``onsuccess`` and ``onerror`` once
each and they call :func:`on_start` and :func:`on_end`; a stage that needs work done
at the start or end of a run adds it here, never a handler of its own in a rule file
(``tests/test_rule_files.py`` checks both).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from snakemake.settings.types import ExecMode

from embtransfer.core import jobserver, paths
from embtransfer.core.atomic import find_stray_temporaries, human_bytes, remove_path, size_of
from embtransfer.core.cluster import check_slurm_run
from embtransfer.core.grid import gpu_only_note
from embtransfer.core.pinning import pin_config_file


def on_start(workflow: Any, config: dict[str, Any]) -> None:
    """Refuse a SLURM run whose profile holds placeholders; name the transfers left to a GPU
    run (``transfer.gpu_only``); report stray temporaries; start the job server.

    Raises :class:`embtransfer.core.cluster.SlurmProfileError`. Stray temporaries under
    ``results/``: :func:`report_stray_temporaries`. The job server
    (:mod:`embtransfer.core.jobserver`) serves a local, non-dry run unless the
    config says ``job_server: false``.
    """
    check_slurm_run(workflow)
    if note := gpu_only_note(config):
        print(note, file=sys.stderr)
    line = report_stray_temporaries(Path(paths.RESULTS), remove=config["clean_temporaries"])
    if line:
        print(line, file=sys.stderr)
    if (
        config["job_server"]
        and workflow.local_exec
        and not workflow.dryrun
        and workflow.exec_mode == ExecMode.DEFAULT
    ):
        jobserver.start(Path(".snakemake") / "jobserver", min(config["threads"], workflow.cores))


def report_stray_temporaries(root: Path, remove: bool, show: int = 3) -> str | None:
    """One line on the temporaries under ``root`` whose writers are gone (count, size, the
    first ``show`` paths), removing them when ``remove``; None when there are none.

    Which ones are gone is :mod:`embtransfer.core.atomic`'s rule: a live writer's temporary
    on this host, and another host's younger than a day, are never removed (the line
    counts them apart).
    """
    strays = find_stray_temporaries(root)
    stale = [t.path for t in strays if t.stale]
    if not stale:
        return None
    size = human_bytes(sum(size_of(p) for p in stale))
    if remove:
        for path in stale:
            remove_path(path)
    first = ", ".join(map(str, stale[:show])) + (f" and {len(stale) - show} more"
                                                  if len(stale) > show else "")
    kept = len(strays) - len(stale)
    also = f"; {kept} of live or other hosts' writers kept" if kept else ""
    one = len(stale) == 1
    line = (f"{len(stale)} stray temporar{'y' if one else 'ies'} of killed writers under "
            f"{root}/ ({size}): {first}{also}")
    if remove:
        return f"removed {line}"
    return f"{line}; `--config clean_temporaries=True` removes {'it' if one else 'them'}"


def on_end(workflow: Any, config: dict[str, Any]) -> None:
    """After a run, successful or not: pin hub revisions, stop the job server."""
    try:
        pin_revisions(workflow.config_settings.configfiles, config)
    finally:
        jobserver.stop()


def pin_revisions(configfiles: list[Path], config: dict[str, Any]) -> None:
    """Write the commits the downloads recorded back into the ``--configfile`` files
    (:mod:`embtransfer.core.pinning`), so the grid is frozen from its first download on."""
    if not any(spec.get("type") == "hub" for spec in config["models"].values()):
        return
    for path in configfiles:
        for line in pin_config_file(path, paths.MODELS_DIR):
            print(f"{path}: {line}", file=sys.stderr)
