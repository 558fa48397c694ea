"""The experiment grid: which (language, source, target PLM, method) runs each stage makes.

One place for the selection, so the rules, the report and the dry-run tests agree
on what exists.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class Run(NamedTuple):
    lang: str
    source: str
    target: str
    method: str


def transfer_runs(config: dict[str, Any]) -> list[Run]:
    """Every transferred checkpoint: each language x source x target PLM x method."""
    return [
        Run(lang, source, target, method)
        for lang, plms in config["targets"].items()
        for source in config["sources"]
        for target in plms
        for method in config["transfer"]["methods"]
    ]


def lapt_runs(config: dict[str, Any]) -> list[Run]:
    """The transferred checkpoints that are trained further (``lapt.sources/targets/methods``;
    null selects all). Empty when LAPT is disabled."""
    lapt = config.get("lapt", {})
    if not lapt.get("enabled", True):
        return []

    def keep(value: str, key: str) -> bool:
        chosen = lapt.get(key)
        return chosen is None or value in chosen

    return [
        run
        for run in transfer_runs(config)
        if keep(run.source, "sources") and keep(run.target, "targets")
        and keep(run.method, "methods")
    ]
