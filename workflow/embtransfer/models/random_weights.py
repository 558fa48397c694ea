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
import transformers

from embtransfer.core.atomic import atomic_path
from embtransfer.models.loading import load_tokenizer

#: family -> (config class, the model class it builds); Gemma 3 is its text-only model
FAMILIES: dict[str, tuple[type, type]] = {
    "gemma3": (transformers.Gemma3TextConfig, transformers.Gemma3ForCausalLM),
    "gemma": (transformers.GemmaConfig, transformers.GemmaForCausalLM),
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
    "gpt2": (transformers.GPT2Config, transformers.GPT2LMHeadModel),
}
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def model_config(family: str, architecture: dict[str, Any], common: dict[str, Any]) -> Any:
    """The family's Hugging Face config at these sizes (``common``: vocabulary, tying and
    special ids)."""
    if family not in FAMILIES:
        raise ValueError(
            f"unknown random-model family {family!r}; expected one of {', '.join(FAMILIES)}"
        )
    arch = architecture
    heads = arch["num_heads"]
    if family == "gpt2":
        return transformers.GPT2Config(
            n_embd=arch["hidden_size"],
            n_layer=arch["num_layers"],
            n_head=heads,
            n_inner=arch["intermediate_size"],
            n_positions=arch["max_position_embeddings"],
            **common,
        )
    return FAMILIES[family][0](
        hidden_size=arch["hidden_size"],
        intermediate_size=arch["intermediate_size"],
        num_hidden_layers=arch["num_layers"],
        num_attention_heads=heads,
        num_key_value_heads=arch.get("num_kv_heads") or heads,
        head_dim=arch.get("head_dim") or arch["hidden_size"] // heads,
        max_position_embeddings=arch["max_position_embeddings"],
        **common,
    )


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
    config = model_config(spec["family"], spec["architecture"], common)
    torch.manual_seed(seed)
    # drawn in float32, then cast: the same weights whatever dtype is saved
    model = FAMILIES[spec["family"]][1](config)
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
