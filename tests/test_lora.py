"""LoRA LAPT: the merged checkpoint is the base plus the adapters, and loads as a plain model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from test_lapt import CFG, world  # noqa: F401  (module fixture: tiny models and corpora)
from transformers import AutoModelForCausalLM
from transformers.pytorch_utils import Conv1D

from embtransfer.lapt import lora as lora_mod
from embtransfer.lapt.settings import lora_settings
from embtransfer.lapt.trainer import train_lapt

LORA = {"r": 4, "alpha": 16, "dropout": 0.0}


def _randomised_adapters(model_dir: Path, settings: dict, seed: int = 0):
    """A PEFT model whose adapters (B starts at zero) and embeddings hold random values."""
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    torch.manual_seed(seed)  # PEFT draws lora_A from the global generator
    peft_model = lora_mod.add_adapters(base, lora_settings(settings))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_" in name or p.requires_grad:
                p.add_(0.05 * torch.randn(p.shape, generator=gen))
    return peft_model


def test_adapters_cover_every_linear_layer_but_the_head(world):  # noqa: F811
    peft_model = _randomised_adapters(world["llama"], LORA)
    adapted = {n.rsplit(".lora_A", 1)[0] for n, _ in peft_model.named_parameters()
               if ".lora_A." in n}
    base = AutoModelForCausalLM.from_pretrained(world["llama"])
    linear = {f"base_model.model.{n}" for n, m in base.named_modules()
              if isinstance(m, torch.nn.Linear) and n != "lm_head"}
    assert adapted == linear
    trainable = {n for n, p in peft_model.named_parameters() if p.requires_grad}
    assert "base_model.model.model.embed_tokens.weight" in trainable
    assert "base_model.model.lm_head.weight" in trainable  # untied Llama: its own head
    assert not any(n.endswith("q_proj.base_layer.weight") for n in trainable)


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_merge_equals_base_plus_scaled_low_rank_update(world, family, tmp_path):  # noqa: F811
    settings = lora_settings(LORA)
    peft_model = _randomised_adapters(world[family], settings)
    params = {n: p.detach().clone() for n, p in peft_model.named_parameters()}
    ids = torch.randint(0, 300, (2, 12), generator=torch.Generator().manual_seed(1))
    peft_model.eval()
    with torch.no_grad():
        expected_logits = peft_model(input_ids=ids).logits
    merged = lora_mod.merge(peft_model, world[family], settings)
    scale = settings["alpha"] / settings["r"]
    merged_params = dict(merged.named_parameters())
    modules = dict(merged.named_modules())
    n_checked = 0
    for name, a in params.items():
        if ".lora_A." not in name:
            continue
        prefix = name.split(".lora_A.")[0]
        b = params[f"{prefix}.lora_B.default.weight"]
        w = params[f"{prefix}.base_layer.weight"]
        plain = prefix.removeprefix("base_model.model.") + ".weight"
        delta = (b.double() @ a.double()) * scale
        if isinstance(modules[plain[: -len(".weight")]], Conv1D):
            delta = delta.T  # GPT-2's Conv1D stores W as (in, out)
        torch.testing.assert_close(merged_params[plain].double(), w.double() + delta,
                                   rtol=0, atol=1e-6)
        n_checked += 1
    assert n_checked > 0
    with torch.no_grad():
        torch.testing.assert_close(merged(input_ids=ids).logits, expected_logits,
                                   rtol=1e-4, atol=1e-4)
    # A plain checkpoint: no PEFT names, loads without PEFT, same outputs.
    merged.save_pretrained(tmp_path / "m")
    tensors = load_file(tmp_path / "m" / "model.safetensors")
    assert not any("lora" in k or "base_layer" in k for k in tensors)
    again = AutoModelForCausalLM.from_pretrained(tmp_path / "m").eval()
    with torch.no_grad():
        torch.testing.assert_close(again(input_ids=ids).logits, expected_logits,
                                   rtol=1e-4, atol=1e-4)


def test_int8_style_merge_by_reloading_the_base_agrees(world):  # noqa: F811
    # The int8 path folds the trained tensors into a freshly loaded fp32 base.
    settings = lora_settings(LORA)
    direct = lora_mod.merge(_randomised_adapters(world["llama"], settings), world["llama"],
                            settings)
    reloaded = lora_mod.merge(_randomised_adapters(world["llama"], settings), world["llama"],
                              {**settings, "int8": True})
    for (n1, p1), (n2, p2) in zip(direct.named_parameters(), reloaded.named_parameters(),
                                  strict=True):
        assert n1 == n2
        torch.testing.assert_close(p1, p2, rtol=0, atol=1e-6)


def test_int8_needs_cuda(world):  # noqa: F811
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    with pytest.raises(RuntimeError, match="lapt.lora.int8 needs a CUDA device"):
        lora_mod.load_base(world["llama"], lora_settings({"int8": True}),
                           torch.device("cpu"))


def test_lora_lapt_changes_weights_by_rank_r_only(world, tmp_path):  # noqa: F811
    out = tmp_path / "out"
    summary = train_lapt(world["llama"], world["train"], world["valid"], out,
                         {**CFG, "max_steps": 4, "lr": 1e-2, "lora": LORA}, seed=3,
                         log=lambda s: None)
    assert summary["config"]["lora"]["r"] == 4
    before, after = load_file(world["llama"] / "model.safetensors"), load_file(
        out / "model.safetensors")
    assert before.keys() == after.keys()  # a plain checkpoint with the base's tensor names
    assert not torch.equal(before["model.embed_tokens.weight"], after["model.embed_tokens.weight"])
    n_linear = 0
    for name, w in before.items():
        if w.ndim != 2 or "embed" in name or name == "lm_head.weight":
            continue
        delta = (after[name] - w).double().numpy()
        assert np.abs(delta).max() > 0, name
        assert np.linalg.matrix_rank(delta, tol=1e-6 * np.abs(delta).max()) <= 4, name
        n_linear += 1
    assert n_linear > 0
    assert json.loads((out / "lapt.json").read_text())["status"] == "done"
    assert AutoModelForCausalLM.from_pretrained(out) is not None


def test_lora_resume_equals_straight(world, tmp_path):  # noqa: F811
    cfg = {**CFG, "max_steps": 6, "lr": 1e-2, "lora": {**LORA, "dropout": 0.1}}
    straight, resumed = tmp_path / "a", tmp_path / "b"
    train_lapt(world["llama"], world["train"], world["valid"], straight, cfg, seed=3,
               log=lambda s: None)
    first = train_lapt(world["llama"], world["train"], world["valid"], resumed, cfg, seed=3,
                       log=lambda s: None, stop_after_steps=3)
    assert first["status"] == "stopped"
    train_lapt(world["llama"], world["train"], world["valid"], resumed, cfg, seed=3,
               log=lambda s: None)
    wa, wb = load_file(straight / "model.safetensors"), load_file(resumed / "model.safetensors")
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
