"""What the vocab stage's rules (workflow/rules/vocab.smk) read and the coverage files the
run asks for: functions of the validated config, importable and tested without Snakemake
(tests/test_rule_inputs.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from embtransfer.core import paths
from embtransfer.core.grid import real_pairs, seeds, target_pairs, world_pairs
from embtransfer.models.inputs import model_language, tokenizer_dir


def overlap_text(config: dict[str, Any], wildcards: Mapping[str, str]) -> str:
    """The held-out text the overlap's coverage is measured on: the target PLM's language."""
    return paths.CORPUS.fill(lang=model_language(config, wildcards["target"]), split="valid")


def all_coverage(config: dict[str, Any]) -> list[str]:
    """The coverage file of every (source, target) pair of the grid, once each."""
    return sorted({paths.COVERAGE.fill(source=s, target=t) for _, s, t in target_pairs(config)})


def shared_kinds_pairs(config: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The (language, source, target) pairs measured as the real ones are (rule
    shared_kinds): the miniature world's pairs, or every pair of a real-text run."""
    return world_pairs(config) + real_pairs(config)


def shared_kinds_inputs(config: dict[str, Any]) -> dict[str, Any]:
    """What the shared-token kinds of :func:`shared_kinds_pairs` read (rule shared_kinds):
    each pair's target vocabulary, overlap, tokenizer and held-out text, and the world when
    a pair's lexicon is the world's."""
    pairs = shared_kinds_pairs(config)
    inputs: dict[str, Any] = {
        "vocab": [paths.VOCAB.fill(model=t) for _, _, t in pairs],
        "overlap": [paths.OVERLAP.fill(source=s, target=t) for _, s, t in pairs],
        "tokenizer": [tokenizer_dir(config, t) for _, _, t in pairs],
        "valid": [paths.CORPUS.fill(lang=lang, split="valid") for lang, _, _ in pairs],
    }
    if world_pairs(config):
        inputs["world"] = paths.WORLD
    return inputs


def shared_kinds_params(config: dict[str, Any]) -> list[dict[str, str]]:
    """Per pair of :func:`shared_kinds_pairs`: its language, source and target, and its
    lexicon: ``world`` (the miniature world's words, names and foreign words) or
    ``wordfreq`` (a real language's, against the source's language, as
    analysis/real_shared_tokens.py measures the committed real figures)."""
    return [
        {"lang": lang, "source": source, "target": target,
         **lexicon_spec(config, lang, source, target)}
        for lang, source, target in shared_kinds_pairs(config)
    ]


def lexicon_spec(config: dict[str, Any], lang: str, source: str, target: str) -> dict[str, str]:
    """The lexicon the kinds of a pair's shared tokens are read with: ``world`` (a pair of the
    miniature world) or ``wordfreq`` (a real language's, against the source's language,
    English where the config names none)."""
    world = (lang, source, target) in set(world_pairs(config))
    return {"lexicon": "world" if world else "wordfreq",
            "other": config["models"][source].get("language") or "en"}


def holdout_share(config: dict[str, Any], lang: str | None = None) -> float | None:
    """The share of ``lang``'s shared tokens held out: ``transfer.holdout.by_language``'s
    entry, else ``transfer.holdout.share``; None where the run holds no shared token out."""
    holdout = config["transfer"].get("holdout")
    if not holdout:
        return None
    return float((holdout.get("by_language") or {}).get(lang, holdout["share"]))


def all_holdout(config: dict[str, Any]) -> list[str]:
    """The held-out split of every (language, source, target) pair, per replicate seed,
    where ``transfer.holdout`` is set."""
    if holdout_share(config) is None:
        return []
    return [paths.HOLDOUT_COUNTS.fill(lang=lang, source=s, target=t, seed=seed)
            for seed in seeds(config) for lang, s, t in target_pairs(config)]


def holdout_inputs(config: dict[str, Any], wildcards: Mapping[str, str]) -> dict[str, str]:
    """What one pair's held-out split reads: the target vocabulary, the overlap, and the
    world where the pair's lexicon is the world's."""
    inputs = {"target_vocab": paths.VOCAB.fill(model=wildcards["target"]),
              "overlap": paths.OVERLAP.fill(**wildcards)}
    spec = lexicon_spec(config, wildcards["lang"], wildcards["source"], wildcards["target"])
    if spec["lexicon"] == "world":
        inputs["world"] = paths.WORLD
    return inputs


def all_shared_kinds(config: dict[str, Any]) -> list[str]:
    """The shared-token kinds file when the run has world pairs or is a real-text run
    (docs/calibration.md)."""
    return [paths.SHARED_KINDS] if shared_kinds_pairs(config) else []


def all_calibration(config: dict[str, Any]) -> list[str]:
    """The calibration table (rule calibration_table) where the run measures shared kinds."""
    return [paths.CALIBRATION_CSV, paths.CALIBRATION_MD] if all_shared_kinds(config) else []
