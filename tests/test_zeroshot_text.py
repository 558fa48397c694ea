"""Held-out loss, bits per byte and fertility (embtransfer.evaluation.zeroshot)."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import transformers as tf
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from embtransfer.evaluation.zeroshot import evaluate_text, fertility
from embtransfer.models.tokenizer_training import train_tokenizer

WORDS = ["người", "nước", "tiếng", "Việt", "đẹp", "trường", "học", "sông", "xanh", "42"]
LINES = ["người Việt học tiếng Việt", "", "sông xanh 42 đẹp .", "   ",
         "trường học nước Việt người sông xanh đẹp tiếng học", "Việt"]


@pytest.fixture(scope="module")
def text_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("text") / "valid.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module", params=["gpt2", "bert", "t5"])
def model_dir(request, tmp_path_factory) -> Path:
    """A tiny random GPT-2 with a byte-level BPE, or a Llama with a WordPiece (cls/sep act
    as bos/eos) or a Unigram (no bos: sequences start with eos)."""
    out = tmp_path_factory.mktemp(request.param)
    train = out / "train.txt"
    rng = random.Random(0)
    train.write_text("\n".join(" ".join(rng.choices(WORDS, k=6)) for _ in range(300)),
                     encoding="utf-8")
    algorithm = {"gpt2": "bytelevel_bpe", "bert": "wordpiece", "t5": "unigram"}[request.param]
    tok = train_tokenizer(algorithm, [str(train)], 300, request.param)
    torch.manual_seed(0)
    if request.param == "gpt2":
        model = tf.GPT2LMHeadModel(tf.GPT2Config(
            n_embd=32, n_layer=1, n_head=2, n_positions=64, vocab_size=len(tok),
            bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id))
    else:
        model = tf.LlamaForCausalLM(tf.LlamaConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
            max_position_embeddings=64, vocab_size=len(tok), pad_token_id=tok.pad_token_id))
    # Larger weights than the init give a loss far from log(V), so errors show.
    with torch.no_grad():
        model.get_input_embeddings().weight.normal_(0, 1.0)
    model.save_pretrained(out / "model")
    tok.save_pretrained(out / "model")
    return out / "model"


def _hand_nll(model_dir: Path, max_length: int) -> tuple[float, int]:
    """Total NLL (nats) and token count, computed one packed sequence at a time, in float32."""
    tok = tf.AutoTokenizer.from_pretrained(model_dir)
    model = tf.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    first = next(i for i in (tok.bos_token_id, tok.cls_token_id, tok.eos_token_id)
                 if i is not None)
    sep = tok.eos_token_id if tok.eos_token_id is not None else tok.sep_token_id
    stream: list[tuple[int, bool]] = []
    for line in LINES:
        if line.strip():
            stream += [(i, True) for i in tok(line, add_special_tokens=False)["input_ids"]]
            stream.append((sep, False))
    total, count = 0.0, 0
    for start in range(0, len(stream), max_length - 1):
        chunk = stream[start : start + max_length - 1]
        ids = torch.tensor([[first] + [i for i, _ in chunk]])
        with torch.no_grad():
            logits = model(ids).logits[0]
        labels = torch.tensor([i if keep else -100 for i, keep in chunk])
        total += F.cross_entropy(logits[:-1], labels, ignore_index=-100, reduction="sum").item()
        count += sum(keep for _, keep in chunk)
    return total, count


@pytest.mark.parametrize("max_length,batch_size", [(64, 8), (7, 3)])
def test_loss_and_bits_per_byte_match_hand_computation(model_dir, text_file, max_length,
                                                       batch_size):
    result = evaluate_text(model_dir, text_file, max_length=max_length,
                           batch_size=batch_size, device="cpu")
    nll, count = _hand_nll(model_dir, max_length)
    n_bytes = sum(len(line.encode("utf-8")) for line in LINES if line.strip())
    assert result["tokens"] == count and result["bytes"] == n_bytes == 135
    assert result["nll_nats"] == pytest.approx(nll, rel=1e-5)
    assert result["loss"] == pytest.approx(nll / count, rel=1e-5)
    assert result["perplexity"] == pytest.approx(math.exp(nll / count), rel=1e-5)
    assert result["bits_per_byte"] == pytest.approx(nll / math.log(2) / n_bytes, rel=1e-5)
    assert result["tokens_per_byte"] == pytest.approx(count / n_bytes)
    assert result["documents"] == 4
    assert result["sequences"] > (1 if max_length < 20 else 0)
    # A sane random model: not far better than uniform over the vocabulary.
    assert result["loss"] > 0.5 * math.log(300)


def _hand_document_nll(model_dir: Path, max_length: int) -> tuple[list[float], list[int]]:
    """Per document, its summed NLL and token count: every packed sequence scored alone,
    each predicted token credited to the document it belongs to by walking the stream."""
    tok = tf.AutoTokenizer.from_pretrained(model_dir)
    model = tf.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    first = next(i for i in (tok.bos_token_id, tok.cls_token_id, tok.eos_token_id)
                 if i is not None)
    sep = tok.eos_token_id if tok.eos_token_id is not None else tok.sep_token_id
    docs = [line for line in LINES if line.strip()]
    stream: list[tuple[int, int | None]] = []  # (token, its document or None)
    for index, line in enumerate(docs):
        stream += [(i, index) for i in tok(line, add_special_tokens=False)["input_ids"]]
        stream.append((sep, None))
    nll, tokens = [0.0] * len(docs), [0] * len(docs)
    for start in range(0, len(stream), max_length - 1):
        chunk = stream[start : start + max_length - 1]
        with torch.no_grad():
            logits = model(torch.tensor([[first] + [i for i, _ in chunk]])).logits[0]
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        for position, (token, document) in enumerate(chunk):
            if document is not None:
                nll[document] -= logprobs[position, token].item()
                tokens[document] += 1
    return nll, tokens


@pytest.mark.parametrize("max_length,batch_size", [(64, 8), (7, 3)])
def test_per_document_losses_match_hand_computation_and_sum_to_the_aggregates(
        model_dir, text_file, max_length, batch_size):
    result = evaluate_text(model_dir, text_file, max_length=max_length,
                           batch_size=batch_size, device="cpu")
    nll, tokens = _hand_document_nll(model_dir, max_length)
    docs = [line for line in LINES if line.strip()]
    assert result["document_bytes"] == [len(d.encode("utf-8")) for d in docs]
    assert result["document_tokens"] == tokens
    assert result["document_nll_nats"] == pytest.approx(nll, rel=1e-5)
    # every aggregate is recomputable from the per-document lists
    assert sum(result["document_tokens"]) == result["tokens"]
    assert sum(result["document_bytes"]) == result["bytes"]
    assert len(result["document_bytes"]) == result["documents"]
    assert result["bits_per_byte"] == pytest.approx(
        sum(result["document_nll_nats"]) / (math.log(2) * sum(result["document_bytes"])),
        rel=1e-6)  # float32 sums per sequence against float64 per document


def test_half_precision_checkpoint_runs_in_float32_on_the_cpu(model_dir, text_file, tmp_path):
    """CPUs without bf16 units emulate it, slowly: a bf16 checkpoint is evaluated in float32
    there, and says so."""
    model = tf.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
    model.save_pretrained(tmp_path / "bf16")
    tf.AutoTokenizer.from_pretrained(model_dir).save_pretrained(tmp_path / "bf16")
    result = evaluate_text(tmp_path / "bf16", text_file, max_length=64, device="cpu")
    nll, _ = _hand_nll(tmp_path / "bf16", 64)
    assert result["dtype"] == "float32"
    assert result["nll_nats"] == pytest.approx(nll, rel=1e-5)


def test_max_lines_and_position_cap(model_dir, text_file):
    one = evaluate_text(model_dir, text_file, max_lines=1, max_length=4096)
    assert one["documents"] == 1 and one["bytes"] == len(LINES[0].encode("utf-8"))
    assert one["max_length"] == 64  # capped at the model's positions


def test_fertility_hand_example(tmp_path):
    vocab = {"[UNK]": 0, "a": 1, "##b": 2, "c": 3}
    backend = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")
    path = tmp_path / "t.txt"
    path.write_text("ab a\n\nabb  c\n", encoding="utf-8")
    # ab -> a ##b, a -> a, abb -> a ##b ##b, c -> c: 7 tokens for 4 words
    result = fertility(tok, path)
    assert (result["tokens"], result["words"], result["lines"]) == (7, 4, 2)
    assert result["fertility"] == pytest.approx(7 / 4)
    tok.save_pretrained(tmp_path / "tok")
    assert fertility(tmp_path / "tok", path)["fertility"] == pytest.approx(7 / 4)
