"""What the vocab stage's rules (workflow/rules/vocab.smk) read and the coverage files the
run asks for: functions of the validated config, importable and tested without Snakemake
(tests/test_rule_inputs.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from embtransfer.core import paths
from embtransfer.core.grid import target_pairs, world_pairs
from embtransfer.models.inputs import model_language, tokenizer_dir


def overlap_text(config: dict[str, Any], wildcards: Mapping[str, str]) -> str:
    """The held-out text the overlap's coverage is measured on: the target PLM's language."""
    return paths.CORPUS.fill(lang=model_language(config, wildcards["target"]), split="valid")


def all_coverage(config: dict[str, Any]) -> list[str]:
    """The coverage file of every (source, target) pair of the grid, once each."""
    return sorted({paths.COVERAGE.fill(source=s, target=t) for _, s, t in target_pairs(config)})


def shared_kinds_inputs(config: dict[str, Any]) -> dict[str, list[str]]:
    """What the shared-token kinds of the world's pairs read (rule shared_kinds)."""
    pairs = world_pairs(config)
    return {
        "vocab": [paths.VOCAB.fill(model=t) for _, _, t in pairs],
        "overlap": [paths.OVERLAP.fill(source=s, target=t) for _, s, t in pairs],
        "tokenizer": [tokenizer_dir(config, t) for _, _, t in pairs],
        "valid": [paths.CORPUS.fill(lang=lang, split="valid") for lang, _, _ in pairs],
    }


def all_shared_kinds(config: dict[str, Any]) -> list[str]:
    """The shared-token kinds file when the run has world pairs (docs/calibration.md)."""
    return [paths.SHARED_KINDS] if world_pairs(config) else []
