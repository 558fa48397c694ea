"""What the LAPT stage's rules (workflow/rules/lapt.smk) read: the packed blocks, the
checkpoint that lends them its tokenizer, the training settings, and the LAPT files the run
asks for. Functions of the validated config, importable and tested without Snakemake
(tests/test_rule_inputs.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from embtransfer.core import paths
from embtransfer.core.grid import lapt_runs

# Config keys that choose the runs rather than shape the training (not the rule's params).
SELECTION_KEYS = ("enabled", "select")


def block_texts(config: dict[str, Any]) -> str:
    """The `{text}` wildcard's alternatives: the splits, and the replay text when set."""
    return "train|valid" + ("|replay" if config["lapt"].get("replay") else "")


def training_settings(config: dict[str, Any]) -> dict[str, Any]:
    """The `lapt` section without the keys that choose the runs."""
    return {k: v for k, v in config["lapt"].items() if k not in SELECTION_KEYS}


def blocks_file(wildcards: Mapping[str, str], text: str) -> str:
    return paths.LAPT_BLOCKS.fill(**wildcards, text=text)


def blocks_tokenizer(config: dict[str, Any], wildcards: Mapping[str, str]) -> str:
    # Every method of a (language, source, target) writes the same tokenizer; the first
    # selected one lends it (the trainer checks each run's tokenizer hash against it).
    pair = (wildcards["lang"], wildcards["source"], wildcards["target"])
    run = next(r for r in lapt_runs(config) if (r.lang, r.source, r.target) == pair)
    return paths.TRANSFER_MODEL.fill(**{**dict(wildcards), "method": run.method, "seed": run.seed})


def blocks_text(config: dict[str, Any], wildcards: Mapping[str, str]) -> str:
    """The text of one blocks file: the language's split, or the replay language's."""
    if wildcards["text"] == "replay":
        return paths.CORPUS.fill(lang=config["lapt"]["replay"]["language"], split="train")
    return paths.CORPUS.fill(lang=wildcards["lang"], split=wildcards["text"])


def lapt_inputs(config: dict[str, Any], wildcards: Mapping[str, str]) -> dict[str, str]:
    """The lapt rule's inputs: the transferred checkpoint and its blocks files."""
    inputs = {
        "model": paths.TRANSFER_MODEL.fill(**wildcards),
        "train": blocks_file(wildcards, "train"),
        "valid": blocks_file(wildcards, "valid"),
    }
    if config["lapt"].get("replay"):
        inputs["replay"] = blocks_file(wildcards, "replay")
    return inputs


def all_lapt_metrics(config: dict[str, Any]) -> list[str]:
    return [paths.LAPT_METRICS.fill(**r._asdict()) for r in lapt_runs(config)]


def all_lapt(config: dict[str, Any]) -> list[str]:
    """Every LAPT checkpoint, then every LAPT run's metrics."""
    return [paths.LAPT_MODEL.fill(**r._asdict()) for r in lapt_runs(config)] + all_lapt_metrics(
        config
    )
