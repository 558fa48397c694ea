"""What the models stage's rules (workflow/rules/models.smk) read, and where every other
stage finds a model or its tokenizer: functions of the validated config, importable and
tested without Snakemake (tests/test_rule_inputs.py)."""

from __future__ import annotations

from typing import Any

from embtransfer.core import paths
from embtransfer.core.errors import ConfigError
from embtransfer.core.grid import target_model


def model_dir(config: dict[str, Any], model: str) -> str:
    """A model's directory: a local model's own path, else its snapshot under resources/."""
    spec = config["models"][model]
    return spec["path"] if spec["type"] == "local" else paths.MODEL.fill(model=model)


def tokenizer_dir(config: dict[str, Any], model: str) -> str:
    # Miniature models get their tokenizer before pretraining, so the vocabulary
    # stages (and the neighbour tables) need not wait for the model.
    if config["models"][model]["type"] == "mini":
        return paths.TOKENIZER.fill(model=model)
    return model_dir(config, model)


def model_language(config: dict[str, Any], model: str) -> str:
    """The language a model was trained on: its `language` key, else its targets entry."""
    if config["models"][model].get("language"):
        return config["models"][model]["language"]
    for lang, plms in config["targets"].items():
        if model in {target_model(name) for name in plms}:
            return lang
    raise ConfigError(f"model {model!r} has no language (set models.{model}.language)")


def pretraining_text(config: dict[str, Any], model: str) -> str:
    """A miniature model's pretraining text: its mix, else its language's training split."""
    spec = config["models"][model]
    if spec.get("mix"):
        return paths.MIX_CORPUS.fill(model=model)
    return paths.CORPUS.fill(lang=spec["language"], split="train")


def tokenizer_text(config: dict[str, Any], model: str) -> str:
    """The text a miniature model's tokenizer is trained on (`tokenizer.text`)."""
    spec = config["models"][model]
    if spec["tokenizer"].get("text") == "language":
        return paths.CORPUS.fill(lang=spec["language"], split="train")
    return pretraining_text(config, model)


def tokenizer_spec(config: dict[str, Any], model: str) -> dict[str, Any]:
    # Only what shapes the tokenizer: a change of architecture or training
    # budget must not retrain it (and rerun every vocabulary stage after it).
    return {k: config["models"][model][k] for k in ("family", "tokenizer", "language", "mix")}
