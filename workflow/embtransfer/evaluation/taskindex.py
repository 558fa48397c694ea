"""The set of task names the installed lm-eval knows, cached on disk.

Building lm-eval's ``TaskManager`` index scans thousands of task YAMLs (about 4 s), too
slow to pay on every ``snakemake`` start (the config is validated at each one). The names
are cached in ``$EMBTRANSFER_CACHE`` (default ``$XDG_CACHE_HOME/embtransfer``, i.e.
``~/.cache/embtransfer``) as ``lm_eval_tasks-{version}-{hash of the package path}.json``,
written atomically; a new lm-eval version or install location rebuilds it. Configs without
stock tasks (the miniature world) never touch it.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path

from embtransfer.core.atomic import write_json


def cache_dir() -> Path:
    explicit = os.environ.get("EMBTRANSFER_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "embtransfer"


def _lm_eval_identity() -> tuple[str, str]:
    """(version, install path) of lm-eval, without importing it."""
    spec = find_spec("lm_eval")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("lm_eval is not installed")
    return metadata.version("lm_eval"), str(Path(spec.origin).parent)


def cache_file() -> Path:
    version, where = _lm_eval_identity()
    digest = hashlib.sha256(where.encode()).hexdigest()[:10]
    return cache_dir() / f"lm_eval_tasks-{version}-{digest}.json"


@cache
def stock_task_index() -> frozenset[str]:
    """Every task, group and tag name of the installed lm-eval (cached on disk)."""
    path = cache_file()
    if path.exists():
        try:
            return frozenset(json.loads(path.read_text())["names"])
        except (OSError, ValueError, KeyError):
            pass  # a corrupt cache is rebuilt
    from lm_eval.tasks import TaskManager  # noqa: PLC0415 (Snakefile start-up)

    names = sorted(TaskManager().all_tasks)
    version, where = _lm_eval_identity()
    try:
        write_json(path, {"lm_eval_version": version, "lm_eval_path": where, "names": names})
    except OSError:
        pass  # a read-only home: validate without caching
    return frozenset(names)
