"""Transferred models written as complete Hugging Face checkpoints
(embtransfer.transfer.transferred_model)."""

from __future__ import annotations

import logging
import random
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import transformers as tf

from embtransfer.core.atomic import NonFiniteError
from embtransfer.evaluation.alignment import score_checkpoints
from embtransfer.models.hf import n_token_ids
from embtransfer.models.loading import (
    NonFiniteEmbeddingsError,
    embedding_layout,
    load_embeddings,
    load_tokenizer,
    target_rows,
)
from embtransfer.models.tokenizer_training import special_token_ids, train_tokenizer
from embtransfer.transfer.transferred_model import checkpoint_summary, write_transferred_checkpoint
from embtransfer.vocab.extend import extend_tokenizer, new_target_tokens

H = 32
SOURCE_WORDS = ["the", "cat", "sat", "on", "mat", "house", "water", "river", "green", "42"]
TARGET_WORDS = ["người", "nước", "tiếng", "Việt", "đẹp", "trường", "học", "sông", "xanh", "42"]
TARGET_SENTENCE = "người Việt học tiếng Việt ở trường"


def _lines(words: list[str], n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 8))) + " ." for _ in range(n)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("corpus")
    # The source sees a little target text, as the miniature world's LLM does.
    texts = {
        "source": _lines(SOURCE_WORDS, 600, 0) + _lines(TARGET_WORDS, 20, 1),
        "target": _lines(TARGET_WORDS, 600, 2),
    }
    paths = {}
    for name, lines in texts.items():
        (out / f"{name}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        paths[name] = str(out / f"{name}.txt")
    return paths


# name -> (tokenizer algorithm, tokenizer family, model builder, tied, dtype)
def _llama(v: int, ids: dict, tie: bool) -> tf.PreTrainedModel:
    cfg = tf.LlamaConfig(
        hidden_size=H,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        vocab_size=v,
        tie_word_embeddings=tie,
        **ids,
    )
    return tf.LlamaForCausalLM(cfg)


BUILDERS = {
    "gpt2": lambda v, ids: tf.GPT2LMHeadModel(
        tf.GPT2Config(n_embd=H, n_layer=1, n_head=2, n_positions=128, vocab_size=v, **ids)
    ),
    "gpt2_untied": lambda v, ids: tf.GPT2LMHeadModel(
        tf.GPT2Config(
            n_embd=H,
            n_layer=1,
            n_head=2,
            n_positions=128,
            vocab_size=v,
            tie_word_embeddings=False,
            **ids,
        )
    ),
    "gemma": lambda v, ids: tf.GemmaForCausalLM(
        tf.GemmaConfig(
            hidden_size=H,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=16,
            max_position_embeddings=128,
            vocab_size=v,
            **ids,
        )
    ),
    "llama": lambda v, ids: _llama(v, ids, False),
    "xglm": lambda v, ids: tf.XGLMForCausalLM(
        tf.XGLMConfig(
            d_model=H,
            ffn_dim=64,
            num_layers=1,
            attention_heads=2,
            max_position_embeddings=128,
            vocab_size=v,
            decoder_start_token_id=ids["eos_token_id"],
            **ids,
        )
    ),
    "bloom": lambda v, ids: tf.BloomForCausalLM(
        tf.BloomConfig(hidden_size=H, n_layer=1, n_head=2, vocab_size=v, **ids)
    ),
    "mistral": lambda v, ids: tf.MistralForCausalLM(
        tf.MistralConfig(
            hidden_size=H,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=128,
            vocab_size=v,
            **ids,
        )
    ),
    "gptj": lambda v, ids: tf.GPTJForCausalLM(
        tf.GPTJConfig(
            n_embd=H, n_layer=1, n_head=2, rotary_dim=8, n_positions=128, vocab_size=v, **ids
        )
    ),
}
SOURCES = {
    "gpt2": ("bytelevel_bpe", "gpt2", True, torch.float32),
    "gpt2_untied": ("bytelevel_bpe", "gpt2", False, torch.float32),
    "gemma": ("sentencepiece_bpe", "gemma", True, torch.float32),
    "llama": ("bytelevel_bpe", "llama", False, torch.float32),  # Llama 3 style tokenizer
    "xglm": ("sentencepiece_bpe", "xglm", True, torch.float32),
    "bloom": ("bytelevel_bpe", "xglm", True, torch.float32),
    "mistral": ("sentencepiece_bpe", "llama", False, torch.bfloat16),  # a bf16 source
    "gptj": ("bytelevel_bpe", "gpt2", False, torch.float32),  # untied head with a bias
}
TARGETS = {
    "gpt2": ("bytelevel_bpe", "gpt2"),
    "bert": ("wordpiece", "bert"),
    "t5": ("unigram", "t5"),
}


@pytest.fixture(scope="module")
def sources(corpus, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sources")
    out = {}
    for name, (algorithm, family, tied, dtype) in SOURCES.items():
        tok = train_tokenizer(algorithm, [corpus["source"]], 320, family)
        ids = {
            k: v
            for k, v in special_token_ids(tok).items()
            if k in ("bos_token_id", "eos_token_id", "pad_token_id")
        }
        torch.manual_seed(0)
        model = BUILDERS[name](len(tok), ids).to(dtype)
        head, emb = model.get_output_embeddings(), model.get_input_embeddings()
        assert (head.weight is emb.weight) == tied, name
        if getattr(head, "bias", None) is not None:
            torch.nn.init.normal_(head.bias)  # a bias that is not already zero
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
        out[name] = root / name
    return out


@pytest.fixture(scope="module")
def targets(corpus, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("targets")
    out = {}
    for name, (algorithm, family) in TARGETS.items():
        train_tokenizer(algorithm, [corpus["target"]], 300, family).save_pretrained(root / name)
        out[name] = root / name
    return out


@contextmanager
def transformers_warnings() -> Iterator[list[str]]:
    """Collect every transformers log record at WARNING or above, and Python warnings."""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    handler = Collect(level=logging.WARNING)
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield messages
        messages.extend(str(w.message) for w in caught)
    finally:
        logger.removeHandler(handler)


def _load_model(path: Path) -> tf.PreTrainedModel:
    """Load a checkpoint, failing on any missing/unexpected weight or any warning."""
    with transformers_warnings() as messages:
        model, info = tf.AutoModelForCausalLM.from_pretrained(
            path, dtype="auto", output_loading_info=True
        )
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    assert not info["error_msgs"]
    assert messages == [], messages
    return model


def _load(path: Path) -> tuple[tf.PreTrainedModel, object]:
    model = _load_model(path)
    with transformers_warnings() as messages:
        tok = tf.AutoTokenizer.from_pretrained(path)
    assert messages == [], messages
    return model, tok


def _random_rows(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 0.02, (n, H)).astype(np.float32)


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("source", list(SOURCES))
def test_replace_checkpoint_loads_cleanly(sources, targets, source, target, tmp_path):
    _, _, tied, dtype = SOURCES[source]
    ttok = load_tokenizer(targets[target])
    n = len(ttok)
    inp = _random_rows(n, 1)
    out = None if tied else _random_rows(n, 2)
    record = write_transferred_checkpoint(
        sources[source], targets[target], inp, out, tmp_path / "ckpt", metadata={"method": "random"}
    )
    assert record["method"] == "random" and record["checkpoint"]["tied"] is tied

    model, tok = _load(tmp_path / "ckpt")
    emb = model.get_input_embeddings().weight
    assert emb.dtype == dtype and emb.shape == (n, H)
    assert torch.equal(emb, torch.from_numpy(inp).to(dtype))
    head = model.get_output_embeddings()
    if tied:
        assert head.weight is emb
    else:
        assert torch.equal(head.weight, torch.from_numpy(out).to(dtype))
    if getattr(head, "bias", None) is not None:
        assert torch.equal(head.bias, torch.zeros(n, dtype=dtype))
    assert load_embeddings(tmp_path / "ckpt").tied is tied

    # Config and generation config agree with the target tokenizer, by role.
    cfg = model.config
    assert cfg.vocab_size == len(tok) == n and cfg.tie_word_embeddings is tied
    eos = tok.eos_token_id if tok.eos_token_id is not None else tok.sep_token_id
    bos = tok.bos_token_id if tok.bos_token_id is not None else tok.cls_token_id
    if bos is None and cfg.model_type in ("gpt2", "gptj"):
        bos = eos
    assert (cfg.bos_token_id, cfg.eos_token_id, cfg.pad_token_id) == (bos, eos, tok.pad_token_id)
    gen = model.generation_config
    assert (gen.bos_token_id, gen.eos_token_id, gen.pad_token_id) == (bos, eos, tok.pad_token_id)
    if getattr(cfg, "decoder_start_token_id", None) is not None:
        assert cfg.decoder_start_token_id == eos  # XGLM starts with </s>
    limit = getattr(cfg, "max_position_embeddings", None)
    assert tok.model_max_length <= (limit or 1024)  # capped at the model's positions
    summary = checkpoint_summary(tmp_path / "ckpt")
    assert summary["vocab_size"] == summary["tokenizer_size"] == n
    assert summary["dtype"] == str(dtype).removeprefix("torch.")

    ids = tok(TARGET_SENTENCE, return_tensors="pt")
    with transformers_warnings():  # generate() may note that pad falls back to eos
        gen_ids = model.generate(**ids, max_new_tokens=5, do_sample=False)
    assert ids["input_ids"].shape[1] < gen_ids.shape[1] <= ids["input_ids"].shape[1] + 5

    # A save/load round trip of the reloaded model keeps the tie (or the separate head).
    model.save_pretrained(tmp_path / "again")
    again = _load_model(tmp_path / "again")
    tied_again = again.get_output_embeddings().weight is again.get_input_embeddings().weight
    assert tied_again is tied
    assert torch.equal(again.get_output_embeddings().weight, head.weight)


def test_tied_and_untied_rows_are_checked(sources, targets, tmp_path):
    n = len(load_tokenizer(targets["gpt2"]))
    with pytest.raises(ValueError, match="tied"):
        write_transferred_checkpoint(
            sources["gpt2"], targets["gpt2"], _random_rows(n, 0), _random_rows(n, 1), tmp_path / "a"
        )
    with pytest.raises(ValueError, match="untied"):
        write_transferred_checkpoint(
            sources["llama"], targets["gpt2"], _random_rows(n, 0), None, tmp_path / "b"
        )
    with pytest.raises(ValueError, match="shape"):
        write_transferred_checkpoint(
            sources["gpt2"], targets["gpt2"], _random_rows(n - 1, 0), None, tmp_path / "c"
        )
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("side", ["input", "output"])
def test_nan_rows_are_refused_naming_ids(sources, targets, tmp_path, side):
    n = len(load_tokenizer(targets["t5"]))
    inp, out = _random_rows(n, 0), _random_rows(n, 1)
    rows = inp if side == "input" else out
    rows[7] = np.nan
    rows[41, 3] = np.inf
    with pytest.raises(NonFiniteError, match=r"token ids \[7, 41\]") as err:
        write_transferred_checkpoint(sources["llama"], targets["t5"], inp, out, tmp_path / "x")
    assert f"{side}_rows" in str(err.value)
    assert not (tmp_path / "x").exists()
    assert list(tmp_path.iterdir()) == []  # no temporary directory left behind


# ---------------------------------------------------------------- extend mode


@pytest.mark.parametrize("source", ["gpt2", "llama", "gptj"])
def test_extend_appends_rows_and_tokens(sources, targets, source, tmp_path):
    stok, ttok = load_tokenizer(sources[source]), load_tokenizer(targets["gpt2"])
    new_target = new_target_tokens(stok, ttok)
    assert new_target, "the target must have tokens the source lacks"
    before = load_embeddings(sources[source])
    k, n_src = len(new_target), len(stok)
    inp = _random_rows(k, 3)
    out = None if before.tied else _random_rows(k, 4)
    record = write_transferred_checkpoint(
        sources[source],
        targets["gpt2"],
        inp,
        out,
        tmp_path / "ext",
        mode="extend",
        new_target_ids=new_target,
    )
    assert record["checkpoint"]["new_rows"] == k

    model, tok = _load(tmp_path / "ext")
    assert len(tok) == model.config.vocab_size == n_src + k
    emb = model.get_input_embeddings().weight.detach()
    assert torch.equal(emb[:n_src], torch.from_numpy(before.input[:n_src]))
    assert torch.equal(emb[n_src:], torch.from_numpy(inp))
    head = model.get_output_embeddings()
    if before.tied:
        assert head.weight is model.get_input_embeddings().weight
    else:
        assert torch.equal(head.weight[:n_src], torch.from_numpy(before.output[:n_src]))
        assert torch.equal(head.weight[n_src:], torch.from_numpy(out))
    if getattr(head, "bias", None) is not None:
        old = tf.AutoModelForCausalLM.from_pretrained(sources[source]).lm_head.bias
        assert torch.equal(head.bias[:n_src], old)
        assert torch.allclose(head.bias[n_src:], old.mean().expand(k))
    # Source special ids are untouched.
    src_cfg = tf.AutoConfig.from_pretrained(sources[source])
    assert model.config.eos_token_id == src_cfg.eos_token_id == tok.eos_token_id

    # The extended tokenizer produces new tokens by ordinary tokenisation, losslessly.
    ids = tok(TARGET_SENTENCE, add_special_tokens=False)["input_ids"]
    assert any(i >= n_src for i in ids)
    assert tok.decode(ids) == TARGET_SENTENCE
    assert len(ids) < len(stok(TARGET_SENTENCE, add_special_tokens=False)["input_ids"])
    assert not tok.added_tokens_decoder.keys() - stok.added_tokens_decoder.keys()
    # Source text tokenises exactly as before.
    text = "the cat sat on the green mat ."
    assert tok(text)["input_ids"] == stok(text)["input_ids"]
    model.generate(**tok(TARGET_SENTENCE, return_tensors="pt"), max_new_tokens=5)


def test_extend_tokenizer_refusals(sources, targets):
    gpt2, gemma = load_tokenizer(sources["gpt2"]), load_tokenizer(sources["gemma"])
    target = load_tokenizer(targets["gpt2"])
    with pytest.raises(ValueError, match=r"source sentencepiece/BPE, target byte_level/BPE"):
        extend_tokenizer(gemma, target, [300])
    with pytest.raises(ValueError, match="target wordpiece/WordPiece"):
        extend_tokenizer(gpt2, load_tokenizer(targets["bert"]), [30])
    shared = target.convert_tokens_to_ids("Ġ.")  # in both vocabularies
    with pytest.raises(ValueError, match="already in the source"):
        extend_tokenizer(gpt2, target, [shared])
    with pytest.raises(ValueError, match="special"):
        extend_tokenizer(gpt2, target, [target.eos_token_id])
    new = new_target_tokens(gpt2, target)
    tok, new_ids = extend_tokenizer(gpt2, target, new[:3])
    assert new_ids == [len(gpt2), len(gpt2) + 1, len(gpt2) + 2]
    assert tok.convert_ids_to_tokens(new_ids) == target.convert_ids_to_tokens(new[:3])


def test_rows_overflowing_the_source_dtype_are_refused(sources, targets, tmp_path):
    n = len(load_tokenizer(targets["bert"]))
    inp, out = _random_rows(n, 0).astype(np.float64), _random_rows(n, 1)
    inp[5, 0] = 1e300  # finite in float64, Inf in the bf16 source
    with pytest.raises(NonFiniteError, match=r"after casting to torch.bfloat16.*token ids \[5\]"):
        write_transferred_checkpoint(sources["mistral"], targets["bert"], inp, out, tmp_path / "x")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- reading the source cheaply


def _stored_head_equal_to_input(source: Path, out: Path) -> Path:
    """A copy of a tied checkpoint that also stores its head, equal to the input rows."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(source, out)
    state = load_file(out / "model.safetensors")
    state["lm_head.weight"] = state["transformer.wte.weight"].clone()
    save_file(state, out / "model.safetensors", metadata={"format": "pt"})
    return out


def test_embedding_layout_agrees_with_load_embeddings(sources, tmp_path):
    cases = dict(sources)
    cases["gpt2_head_stored"] = _stored_head_equal_to_input(sources["gpt2"], tmp_path / "g")
    for name, path in cases.items():
        full, layout = load_embeddings(path), embedding_layout(path)
        assert (layout.rows, layout.width, layout.tied, layout.input_name) == (
            full.vocab_rows,
            full.input.shape[1],
            full.tied,
            full.input_name,
        ), name


def test_extend_refuses_a_source_whose_kept_rows_hold_nan(sources, targets, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    source = shutil.copytree(sources["llama"], tmp_path / "src")
    state = load_file(source / "model.safetensors")
    state["lm_head.weight"][5, 0] = float("nan")
    save_file(state, source / "model.safetensors", metadata={"format": "pt"})
    stok, ttok = load_tokenizer(source), load_tokenizer(targets["gpt2"])
    new = new_target_tokens(stok, ttok)
    message = r"output embeddings hold NaN/Inf .*token ids \[5\]"
    with pytest.raises(NonFiniteEmbeddingsError, match=message):
        write_transferred_checkpoint(
            source,
            targets["gpt2"],
            _random_rows(len(new), 0),
            _random_rows(len(new), 1),
            tmp_path / "x",
            mode="extend",
            new_target_ids=new,
        )
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_nonfinite_rows_equals_a_check_of_every_value(dtype):
    from embtransfer.models.loading import nonfinite_rows

    rng = np.random.default_rng(3)
    matrix = rng.standard_normal((1000, 17)).astype(dtype)
    big = np.finfo(dtype).max
    matrix[rng.choice(1000, 30, replace=False), rng.integers(0, 17, 30)] = np.nan
    matrix[rng.choice(1000, 30, replace=False), rng.integers(0, 17, 30)] = np.inf
    matrix[rng.choice(1000, 30, replace=False), rng.integers(0, 17, 30)] = -np.inf
    matrix[rng.choice(1000, 40, replace=False), :3] = big  # finite rows whose sum overflows
    matrix[7, :2] = [np.inf, -np.inf]  # Inf - Inf: a NaN sum
    expected = np.flatnonzero(~np.isfinite(matrix).all(axis=1))
    for block_rows in (1, 64, 65536):
        assert np.array_equal(nonfinite_rows(matrix, block_rows), expected)
    assert nonfinite_rows(matrix[:0]).size == 0


@pytest.mark.parametrize("mode", ["extend", "replace"])
def test_alignment_reads_each_target_tokens_own_row(sources, targets, tmp_path, mode):
    """An extended checkpoint holds the source's ids, then the target tokens it lacks: the
    alignment scoring finds each target token's row by the token, not at its target id
    (which, in an extended model, is some source token's row). Each new token's row is set
    to the source row its truth names: every token retrieves it at rank 1, in either mode."""
    stok, ttok = load_tokenizer(sources["llama"]), load_tokenizer(targets["gpt2"])
    source = load_embeddings(sources["llama"])
    new = new_target_tokens(stok, ttok)
    rng = np.random.default_rng(0)
    meaning = rng.choice(np.arange(10, source.vocab_rows), len(new), replace=False)
    if mode == "extend":
        rows_in, rows_out, kwargs = source.input[meaning], source.output[meaning], {
            "new_target_ids": new}
    else:
        n = n_token_ids(ttok)
        rows_in = _random_rows(n, 5)
        rows_out = _random_rows(n, 6)
        rows_in[new], rows_out[new] = source.input[meaning], source.output[meaning]
        kwargs = {}
    write_transferred_checkpoint(sources["llama"], targets["gpt2"], rows_in, rows_out,
                                 tmp_path / "ckpt", mode=mode, **kwargs)
    truth = pd.DataFrame({"target_id": new, "source_ids": [np.array([m]) for m in meaning],
                          "shared": False, "split": "test"})
    vocab = pd.DataFrame({"id": np.arange(source.vocab_rows), "kind": "normal"})
    scores = score_checkpoints(source, vocab, truth,
                               {"m": target_rows(tmp_path / "ckpt", targets["gpt2"])})
    assert set(scores["side"]) == {"input", "output"}
    assert scores["hit_1"].tolist() == [1] * (2 * len(new))
