"""LoRA for LAPT (Yamaguchi et al.'s CVA setting), merged back into a plain checkpoint.

Adapters of rank ``r`` on every linear layer (PEFT's ``all-linear``: every
``nn.Linear`` except the output head), scaled by ``alpha / r``, with dropout on
their input; the input and output embeddings stay fully trainable, since the
new vocabulary's embeddings are what LAPT must adapt most. At the end the
adapters are folded into the weights (``W + (alpha / r) B A``) and the result is
an ordinary Hugging Face model: no PEFT needed to load it.

``int8`` loads the frozen base in 8-bit with bitsandbytes (CUDA only). An int8
weight cannot absorb an adapter exactly, so the merge reloads the base in full
precision from ``model_dir`` and applies the trained adapters and embeddings there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
from transformers import AutoModelForCausalLM, PreTrainedModel


def embedding_params(model: PreTrainedModel) -> list[torch.nn.Parameter]:
    """The input embedding matrix and, when not tied to it, the output one."""
    params = [model.get_input_embeddings().weight]
    out = model.get_output_embeddings()
    if out is not None and out.weight is not params[0]:
        params.append(out.weight)
    return params


def load_base(model_dir: str | Path, lora: dict[str, Any] | None,
              device: torch.device, attn_implementation: str | None = None) -> PreTrainedModel:
    """The model to train: fp32 weights, or an int8 base for an int8 LoRA run.

    ``attn_implementation`` ("sdpa", "eager", "flash_attention_2") as transformers takes it.
    """
    attn = {"attn_implementation": attn_implementation} if attn_implementation else {}
    if lora is not None and lora["int8"]:
        if device.type != "cuda":
            raise RuntimeError(
                "lapt.lora.int8 needs a CUDA device (bitsandbytes int8 kernels); set "
                "lapt.lora.int8: false to train LoRA on a full-precision base"
            )
        try:
            from transformers import BitsAndBytesConfig  # noqa: PLC0415 (optional dependency)
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise RuntimeError("lapt.lora.int8 needs bitsandbytes: pip install "
                               "'embtransfer[cuda]'") from exc

        model = AutoModelForCausalLM.from_pretrained(
            model_dir, quantization_config=BitsAndBytesConfig(load_in_8bit=True),
            device_map={"": device.index or 0}, **attn,
        )
        return prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, **attn).to(device)


def _lora_config(lora: dict[str, Any]) -> Any:
    return LoraConfig(
        r=int(lora["r"]), lora_alpha=float(lora["alpha"]), lora_dropout=float(lora["dropout"]),
        target_modules=lora["target_modules"], bias="none", task_type="CAUSAL_LM",
    )


def add_adapters(model: PreTrainedModel, lora: dict[str, Any]) -> Any:
    """Wrap ``model`` with LoRA adapters; base weights frozen, embeddings trainable."""
    base_embeddings = embedding_params(model)
    peft_model = get_peft_model(model, _lora_config(lora))
    if lora["train_embeddings"]:
        for p in base_embeddings:
            p.requires_grad_(True)
    return peft_model


def trained_state(peft_model: Any) -> dict[str, torch.Tensor]:
    """The tensors LoRA training changed: adapters and (if trained) embeddings, by name."""
    return {
        name: p.detach().clone()
        for name, p in peft_model.named_parameters()
        if p.requires_grad or "lora_" in name
    }


def merge(peft_model: Any, model_dir: str | Path, lora: dict[str, Any]) -> PreTrainedModel:
    """A plain model with the adapters folded in (``W + alpha/r * B @ A``)."""
    if not lora["int8"]:
        return peft_model.merge_and_unload()
    state = {k: v.float().cpu() for k, v in trained_state(peft_model).items()}
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    fresh = add_adapters(base, lora)
    params = dict(fresh.named_parameters())
    missing = sorted(set(state) - set(params))
    if missing:
        raise RuntimeError(f"LoRA merge: trained tensors {missing[:5]} have no counterpart")
    with torch.no_grad():
        for name, value in state.items():
            params[name].copy_(value)
    return fresh.merge_and_unload()
