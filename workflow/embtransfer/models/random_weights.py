"""Models at a real model's shapes with random weights (config ``models.<key>.type: random``).

A source LLM at real scale costs what its shapes cost (a 262k-row vocabulary, a 1,152-wide
embedding), whatever its weights are: ``type: random`` builds one from a real tokenizer and
the architecture's sizes, seeded, so every stage of a real-scale run can be timed and
checked without downloading (or being licensed for) the weights. ``config/real_text.yaml``
builds Gemma 3 1B's embedding shapes around the real Gemma 3 tokenizer (docs/real_text.md).
"""

from __future__ import annotations

import os
from typing import Any

import torch

from embtransfer.core.atomic import atomic_path
from embtransfer.models.architectures import model_class, model_config
from embtransfer.models.loading import load_tokenizer

#: The families built with random weights (models/architectures.py builds their configs).
FAMILIES = ("gemma3", "gemma", "llama", "gpt2")
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def build_random_model(spec: dict[str, Any], tokenizer: Any, seed: int) -> Any:
    """The model ``spec`` describes (family, architecture, vocab_size, tie_word_embeddings,
    dtype), its rows sized for ``tokenizer``, weights drawn with ``seed``."""
    rows = spec.get("vocab_size") or len(tokenizer)
    if rows < len(tokenizer):
        raise ValueError(
            f"vocab_size {rows} is smaller than the tokenizer's {len(tokenizer)} "
            "ids: every id needs an embedding row"
        )
    common: dict[str, Any] = {
        "vocab_size": rows,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    if spec.get("tie_word_embeddings") is not None:
        common["tie_word_embeddings"] = spec["tie_word_embeddings"]
    family = spec["family"]
    if family not in FAMILIES:
        raise ValueError(
            f"unknown random-model family {family!r}; expected one of {', '.join(FAMILIES)}"
        )
    config = model_config(family, spec["architecture"], common)
    torch.manual_seed(seed)
    # drawn in float32, then cast: the same weights whatever dtype is saved
    model = model_class(family)(config)
    return model.to(DTYPES[spec.get("dtype", "bfloat16")])


def write_random_model(
    spec: dict[str, Any], tokenizer_dir: str | os.PathLike, out_dir: str | os.PathLike, seed: int
) -> dict[str, Any]:
    """Build the model, save it with its tokenizer as one checkpoint; its shapes."""
    tokenizer = load_tokenizer(tokenizer_dir)
    model = build_random_model(spec, tokenizer, seed)
    with atomic_path(out_dir, directory=True) as tmp:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
    rows, hidden = model.get_input_embeddings().weight.shape
    return {
        "rows": int(rows),
        "hidden": int(hidden),
        "tokenizer_ids": len(tokenizer),
        "parameters": sum(p.numel() for p in model.parameters()),
        "dtype": str(model.dtype).removeprefix("torch."),
    }
