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


def _chosen(run: Run, group: dict[str, Any]) -> bool:
    """Whether ``run`` is in ``group``: the product of its sources, targets and methods
    (a missing or null key = all of the grid's)."""
    return all(
        group.get(key) is None or value in group[key]
        for key, value in (("sources", run.source), ("targets", run.target),
                           ("methods", run.method))
    )


def _selected(runs: list[Run], groups: list[dict[str, Any]] | None) -> list[Run]:
    """The runs in the union of ``groups`` (all when there are none), in grid order."""
    groups = groups or [{}]
    return [run for run in runs if any(_chosen(run, g) for g in groups)]


def transfer_runs(config: dict[str, Any]) -> list[Run]:
    """Every transferred checkpoint: the union of ``transfer.select``'s groups of the product
    language x source x target PLM x method (no groups: the whole product)."""
    grid = [
        Run(lang, source, target, method)
        for lang, plms in config["targets"].items()
        for source in config["sources"]
        for target in plms
        for method in config["transfer"]["methods"]
    ]
    return _selected(grid, config["transfer"].get("select"))


def lapt_runs(config: dict[str, Any]) -> list[Run]:
    """The transferred checkpoints that are trained further: the union of ``lapt.select``'s
    groups (each a product of sources x targets x methods; null = all), in grid order.
    Empty when LAPT is disabled."""
    lapt = config.get("lapt", {})
    if not lapt.get("enabled", True):
        return []
    return _selected(transfer_runs(config), lapt.get("select"))
