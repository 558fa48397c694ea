"""The Hugging Face helpers' one home (embtransfer.models.hf)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import transformers as tf
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from embtransfer.models import hf


def _gemma3() -> tf.Gemma3Config:
    return tf.Gemma3Config(text_config={"max_position_embeddings": 96, "vocab_size": 50})


def test_text_config_of_dicts_configs_and_plain_objects():
    inner = {"vocab_size": 7}
    assert hf.text_config({"text_config": inner, "vocab_size": 1}) is inner
    plain = {"vocab_size": 3}
    assert hf.text_config(plain) is plain
    wrapper = _gemma3()
    assert hf.text_config(wrapper) is wrapper.text_config
    gpt2 = tf.GPT2Config()
    assert hf.text_config(gpt2) is gpt2
    obj = SimpleNamespace(text_config=SimpleNamespace(vocab_size=5))
    assert hf.text_config(obj) is obj.text_config
    assert hf.configs(gpt2) == [gpt2]
    assert hf.configs(wrapper) == [wrapper, wrapper.text_config]


def test_position_limit_reads_the_text_config_first():
    assert hf.position_limit(_gemma3()) == 96
    assert hf.position_limit(tf.GPT2Config(n_positions=40)) == 40
    assert hf.position_limit(SimpleNamespace(seq_length=12)) == 12
    # Keys outside the given ones are not read; zero or a non-integer is no limit.
    assert hf.position_limit(SimpleNamespace(seq_length=12), ("n_positions",)) is None
    assert hf.position_limit(SimpleNamespace(max_position_embeddings=0, n_ctx=8)) == 8
    assert hf.position_limit(SimpleNamespace(n_positions=2.0)) is None


def test_position_limit_falls_back_to_the_wrapper_only_when_asked():
    wrapper = SimpleNamespace(n_ctx=64, text_config=SimpleNamespace(max_position_embeddings=0))
    assert hf.position_limit(wrapper) == 64
    assert hf.position_limit(wrapper, wrapper=False) is None
    both = SimpleNamespace(n_ctx=64, text_config=SimpleNamespace(n_positions=32))
    assert hf.position_limit(both) == hf.position_limit(both, wrapper=False) == 32


def _word_tokenizer(vocab: dict[str, int]) -> PreTrainedTokenizerFast:
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")


def test_n_token_ids_counts_up_to_the_largest_id():
    assert hf.n_token_ids(_word_tokenizer({"[UNK]": 0, "a": 1, "b": 2})) == 3
    holes = _word_tokenizer({"[UNK]": 0, "a": 1, "b": 9})
    assert len(holes) == 3
    assert hf.n_token_ids(holes) == 10


def test_encode_texts_batches_like_one_call(monkeypatch):
    tok = _word_tokenizer({"[UNK]": 0, "a": 1, "b": 2, "c": 3})
    texts = ["a b", "c", "", "b b a", "x a"]
    expected = tok(texts, add_special_tokens=False)["input_ids"]
    assert hf.encode_texts(tok, texts) == expected
    monkeypatch.setattr(hf, "ENCODE_BATCH", 2)
    assert hf.encode_texts(tok, texts) == expected
    assert hf.encode_texts(tok.backend_tokenizer, texts) == expected

    def slow(batch: list[str], add_special_tokens: bool) -> dict:
        assert not add_special_tokens
        return {"input_ids": [[len(t)] for t in batch]}

    assert hf.encode_texts(slow, texts) == [[3], [1], [0], [5], [3]]


class _Model:
    def __init__(self, writes: bool):
        self.writes = writes
        self.kwargs: dict = {}

    def save_pretrained(self, directory: Path, **kwargs) -> None:
        self.kwargs = kwargs
        if self.writes:
            (Path(directory) / "model.safetensors").write_bytes(b"")


def test_save_safetensors_asks_transformers_4_and_checks_the_files(tmp_path, monkeypatch):
    model = tf.GPT2LMHeadModel(tf.GPT2Config(n_embd=8, n_layer=1, n_head=2, vocab_size=11))
    hf.save_safetensors(model, tmp_path / "real")
    assert (tmp_path / "real" / "model.safetensors").exists()

    # the module hf reads (another test may have left a different one in sys.modules)
    monkeypatch.setattr(hf, "transformers", SimpleNamespace(__version__="4.57.1"))
    fake = _Model(writes=True)
    hf.save_safetensors(fake, tmp_path)
    assert fake.kwargs == {"safe_serialization": True}
    monkeypatch.setattr(hf, "transformers", SimpleNamespace(__version__="5.0.0"))
    hf.save_safetensors(fake, tmp_path)
    assert fake.kwargs == {}
    with pytest.raises(RuntimeError, match="wrote no safetensors into"):
        hf.save_safetensors(_Model(writes=False), tmp_path / "empty")
