"""The one builder of a Hugging Face config from an architecture dict.

Both kinds of model built here take their class and config from :func:`model_config`: the
tiny models pretrained here (:mod:`embtransfer.models.pretrain`) and the real-scale models
with random weights (:mod:`embtransfer.models.random_weights`). An architecture names its
sizes the same way for every family (``hidden_size``, ``num_layers``, ``num_heads``,
``num_kv_heads``, ``head_dim``, ``intermediate_size``, ``max_position_embeddings``,
``dropout``); each family's config spells them its own way.
"""

from __future__ import annotations

from typing import Any

import transformers

#: family -> (config class, the model class it builds); Gemma 3 is its text-only model.
FAMILIES: dict[str, tuple[type, type]] = {
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
    "gemma": (transformers.GemmaConfig, transformers.GemmaForCausalLM),
    "gemma3": (transformers.Gemma3TextConfig, transformers.Gemma3ForCausalLM),
    "gpt2": (transformers.GPT2Config, transformers.GPT2LMHeadModel),
    "xglm": (transformers.XGLMConfig, transformers.XGLMForCausalLM),
    "bert": (transformers.BertConfig, transformers.BertForMaskedLM),
    "t5": (transformers.T5Config, transformers.T5ForConditionalGeneration),
}
LLAMA_STYLE = ("llama", "gemma", "gemma3")


def _dropout(arch: dict[str, Any], *names: str) -> dict[str, float]:
    # An architecture without a dropout (a random-weight model's) keeps the class's own.
    return {} if arch.get("dropout") is None else dict.fromkeys(names, arch["dropout"])


def model_config(family: str, arch: dict[str, Any], common: dict[str, Any]) -> Any:
    """The family's Hugging Face config at ``arch``'s sizes; ``common`` holds what every
    family names alike (vocabulary size, tying, special ids)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown model family {family!r}; expected one of {', '.join(FAMILIES)}")
    cls = FAMILIES[family][0]
    h, heads, layers = arch["hidden_size"], arch["num_heads"], arch["num_layers"]
    ffn, positions = arch["intermediate_size"], arch["max_position_embeddings"]
    if family in LLAMA_STYLE:
        # Gemma's default head_dim is 256 whatever the width; a tiny model needs h/heads.
        return cls(
            hidden_size=h,
            intermediate_size=ffn,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=arch.get("num_kv_heads") or heads,
            head_dim=arch.get("head_dim") or h // heads,
            max_position_embeddings=positions,
            **_dropout(arch, "attention_dropout"),
            **common,
        )
    if family == "gpt2":
        return cls(
            n_embd=h,
            n_layer=layers,
            n_head=heads,
            n_inner=ffn,
            n_positions=positions,
            **_dropout(arch, "resid_pdrop", "embd_pdrop", "attn_pdrop"),
            **common,
        )
    if family == "xglm":
        return cls(
            d_model=h,
            ffn_dim=ffn,
            num_layers=layers,
            attention_heads=heads,
            max_position_embeddings=positions,
            **_dropout(arch, "dropout", "attention_dropout", "activation_dropout"),
            decoder_start_token_id=common.get("eos_token_id"),
            **common,
        )
    if family == "bert":
        return cls(
            hidden_size=h,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=ffn,
            max_position_embeddings=positions,
            **_dropout(arch, "hidden_dropout_prob", "attention_probs_dropout_prob"),
            **common,
        )
    # t5: tied is T5 v1.0 (relu), untied T5 v1.1 (gated-gelu), as on the hub.
    tied = common.get("tie_word_embeddings", True)
    return cls(
        d_model=h,
        d_kv=h // heads,
        d_ff=ffn,
        num_layers=layers,
        num_decoder_layers=layers,
        num_heads=heads,
        **_dropout(arch, "dropout_rate"),
        feed_forward_proj="relu" if tied else "gated-gelu",
        decoder_start_token_id=common.get("pad_token_id"),
        **common,
    )


def model_class(family: str) -> type:
    """The model class :func:`model_config`'s config for ``family`` builds."""
    return FAMILIES[family][1]
