"""The neighbour tables the run asks for (workflow/rules/neighbors.smk): a function of the
validated config, importable and tested without Snakemake (tests/test_rule_inputs.py)."""

from __future__ import annotations

from typing import Any

from embtransfer.core import paths
from embtransfer.core.grid import seeds, target_pairs


def all_neighbors(config: dict[str, Any]) -> list[str]:
    """Every (language, source, target) pair's table, per vector space (`neighbors.vectors`),
    per replicate seed."""
    return [
        paths.NEIGHBORS.fill(lang=lang, source=s, target=t, vectors=v, seed=seed)
        for seed in seeds(config)
        for lang, s, t in target_pairs(config)
        for v in config["neighbors"]["vectors"]
    ]
