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
    """The transferred checkpoints that are trained further: the union of ``lapt.select``'s
    groups (each a product of sources x targets x methods; null = all), in grid order.
    Empty when LAPT is disabled."""
    lapt = config.get("lapt", {})
    if not lapt.get("enabled", True):
        return []
    groups = lapt.get("select") or [{}]

    def chosen(run: Run, group: dict[str, Any]) -> bool:
        return all(
            group.get(key) is None or value in group[key]
            for key, value in (("sources", run.source), ("targets", run.target),
                               ("methods", run.method))
        )

    return [run for run in transfer_runs(config) if any(chosen(run, g) for g in groups)]
