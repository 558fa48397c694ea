"""What the fastText stage's rules (workflow/rules/fasttext.smk) read, and where the other
stages find a language's word vectors: functions of the validated config, importable and
tested without Snakemake (tests/test_rule_inputs.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from embtransfer.core import paths
from embtransfer.core.grid import primary_seed


def fasttext_word_bin(config: dict[str, Any], lang: str, seed: int | str | None = None) -> str:
    """A language's word-level fastText model: a file of the user's, crawl vectors, or
    vectors trained here on its corpus with replicate ``seed`` (None: the primary)."""
    spec = config["languages"][lang]["fasttext"]
    if spec["type"] == "file":
        return spec["path"]
    if spec["type"] == "crawl":
        return paths.FASTTEXT_CRAWL.fill(code=spec.get("code", lang))
    return paths.FASTTEXT_WORD.fill(lang=lang, seed=primary_seed(config) if seed is None else seed)


def fasttext_bin(config: dict[str, Any], wildcards: Mapping[str, str]) -> str:
    """The fastText model the token_vectors rule reads: word- or token-level."""
    if wildcards["vectors"] == "word":
        return fasttext_word_bin(config, wildcards["lang"], wildcards["seed"])
    return paths.FASTTEXT_TOKEN.fill(**wildcards)
