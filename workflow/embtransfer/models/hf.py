"""Small helpers over Hugging Face configs, tokenizers and saves, written once here.

* :func:`text_config`: the language model's settings of a config, plain or wrapped
  (multimodal wrappers such as Gemma 3 keep them under ``text_config``).
* :func:`position_limit`: the most positions a model reads.
* :func:`n_token_ids`: the embedding rows a tokenizer's ids need.
* :func:`encode_texts`: token ids of many texts, batched through the Rust backend.
* :func:`save_safetensors`: ``save_pretrained`` as safetensors under transformers 4 and 5.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import transformers

#: Config fields that hold a model's position limit, in the order they are consulted.
POSITION_KEYS = ("max_position_embeddings", "n_positions", "seq_length", "n_ctx")

#: Texts per ``encode_batch`` call of :func:`encode_texts`.
ENCODE_BATCH = 4096


#: The config.json key under which a transferred checkpoint names its vocabulary mode
#: (``replace`` or ``extend``): it travels with the model into LAPT's checkpoints, and the
#: evaluation reads an extended checkpoint's rows by token (models.loading.target_rows).
VOCAB_MODE_KEY = "embtransfer_vocab_mode"


def text_config(config: Any) -> Any:
    """The language model's part of ``config``: its ``text_config`` where it has one.

    ``config`` is a ``config.json`` dict or a config object (``get_text_config()`` where
    the object has it, as every ``PretrainedConfig`` does, else a ``text_config``
    attribute); a plain config is its own text config.
    """
    if isinstance(config, dict):
        return config.get("text_config") or config
    if hasattr(config, "get_text_config"):
        return config.get_text_config()
    return getattr(config, "text_config", None) or config


def configs(config: Any) -> list[Any]:
    """``config`` and, for a multimodal wrapper, its text config after it."""
    text = text_config(config)
    return [config] if text is config else [config, text]


def position_limit(
    config: Any, keys: Sequence[str] = POSITION_KEYS, *, wrapper: bool = True
) -> int | None:
    """The first positive integer among ``keys`` in the text config; None if there is none.

    ``wrapper``: a multimodal wrapper's own fields are consulted after its text config's.
    """
    places = configs(config)[::-1]
    for cfg in places if wrapper else places[:1]:
        for key in keys:
            value = getattr(cfg, key, None)
            if isinstance(value, int) and value > 0:
                return value
    return None


def n_token_ids(tokenizer: Any) -> int:
    """Embedding rows a tokenizer needs: ids may have holes, so the largest id decides."""
    vocab = tokenizer.get_vocab()
    return max(len(tokenizer), (max(vocab.values()) + 1) if vocab else 0)


def encode_texts(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    """Token ids of each text, without added special tokens, in batches.

    ``tokenizer``: a transformers tokenizer (its Rust backend encodes when it has one) or
    a ``tokenizers.Tokenizer``.
    """
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    out: list[list[int]] = []
    for s in range(0, len(texts), ENCODE_BATCH):
        batch = texts[s : s + ENCODE_BATCH]
        if hasattr(backend, "encode_batch"):
            out.extend(e.ids for e in backend.encode_batch(batch, add_special_tokens=False))
        else:  # a slow transformers tokenizer
            out.extend(backend(batch, add_special_tokens=False)["input_ids"])
    return out


def save_safetensors(model: Any, directory: str | os.PathLike) -> None:
    """``model.save_pretrained(directory)`` as safetensors, refusing a save that wrote none.

    transformers 5 always writes safetensors and no longer takes the flag; 4.x needs asking.
    """
    major = int(transformers.__version__.split(".")[0])
    model.save_pretrained(directory, **({"safe_serialization": True} if major < 5 else {}))
    if not any(Path(directory).glob("*.safetensors")):
        raise RuntimeError(f"save_pretrained wrote no safetensors into {directory}")
